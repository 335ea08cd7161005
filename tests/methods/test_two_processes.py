"""Every kind of method runs and resumes under torchrun with 2 gloo processes: actor-critic (its value network a
second part, its value pretraining a phase of its own), PG-SPIDEr (Monte-Carlo rollouts, a learned baseline),
WTF-RL (a discriminator, its pretraining, the retrieval reward), HRL (alternating phases, two baselines) and
MIXER, each the tiny run of tests/methods/same_losses.py launched again for 3 steps; MIXER's then resumed to 5.
The others resume exactly in one process (test_actor_critic_resume.py, test_pg.py, test_wtf_rl.py,
test_hrl_critic.py), and a run killed under torchrun resumes exactly in test_distributed.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlcap.train.logger import read_log
from tests.methods.same_losses import CONFIGS
from tests.train.killing import REPO

pytestmark = pytest.mark.slow


def _torchrun(recipe: str, overrides: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "rlcap", "train", str(CONFIGS / f"{recipe}.yaml"), *overrides],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=900)


def _runs_and_resumes(recipe: str, overrides: list[str], out, resume: bool = True) -> None:
    base = [o for o in overrides if not o.startswith(("out_dir=", "max_steps=", "threads="))]
    base += [f"out_dir={out}", "threads=1"]
    first = _torchrun(recipe, [*base, "max_steps=3"])
    assert first.returncode == 0, first.stderr[-3000:]
    if resume:
        again = _torchrun(recipe, [*base, "max_steps=5", "resume=true"])
        assert again.returncode == 0, again.stderr[-3000:]
    steps = [r["step"] for r in read_log(out / "log.jsonl") if r["split"] == "train"]
    # rank 0 logs each step once; the resumed run goes on from step 3
    assert steps == ([1, 2, 3, 4, 5] if resume else [1, 2, 3])
    assert json.loads((out / "last" / "checkpoint.json").read_text())["world_size"] == 2


@pytest.mark.parametrize("name", ["ac", "pg_spider", "wtf_rl", "hrl"])
def test_runs_under_two_processes(recipe_runs, tmp_path, name):
    recipe, overrides = recipe_runs[1][name]
    _runs_and_resumes(recipe, overrides, tmp_path / name, resume=False)


def test_mixer_runs_and_resumes_under_two_processes(recipe_runs, tmp_path):
    """MIXER (XE on the first M reference words, REINFORCE on the rest, a learned baseline): the tiny PG-SPIDEr
    run's data and start with the MIXER recipe, M = 2 so that both parts of its loss are trained."""
    _, overrides = recipe_runs[1]["pg_spider"]
    mixer = [o for o in overrides if not o.startswith("pg.")] + ["mixer.start=2", "mixer.delta=1",
                                                                 "mixer.baseline_hidden=16"]
    _runs_and_resumes("shapes_mixer", mixer, tmp_path / "mixer")
