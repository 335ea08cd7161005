"""bench-trl's harness (benchmarks/bench_trl.py, grpo_sides.py): the phase timers' nesting, the summary and goals on
hand-made step records, --keep's rows of an earlier run and its refusals, rlcap's side at a tiny size (no trl
needed), and, where trl is installed, TRL's KL term set as rlcap's and the whole benchmark at a tiny size."""

from __future__ import annotations

import dataclasses
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
    from rlcap.models.hf.build_vlm import build_vlm
    from rlcap.models.hf.parts import language_parameters

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


def _results(bench_trl, sides, betas, minutes, argv, reward=0.25):
    """A run's results.json as :func:`bench_trl.measure` writes it, from hand-made step records."""
    settings = sides.Settings(model="runs/qwen2_vl_small", dataset="d.json", store="s.h5", out="o", steps=3, images=4,
                              g=8, max_len=16, lr=1e-4, threads=1)
    rows = [{"side": side, "beta": beta, **bench_trl.summary(
        {"steps": [_record(9.0, reward), _record(2.0 + i, reward), _record(None, reward)], "rss_gb": 1.0 + i,
         "gpu_gb": None}, samples=32)} for beta in betas for i, side in enumerate(sides.SIDES)]
    return {"argv": argv, "settings": settings.__dict__, "rows": rows, "encode_s": 0.0, "pictures": 24,
            "seconds": 60.0 * minutes, "load": [0.5, 0.5], "gpu": None, "machine": "a test machine"}


def test_keep_takes_the_other_betas_lines_as_written_and_names_their_run(bench, tmp_path):
    """--keep: the rows and lines of beta 0 from the section already in the doc, as it wrote them, beside this
    run's beta 0.04, under a line naming the run that measured them; kept again, they keep naming that run."""
    bench_trl, sides = bench
    doc = tmp_path / "BENCHMARKS.md"
    before = bench_trl.section(_results(bench_trl, sides, [0.0, 0.04], 13, []))
    bench_trl.replace_section("bench-trl", before, doc)
    settings = sides.Settings(**_results(bench_trl, sides, [0.04], 7, [])["settings"])
    kept = bench_trl.keep_from(doc, "bench-trl", settings, [0.04])
    assert [k["betas"] for k in kept] == [[0.0]]
    assert kept[0]["source"].startswith("command `make bench-trl`, 13 min. Machine: a test machine. ")
    old = before.splitlines()
    assert kept[0]["rows"] == [line for line in old if line.startswith("| 0 |")] and len(kept[0]["rows"]) == 3
    assert kept[0]["goals"] == [line for line in old if line.startswith("- beta 0, against")] and kept[0]["goals"]
    assert len(kept[0]["times"]) == 3 and all(line.startswith("- beta 0: ") for line in kept[0]["times"])

    after = bench_trl.section({**_results(bench_trl, sides, [0.04], 7, ["--betas", "0.04", "--keep"], 0.5),
                               "kept": kept}).splitlines()
    assert after[2].startswith("Command: `python benchmarks/bench_trl.py --betas 0.04 --keep`, 7 min, the rows of "
                               "beta 0.04. Machine: a test machine.")
    assert after[4] == f"{bench_trl.KEPT} the rows of beta 0: {kept[0]['source']}"
    rows = [line for line in after if bench_trl.line_beta(line) is not None and line.startswith("| ")]
    assert rows[:3] == kept[0]["rows"] and [r.split(" | ")[:2] for r in rows[3:]] == [
        ["| 0.04", side] for side in sides.SIDES] and "0.5000 +- 0.0000" in rows[3]
    assert "| `beta` | `rl.kl_coef` | 0, 0.04 |" in after
    bench_trl.replace_section("bench-trl", "\n".join(after), doc)
    again = bench_trl.keep_from(doc, "bench-trl", settings, [0.04])
    assert again == kept  # the rows still name the run that measured them


def test_keep_refuses_rows_measured_with_other_settings(bench, tmp_path):
    """Rows of beta 0 from a run without the use_bias_correction_kl row (it acts only with a KL term) are kept;
    rows of beta 0.04 from it, or rows measured with another G, are refused in one line."""
    bench_trl, sides = bench
    doc = tmp_path / "BENCHMARKS.md"
    lines = bench_trl.section(_results(bench_trl, sides, [0.0, 0.04], 13, [])).splitlines()
    older = [line for line in lines if not line.startswith("| `use_bias_correction_kl")]
    assert len(older) == len(lines) - 1
    bench_trl.replace_section("bench-trl", "\n".join(older), doc)
    settings = sides.Settings(**_results(bench_trl, sides, [0.04], 7, [])["settings"])
    assert [k["betas"] for k in bench_trl.keep_from(doc, "bench-trl", settings, [0.04])] == [[0.0]]
    with pytest.raises(RuntimeError, match=r"^bench_trl --keep: the rows of beta 0.04 in .* were measured with other "
                                           r"settings \(\| `use_bias_correction_kl"):
        bench_trl.keep_from(doc, "bench-trl", settings, [0.0])
    bench_trl.replace_section("bench-trl", "\n".join(lines), doc)
    with pytest.raises(RuntimeError, match=r"measured with other settings \(\| `num_generations` \| `rl.n_samples` \| "
                                           r"4 \|; \| `num_generations` \| `rl.n_samples` \| 8 \|; The model: "):
        bench_trl.keep_from(doc, "bench-trl", dataclasses.replace(settings, g=4), [0.04])
    assert bench_trl.keep_from(tmp_path / "none.md", "bench-trl", settings, [0.04]) == []


def test_trls_side_computes_the_kl_term_as_rlcaps(bench, tmp_path):
    """TRL's GRPOConfig in the bench: use_bias_correction_kl off (TRL's default multiplies k3 by the ratio), so that
    at beta > 0 both sides follow one gradient; the settings table says so."""
    pytest.importorskip("trl")
    bench_trl, sides = bench
    s = sides.Settings(model="m", dataset="d", store="s", out=str(tmp_path), beta=0.04)
    config = sides.trl_config(s, cuda=False)
    assert config.use_bias_correction_kl is False and config.beta == 0.04
    assert ("| `use_bias_correction_kl = false (TRL's default: true)` | `grpo.kl_ratio = false` |  |"
            in bench_trl.settings_table(s, [0.04]))
