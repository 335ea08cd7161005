"""bench-trl's harness (benchmarks/bench_trl.py, grpo_sides.py): the phase timers' nesting, the summary and goals on
hand-made step records, rlcap's side at a tiny size (no trl needed), and the whole benchmark at a tiny size where
trl is installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_trl
        import grpo_sides
    finally:
        sys.path.remove(str(BENCHMARKS))
    return bench_trl, grpo_sides


class Clock:
    """A perf_counter that a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_phase_inside_another_is_taken_out_of_it(bench, monkeypatch):
    """The outer call (2 s of its own) holds an inner one (3 s): sampling 2, scoring 3, backward the rest."""
    _, sides = bench
    clock = Clock()
    monkeypatch.setattr(sides.time, "perf_counter", clock)

    class Owner:
        @staticmethod
        def inner():
            clock.now += 3.0
            return "scored"

        @staticmethod
        def outer():
            clock.now += 1.0
            out = Owner.inner()
            clock.now += 1.0
            return out

    timers = sides.Timers()
    timers.wrap(Owner, "inner", "scoring")
    timers.wrap(Owner, "outer", "sampling")
    assert Owner.outer() == "scored"
    timers.rewards.extend([1.0, 2.0])
    record = timers.take(10.0)
    assert record.pop("cpu_s") >= 0  # the process's own CPU time: not the test's clock
    assert record == {"sampling_s": 2.0, "scoring_s": 3.0, "reward_s": 0.0, "step_s": 10.0, "backward_s": 5.0,
                      "reward": 1.5}
    assert timers.take(None)["backward_s"] is None  # the last step: not timed
    timers.check_called()
    timers.wrap(Owner, "outer", "reward")
    with pytest.raises(RuntimeError, match="never called"):
        timers.check_called()


def _record(step_s, reward, sampling=1.0):
    return {"sampling_s": sampling, "scoring_s": 0.5, "reward_s": 0.1, "step_s": step_s,
            "cpu_s": None if step_s is None else 2 * step_s,
            "backward_s": None if step_s is None else step_s - sampling - 0.6, "reward": reward}


def test_summary_and_goals_from_the_step_records(bench):
    """Medians over the timed steps after the first; the mean reward over all steps with its standard error."""
    bench_trl, _ = bench
    trl = bench_trl.summary({"steps": [_record(9.0, 0.1), _record(4.0, 0.2), _record(6.0, 0.3), _record(None, 0.4)],
                             "rss_gb": 2.0, "gpu_gb": None}, samples=32)
    assert trl["step_s"] == 5.0 and trl["samples_per_s"] == 32 / 5.0 and trl["sampling_s"] == 1.0
    assert trl["reward_s"] == 0.1 and trl["backward_s"] == pytest.approx(3.4) and trl["reward"] == pytest.approx(0.25)
    assert trl["reward_se"] == pytest.approx(0.1290994 / 2) and trl["steps"] == 4
    rlcap = bench_trl.summary({"steps": [_record(9.0, 0.3), _record(2.0, 0.2), _record(None, 0.25)],
                               "rss_gb": 1.0, "gpu_gb": None}, samples=32)
    g = bench_trl.goals(trl, rlcap)
    assert g["speedup"] == 2.5 and g["cpu_speedup"] == 2.5 and g["memory"] == 0.5 and rlcap["cpu_s"] == 4.0
    assert g["reward_gap_se"] == pytest.approx(0.0, abs=1e-9)  # both means 0.25
    lines = bench_trl.goal_lines({("trl", 0.0): trl, ("rlcap", 0.0): rlcap}, [0.0])
    assert lines[0].startswith("- beta 0, against trl: rlcap at **2.50x** its samples/s (goal at least 2x: met; "
                               "**2.50x** by CPU seconds a step); peak RSS **0.50x** its (goal at most 1x: met)")
    assert bench_trl.goal_lines({("trl", 0.0): rlcap, ("rlcap", 0.0): trl}, [0.0])[0].count("missed") == 2
    with pytest.raises(RuntimeError, match="no timed step"):
        bench_trl.summary({"steps": [_record(9.0, 0.1), _record(None, 0.2)], "rss_gb": 1.0, "gpu_gb": None}, 4)


def _tiny(bench_trl, folder, steps=3):
    return bench_trl.prepare(folder, train_images=(steps + 1) * 2, size="tiny", seed=0)


def test_rlcap_side_times_every_phase_and_records_the_runs_rewards(bench, tmp_path):
    """rlcap's GRPO with a KL term on a tiny Qwen2-VL: a record a step, each phase timed, and the rewards the run
    logged."""
    bench_trl, sides = bench
    dataset, model, store, encode_s = _tiny(bench_trl, tmp_path)
    assert encode_s > 0 and store.is_file()
    settings = sides.Settings(model=str(model), dataset=str(dataset), store=str(store), out=str(tmp_path / "run"),
                              steps=3, images=2, g=2, max_len=4, beta=0.04, threads=1)
    run = bench_trl.run_side("rlcap", settings, tmp_path / "run")
    assert len(run["steps"]) == 3 and run["rss_gb"] > 0.1
    assert all(r[f"{p}_s"] > 0 for r in run["steps"][:2] for p in ("sampling", "scoring", "reward", "backward"))
    logged = [json.loads(line) for line in (tmp_path / "run" / "rlcap" / "log.jsonl").read_text().splitlines()]
    rewards = [r["reward"] for r in logged if r["split"] == "train"]
    assert [r["reward"] for r in run["steps"]] == pytest.approx(rewards, rel=1e-5)


def test_trl_lm_trains_what_rlcap_trains(bench, tmp_path):
    """The trl_lm side's model: the language model's parameters train, the picture's side (tower, merger) not."""
    _, sides = bench
    from rlcap.models.hf_vlm_build import build_vlm
    from rlcap.models.hf_vlm_parts import language_parameters

    folder = build_vlm("qwen2_vl", tmp_path / "m", ["a red circle", "a blue square"])
    whole, lm = sides.trl_model(str(folder), tower=True), sides.trl_model(str(folder), tower=False)
    assert all(p.requires_grad for p in whole.parameters())
    trained = {name for name, p in lm.named_parameters() if p.requires_grad}
    language = {id(p) for p in language_parameters(lm)}
    assert trained == {name for name, p in lm.named_parameters() if id(p) in language}
    assert trained and any(name.startswith("model.visual.") for name, _ in lm.named_parameters())
    assert not any(name.startswith("model.visual.") for name in trained)


@pytest.mark.slow
def test_bench_at_a_tiny_size_writes_its_section(bench, tmp_path):
    """The whole benchmark with trl installed: the three sides, the table and goals in the given doc, and the
    section written again from the results alone (--render)."""
    pytest.importorskip("trl")
    bench_trl, _ = bench
    doc = tmp_path / "BENCHMARKS.md"
    argv = ["--steps", "3", "--images", "2", "--g", "2", "--max-len", "4", "--betas", "0.04", "--size", "tiny",
            "--threads", "1", "--out", str(tmp_path / "b"), "--doc", str(doc)]
    assert bench_trl.main(argv) == 0
    text = doc.read_text()
    assert "<!-- bench-trl:start -->" in text or "<!-- bench-trl-gpu:start -->" in text
    rows = [line for line in text.splitlines() if line.startswith("| 0.04 |")]
    assert [row.split(" | ")[1] for row in rows] == ["trl", "trl_lm", "rlcap"]
    assert "- beta 0.04, against trl: rlcap at **" in text and "`num_generations` | `rl.n_samples` | 2 |" in text
    doc.write_text("")
    assert bench_trl.main([*argv, "--render"]) == 0 and doc.read_text().strip().endswith(text.strip()[-200:])
