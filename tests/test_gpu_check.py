"""benchmarks/gpu_checks.py: every comparison of the GPU check passes CPU against CPU, and each fails when the
second copy computes something else (a weight changed, a layer at lower precision, a wrong device reward).
The tests marked ``cuda`` run the same checks CPU against CUDA (``pytest -m cuda`` on a GPU machine)."""

import copy
import functools
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rlcap.data.vocab import EOS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    import gpu_checks
finally:
    sys.path.pop(0)

SIZES = gpu_checks.CheckSizes(images=16, hidden=32, xe_steps=40, samples=192)
CPU = ("cpu", "cpu")
CHECKS = ["teacher-forced log-probs", "XE loss", "SCST loss", "SCST gradients", "greedy tokens", "greedy log-probs",
          "beam 3 tokens", "beam 3 log-probs", "CIDEr-D reward, device against CPU", "mean CIDEr-D of 192 samples"]
EXACT = CHECKS[:8]  # the same kernels on the same inputs: no difference at all
no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(scope="module", params=gpu_checks.ARCHS)
def setup(request):
    return gpu_checks.make_setup(request.param, SIZES)


@pytest.fixture(scope="module")
def fc_setup():
    return gpu_checks.make_setup("fc", SIZES)


def by_check(rows):
    return {r.check: r for r in rows}


def output_layer(model):
    """The layer that gives the vocabulary's logits (the last Linear with one output per word)."""
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == model.vocab_size][-1]


def test_every_comparison_passes_cpu_against_cpu(setup):
    rows = gpu_checks.compare(setup, copy.deepcopy(setup.model), CPU)
    assert [r.check for r in rows] == CHECKS and all(r.arch == setup.arch for r in rows)
    assert gpu_checks.failures(rows) == []
    assert all(r.value == 0 for r in rows if r.check in EXACT)
    sampled = rows[-1]  # two streams (seeds 1 and 2) of one distribution: means apart, within the bound
    assert 0 < sampled.value <= sampled.bound and "sd" in sampled.detail


def changed_end_bias(setup, shift):
    """A copy of the captioner whose output bias of the end word is ``shift`` higher."""
    changed = copy.deepcopy(setup.model)
    with torch.no_grad():
        output_layer(changed).bias[EOS] += shift
    return changed


def test_one_changed_weight_fails_the_deterministic_checks(setup):
    """The end word's output bias raised on the second copy: other log-probabilities, losses and
    gradients, and decodes that end sooner or give their words other log-probabilities."""
    rows = by_check(gpu_checks.compare(setup, changed_end_bias(setup, 2.0), CPU))
    failed = {check for check, r in rows.items() if not r.passed}
    assert {"teacher-forced log-probs", "XE loss", "SCST loss", "SCST gradients"} <= failed
    assert {"greedy tokens", "greedy log-probs"} & failed and {"beam 3 tokens", "beam 3 log-probs"} & failed
    assert "CIDEr-D reward, device against CPU" not in failed  # (it scores device a's tokens)
    assert rows["SCST gradients"].detail.startswith("largest in ")
    for decoder in ("greedy", "beam 3"):
        if not rows[f"{decoder} tokens"].passed:
            assert rows[f"{decoder} tokens"].detail.split("; ")[1].startswith("first: caption ")
    lines = gpu_checks.failures(list(rows.values()))
    assert any(line.startswith(f"{setup.arch}: SCST loss: ") for line in lines)


def test_samples_of_another_distribution_fail_the_sampling_check(setup):
    """The end word made near certain on the second copy: its samples end at once, their mean reward
    falls outside the bound (which the 192 samples of each device put at about 0.2 here)."""
    [sampled] = gpu_checks.sampling(setup, (setup.model, changed_end_bias(setup, 10.0)), CPU)
    assert not sampled.passed and sampled.value > sampled.bound > 0


def test_a_layer_at_lower_precision_fails_the_log_probs_and_gradients(setup, monkeypatch):
    """The second copy's output layer in bfloat16 (as TF32 left on, or a wrong kernel, would compute it)."""
    changed = copy.deepcopy(setup.model)
    layer = output_layer(changed)
    monkeypatch.setattr(layer, "forward", lambda x: F.linear(x.bfloat16(), layer.weight.bfloat16(),
                                                             layer.bias.bfloat16()).float())
    rows = by_check(gpu_checks.compare(setup, changed, CPU))
    for check in ("teacher-forced log-probs", "SCST gradients"):  # (the XE loss, a mean, may average the errors out)
        assert not rows[check].passed, rows[check]
    assert rows["teacher-forced log-probs"].detail.startswith("caption ")


def test_rounding_differences_pass(setup):
    """A copy whose linear layers compute in float64, then round to float32: differences of the size two
    fp32 devices make, well inside every bound."""
    exact = copy.deepcopy(setup.model)
    for layer in (m for m in exact.modules() if isinstance(m, torch.nn.Linear)):
        layer.forward = functools.partial(in_float64, layer)
    rows = gpu_checks.compare(setup, exact, CPU)
    assert gpu_checks.failures(rows) == []
    for r in rows[:8]:
        assert r.value <= r.bound / 10, r
    assert rows[0].value > 0  # (the float64 layers did compute otherwise)


def in_float64(layer, x):
    bias = None if layer.bias is None else layer.bias.double()
    return F.linear(x.double(), layer.weight.double(), bias).float()


class ShiftedReward:
    """The device CIDEr-D reward with its scores moved by ``shift``: what a wrong device kernel would give."""

    def __init__(self, reward, shift):
        self.reward, self.shift = reward, shift

    def score_tokens(self, tokens, image_ids):
        return self.reward.score_tokens(tokens, image_ids) + self.shift


def test_the_device_reward_check_passes_and_fails_when_it_should(fc_setup, monkeypatch):
    setup = fc_setup
    tokens = gpu_checks.greedy(setup.model, setup.feats, SIZES.max_len).tokens
    [same] = gpu_checks.reward_on_tokens(setup, tokens, "cpu")
    assert same.passed and same.value <= 1e-6, same
    real = gpu_checks.device_reward
    monkeypatch.setattr(gpu_checks, "device_reward", lambda setup, device: ShiftedReward(real(setup, device), 0.01))
    [off] = gpu_checks.reward_on_tokens(setup, tokens, "cpu")
    assert not off.passed and off.value == pytest.approx(0.01, abs=1e-5) and off.detail.startswith("caption ")


@pytest.mark.cuda
@no_cuda
@pytest.mark.parametrize("arch", gpu_checks.ARCHS)
def test_cuda_agrees_with_the_cpu(arch):
    rows = gpu_checks.run_checks(arch, gpu_checks.CheckSizes(), ("cpu", "cuda"))
    assert [r.check for r in rows] == CHECKS[:-1] + ["mean CIDEr-D of 1000 samples"]
    assert gpu_checks.failures(rows) == []
