"""Every method under bf16 and fp16 on the CPU: two steps of each registered method from the tiny runs
of tests/methods/same_losses.py, beside the same two steps in fp32 from the same start and seed.

Stated tolerances. Every logged number finite at both steps. The methods that draw no caption (XE, the
embeddings, the critic): every logged loss within 1% (or 1e-3 absolute, for losses near 0) of fp32's at
both steps in bf16; in fp16 at the first step only, since fp16's gradient scaler skips the steps whose
scaled gradients overflow while it finds its scale (here the first two of the retriever's, so its second
step is computed from other weights than fp32's). The methods that sample or search: at the first step (same weights, same batch, same random
numbers) every loss within 20% of fp32's, and the median difference over all of them within 0.5%. The
first bound is loose because a caption is drawn from probabilities that bf16 rounds: a draw that lands
within that rounding of a boundary picks another word (measured: one caption of 16 in actor-critic's
first step, which moved its loss by 14%; every other method drew fp32's captions and is within 1%).
Each run starts in the phase that trains the policy (no value or discriminator pretraining), so that the
policy's loss is the one compared; HRL switches phase every step, so both of its phases run.
(That a bf16 run learns at all, its weights read fresh after each step: tests/train/test_session.py and
tests/test_precision_engine.py.)"""

from __future__ import annotations

import math
import statistics

import pytest

from rlcap import api
from rlcap.train.logger import read_log
from rlcap.methods.registry import METHODS
from tests.methods.same_losses import CONFIGS

pytestmark = pytest.mark.slow

EXACT, SAMPLED, SAMPLED_MEDIAN, ABSOLUTE = 0.01, 0.20, 0.005, 1e-3
NO_SAMPLING = {"xe", "embedding", "retriever", "critic"}


def _commands(recipe_runs) -> dict[str, tuple[str, list[str]]]:
    """(recipe, overrides) of one run of every method, starting where its recipe run started."""
    commands = dict(recipe_runs[1])
    scst, wtf = commands["scst"][1], commands["wtf_rl"][1]
    rewards = [o for o in wtf if o.startswith("reward.")]
    return {
        **commands,
        "ac": (commands["ac"][0], [*commands["ac"][1], "ac.value_pretrain_epochs=0"]),
        "wtf_rl": (commands["wtf_rl"][0], [*wtf, "wtf_rl.discriminator_pretrain_epochs=0"]),
        "hrl": (commands["hrl"][0], [*commands["hrl"][1], "hrl.switch_every=1"]),
        "sll_me": ("shapes_sll_me", scst),
        "grpo": ("shapes_grpo", [*scst, "grpo.iterations=2", "rl.kl_coef=0.04"]),
        "mixer": ("shapes_mixer", [*scst, "mixer.start=2", "mixer.delta=1", "mixer.baseline_hidden=16"]),
        "scst_discriminator": ("shapes_scst_discriminator", [
            *scst, *rewards, "decode.beam_size=2", "scst_discriminator.discriminator_hidden=16",
            "scst_discriminator.discriminator_pretrain_epochs=0"]),
    }


def _two_steps(recipe: str, overrides: list[str], out, precision: str) -> tuple[str, list[dict]]:
    base = [o for o in overrides if not o.startswith(("out_dir=", "max_steps="))]
    cfg = api.load_run_config(str(CONFIGS / f"{recipe}.yaml"),
                              [*base, f"out_dir={out}", "max_steps=2", f"precision={precision}"])
    api.train(cfg)
    return cfg.algorithm, [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]


@pytest.fixture(scope="module")
def fp32_runs(recipe_runs, tmp_path_factory):
    """{run name: (algorithm, fp32's two logged steps)}."""
    folder = tmp_path_factory.mktemp("low_precision_fp32")
    return {name: _two_steps(recipe, overrides, folder / name, "fp32")
            for name, (recipe, overrides) in _commands(recipe_runs).items()}


@pytest.fixture(scope="module", params=["bf16", "fp16"])
def both_precisions(request, recipe_runs, fp32_runs, tmp_path_factory):
    """(precision, {run name: (algorithm, fp32's two logged steps, the low precision's)})."""
    folder = tmp_path_factory.mktemp(f"low_precision_{request.param}")
    runs = {}
    for name, (recipe, overrides) in _commands(recipe_runs).items():
        algorithm, fp32 = fp32_runs[name]
        runs[name] = (algorithm, fp32, _two_steps(recipe, overrides, folder / name, request.param)[1])
    return request.param, runs


def test_every_method_runs_in_low_precision(both_precisions):
    _, runs = both_precisions
    assert {algorithm for algorithm, _, _ in runs.values()} == set(METHODS)
    for name, (_, fp32, low) in runs.items():
        assert len(low) == len(fp32) == 2, name
        for row in low:
            numbers = {k: v for k, v in row.items() if isinstance(v, float)}
            assert numbers and all(math.isfinite(v) for v in numbers.values()), (name, row)


def _difference(a: float, b: float) -> float:
    """|b - a| relative to |a|, counting 1e-3 absolute as no difference (losses near 0)."""
    return 0.0 if abs(b - a) <= ABSOLUTE else abs(b - a) / abs(a)


def test_every_loss_in_low_precision_is_within_tolerance_of_fp32(both_precisions):
    precision, runs = both_precisions
    sampled = []
    for name, (algorithm, fp32, low) in runs.items():
        exact = algorithm in NO_SAMPLING
        for a, b in zip(fp32[: 2 if exact and precision == "bf16" else 1], low):
            losses = [k for k in a if "loss" in k]
            assert losses, (name, a)
            for key in losses:
                difference = _difference(a[key], b[key])
                assert difference <= (EXACT if exact else SAMPLED), (name, a["step"], key, a[key], b[key])
                if not exact:
                    sampled.append(difference)
    assert len(sampled) >= 9  # every sequence-level method's first step
    assert statistics.median(sampled) <= SAMPLED_MEDIAN, sorted(sampled)


def test_the_policy_loss_of_every_sequence_level_method_was_computed(both_precisions):
    """Not a run that only pretrained a value network or a discriminator: its policy's loss is not 0."""
    for name, (algorithm, _, low) in both_precisions[1].items():
        if algorithm not in NO_SAMPLING:
            assert low[0]["loss"] != 0.0, (name, low[0])
