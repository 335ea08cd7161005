"""benchmarks/bench_online_tokens.py's reading of its runs (make bench-scale-vlm, the online section): the steps a run's
log times, and the goal read on every round's steps together, on logs and figures made by hand."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    import bench_online_tokens
finally:
    sys.path.pop(0)


def test_a_run_is_timed_from_its_second_training_step(tmp_path):
    records = [{"split": "note", "time": 0.0}, {"split": "train", "time": 10.0}, {"split": "train", "time": 12.0},
               {"split": "val", "time": 12.5}, {"split": "train", "time": 13.0}, {"split": "train", "time": 14.5}]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bench_online_tokens.timed_steps(tmp_path) == (3, pytest.approx(4.5))  # steps 2-4, from the first's end


def test_the_goal_is_read_on_every_rounds_steps_together():
    found = {"store": {"xe": [(48, 6.0), (48, 4.0)], "scst": [(16, 4.0), (16, 4.0)]},
             "online": {"xe": [(48, 8.0), (48, 12.0)], "scst": [(16, 2.0), (16, 6.0)]}}
    lines, ratio = bench_online_tokens.table(found)
    # XE: the store 96 steps in 10 s, online 96 in 20 s: 0.5x, where the rounds' own ratios are 0.75x and 0.33x
    assert ratio["xe"] == pytest.approx(0.5) and ratio["scst"] == pytest.approx(1.0)
    assert "| XE | 1 | 8.00 | 6.00 | 0.75x |" in lines and "| XE | 2 | 12.00 | 4.00 | 0.33x |" in lines
    assert "| XE | all 2 (96 steps a route) | 9.60 | 4.80 | **0.50x** |" in lines
    assert "| SCST | 1 | 4.00 | 8.00 | 2.00x |" in lines


def test_each_online_route_is_read_against_the_store():
    found = {"store": {"xe": [(48, 6.0)], "scst": [(16, 4.0)]}, "online": {"xe": [(48, 8.0)], "scst": [(16, 4.0)]},
             "process": {"xe": [(48, 12.0)], "scst": [(16, 8.0)]}}
    lines, ratio = bench_online_tokens.table(found)
    assert ratio == pytest.approx({"xe": 0.75, "scst": 1.0, "xe_process": 0.5, "scst_process": 0.5})
    assert lines[0] == ("| run | round | store steps/s | online steps/s | online / store | process steps/s | "
                        "process / store |")
    assert "| XE | 1 | 8.00 | 6.00 | 0.75x | 4.00 | 0.50x |" in lines
    assert "| SCST | all 1 (16 steps a route) | 4.00 | 4.00 | **1.00x** | 2.00 | **0.50x** |" in lines
