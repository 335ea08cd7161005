"""Fault injection: SIGKILL at random moments, many inside checkpoint saves (slowed by a test hook).

Every resume must continue from the last complete checkpoint with the uninterrupted run's losses;
no checkpoint may be lost and no temporary file may be left after the next start. The same
routine, with its figures, is ``make bench-faults`` (docs/BENCHMARKS.md).
"""

import pytest

from rlcap import api
from tests.train.killing import run_with_faults
from tests.tiny import make_tiny_dataset, tiny_overrides

pytestmark = pytest.mark.slow

# per loop (make bench-faults kills each loop 10 times; every one of its kills landed inside a save, as the
# slowed saves take most of a tiny step's time)
KILLS = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    return (folder, *make_tiny_dataset(folder))


def test_xe_survives_random_kills(tiny, tmp_path):
    _, dataset, feats = tiny
    overrides = [*tiny_overrides(dataset, feats, tmp_path / "unused"), "xe.epochs=30", "save_every=1"]
    report = run_with_faults(overrides, tmp_path / "reference", tmp_path / "killed", KILLS, seed=1, window=(0.0, 2.0))
    assert report.kills == KILLS
    assert report.resumes_exact and report.checkpoints_lost == 0 and report.orphans == 0
    assert report.in_save >= 1, "some kills must land inside a save"


def test_scst_survives_random_kills(tiny, tmp_path):
    folder, dataset, feats = tiny
    init = folder / "xe"
    if not (init / "best").is_dir():
        api.train(api.load_run_config(None, tiny_overrides(dataset, feats, init, **{"xe.epochs": 2})))
    overrides = [*tiny_overrides(dataset, feats, tmp_path / "unused", **{
        "algorithm": "scst", "init_from": init / "best", "rl.epochs": 20, "rl.batch_size": 8, "rl.n_samples": 3,
        "decode.max_len": 6, "save_every": 1, "scst.baseline": "running_mean"})]
    report = run_with_faults(overrides, tmp_path / "reference", tmp_path / "killed", KILLS, seed=2, window=(0.0, 2.0))
    assert report.kills == KILLS
    assert report.resumes_exact and report.checkpoints_lost == 0 and report.orphans == 0
    assert report.in_save >= 1, "some kills must land inside a save"
