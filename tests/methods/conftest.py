"""The tiny seeded runs of every recipe (tests/methods/same_losses.py), trained once per test session: their losses
are pinned by test_same_losses.py, and test_two_processes.py runs the same commands again under torchrun."""

import pytest

from tests.methods.same_losses import run_recipes


@pytest.fixture(scope="session")
def recipe_runs(tmp_path_factory):
    """(losses by run name, (recipe, overrides) by run name)."""
    commands: dict = {}
    # device=cpu given explicitly: every method's tensors follow the run's device (tests/test_devices.py)
    losses = run_recipes(tmp_path_factory.mktemp("same_losses"), commands, device="cpu")
    return losses, commands
