"""Refactorings keep behaviour: tiny seeded runs of the recipes (XE, SCST, SLL-SLE, actor-critic,
PG-SPIDEr, WTF-RL, HRL and the trainers of their auxiliary models) log the losses recorded in
tests/methods/data/same_losses.json by ``python -m tests.methods.same_losses --write``, from the code whose
behaviour a refactoring must keep.

The tolerance allows for another CPU's floating-point kernels (the values were recorded on an Intel
Xeon; an AMD EPYC rounds matrix products differently), far below what a changed loss, baseline,
reward or sampling order moves (the first step's loss already differs)."""

import json
import math

import pytest

from tests.methods.same_losses import RECORDED, STEPS


@pytest.fixture(scope="module")
def losses(recipe_runs):
    return recipe_runs[0]


RECIPES = sorted(json.loads(RECORDED.read_text(encoding="utf-8")))


def test_every_method_is_recorded():
    assert RECIPES == ["ac", "critic", "embedding", "hrl", "pg_spider", "retrieval", "scst", "sll_sle", "wtf_rl",
                       "xe", "xe_hrl"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_first_steps_log_the_recorded_losses(losses, recipe):
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))[recipe]
    now = losses[recipe]
    assert [r["step"] for r in now] == [r["step"] for r in recorded]
    assert 0 < len(now) <= STEPS
    for before, after in zip(recorded, now):
        assert set(before) == set(after)
        for key, value in before.items():
            assert math.isclose(after[key], value, rel_tol=1e-4, abs_tol=1e-6), (recipe, before["step"], key)
