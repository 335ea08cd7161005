"""The engine enters precision around a part's forward, and a method's body never does (docs/ARCHITECTURE.md):
the session hands a method its parts as ``rlcap.devices.InPrecision``, whose calls and model methods run under
autocast, and the functions a policy is given to (decoding, teacher forcing) enter it once through the model.
A bf16 method body gets bf16 logits from the policy, while its loss and reward reductions run in fp32."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from rlcap import api
from rlcap.devices import InPrecision, Precision, in_precision
from rlcap.methods import scst as scst_method
from rlcap.methods import xe as xe_method
from tests.tiny import make_tiny_dataset, tiny_overrides

SRC = Path(__file__).resolve().parents[1] / "src" / "rlcap"
ENTERS = re.compile(r"precision\.forward\(\)|autocast\(")  # the run's precision, or autocast by hand
RUN_PRECISION = re.compile(r"precision\.forward\(\)")
# where a run's precision is entered in src/: the parts the engine hands out (devices.py), and the inference
# paths that decode a checkpoint in its run's precision (validation's and eval's split, captions, lookahead)
SITES = {"devices.py", "decoding/split.py", "eval/lookahead.py", "api.py"}

BF16 = Precision("bf16", "cpu")


class Head(torch.nn.Module):
    """A policy-like module: a forward, a model method of its own, a submodule and a plain attribute."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)
        self.noise = 0.0

    def forward(self, x):
        return self.proj(x)

    def score(self, x):
        return self.proj(x).sum(-1)


@in_precision
def drive(model, x):
    """A decoding-like function: what it is given and whether its whole body runs under autocast."""
    return model, torch.is_autocast_enabled("cpu"), model(x)


def test_a_part_handed_out_runs_its_forward_passes_in_the_run_precision():
    head, x = Head(), torch.randn(2, 4)
    part = InPrecision(head, BF16)
    assert part(x).dtype == torch.bfloat16                 # __call__
    assert part.score(x).dtype == torch.bfloat16           # the model's own method
    assert part.proj(x).dtype == torch.bfloat16            # a submodule, wrapped in turn
    assert head(x).dtype == torch.float32                  # the module itself is untouched
    assert not torch.is_autocast_enabled("cpu")            # and nothing is left entered
    # torch.nn.Module's machinery passes through as it is; attributes are the module's
    assert part.train(False) is head and part.training is False
    assert [p is q for p, q in zip(part.parameters(), head.parameters())] == [True, True]
    part.noise = 0.5
    assert head.noise == 0.5 and part.module is head
    # a function given the part runs its whole body in the precision, on the module itself
    model, inside, out = drive(part, x)
    assert model is head and inside and out.dtype == torch.bfloat16
    # a plain module (a caller with its own precision: validation, rlcap eval) is passed as is
    model, inside, out = drive(head, x)
    assert model is head and not inside and out.dtype == torch.float32


def test_fp32_hands_out_parts_that_compute_as_the_module():
    head, x = Head(), torch.randn(2, 4)
    assert torch.equal(InPrecision(head, Precision("fp32", "cpu"))(x), head(x))


SEEN: dict[str, list] = {"xe": [], "reinforce": [], "reward": []}


def probe_reward(captions, batch):
    """A user's reward (dotted path): records whether it runs under autocast; one word a caption."""
    SEEN["reward"].append(torch.is_autocast_enabled("cpu"))
    return torch.tensor([float(len(c.split())) for c in captions])


def test_a_bf16_method_body_gets_bf16_logits_and_reduces_in_fp32(tmp_path, monkeypatch):
    dataset, feats = make_tiny_dataset(tmp_path)
    for seen in SEEN.values():
        seen.clear()

    def xe_loss(logits, *args, **kwargs):
        loss = real_xe(logits, *args, **kwargs)
        SEEN["xe"].append((logits.dtype, torch.is_autocast_enabled("cpu"), loss.dtype))
        return loss

    def reinforce_loss(logprobs, *args, **kwargs):
        loss = real_reinforce(logprobs, *args, **kwargs)
        SEEN["reinforce"].append((torch.is_autocast_enabled("cpu"), loss.dtype))
        return loss

    real_xe, real_reinforce = xe_method.xe_loss, scst_method.reinforce_loss
    monkeypatch.setattr(xe_method, "xe_loss", xe_loss)
    monkeypatch.setattr(scst_method, "reinforce_loss", reinforce_loss)
    common = {"model.arch": "updown", "precision": "bf16"}
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "xe", max_steps=2, **common)))
    # the policy's logits (session.model(...) in xe_step's body) in bf16; the loss outside autocast, in fp32
    assert SEEN["xe"] == [(torch.bfloat16, False, torch.float32)] * 2
    api.train(api.load_run_config(None, tiny_overrides(
        dataset, feats, tmp_path / "scst", algorithm="scst", init_from=tmp_path / "xe" / "last", max_steps=1,
        **common, **{"rl.batch_size": 4, "rl.n_samples": 2, "reward.weights": f"{{{__name__}:probe_reward: 1.0}}"})))
    # the samples' and the greedy baseline's rewards, and the REINFORCE reduction, outside autocast in fp32
    assert SEEN["reward"] == [False, False]
    assert SEEN["reinforce"] == [(False, torch.float32)]


def test_no_method_enters_precision_itself():
    found = [f"{path.relative_to(SRC)}:{n}: {line.strip()}" for path in sorted((SRC / "methods").rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if ENTERS.search(line) and not line.lstrip().startswith("#")]
    assert found == []


def test_the_run_precision_is_entered_in_few_places():
    """The engine's parts and the inference paths that decode in a checkpoint's precision: a new site is a
    change of this list. (Feature extraction's fp16 and the hand-written backward passes set autocast apart.)"""
    files = {str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
             if any(RUN_PRECISION.search(line) and not line.lstrip().startswith("#")
                    for line in path.read_text(encoding="utf-8").splitlines())}
    assert files == SITES
