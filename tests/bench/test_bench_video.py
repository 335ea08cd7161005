"""The video bench (`make bench-video`) end to end on tiny clips with [Chen20]'s SLL-ME and SLL-SLE beside the
RL-baseline: the shipped moving-shapes recipes, one XE stage shared, and the video table's columns."""

import json
import math
from pathlib import Path

from rlcap.bench.methods import run_benchmark
from rlcap.bench.registry import bench_rows, stages_of
from rlcap.bench.report import video_markdown
from rlcap.methods import load_run_config
from tests.tiny import make_tiny_clips, tiny_overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
METHODS = ["xe", "scst", "sll_me", "sll_sle"]  # [Wang18]'s baselines and [Chen20]'s Table 3 rows
NEW = ["sll_me", "sll_sle"]
DIVERSITY_COLUMNS = [f"{s} {c}" for s in ("rs", "bs") for c in ("CIDEr", "Div-1", "Div-2", "mBLEU-4")]


def test_video_bench_tiny_with_sll_me_and_sll_sle(tmp_path):
    ann, feats = make_tiny_clips(tmp_path)
    tiny = [o for o in tiny_overrides(ann, feats, "unused", arch="updown", **{"data.max_len": 24, "decode.max_len": 24,
                                                                              "val.max_images": 4})
            if not o.startswith(("out_dir=", "data.dataset=", "data.features="))]
    rl = [o for o in tiny if not o.startswith("model.")] + ["rl.epochs=1", "rl.batch_size=20"]
    out = tmp_path / "bench"
    # the new rows only: each evaluation runs METEOR's Java scorer (about 2.5 s), XE trains all the same
    results = run_benchmark("moving-shapes", NEW, out, configs=CONFIGS, rl_overrides=rl,
                            xe_overrides=[*tiny, "xe.epochs=1", "xe.batch_size=20"], prepared=(ann, feats))
    assert list(results["methods"]) == NEW
    for method in NEW:  # from the one XE stage, by their own loops
        config = json.loads((out / method / "config.json").read_text())
        assert config["algorithm"] == method and config["init_from"] == str(out / "xe" / "best")
    assert sorted(p.name for p in out.iterdir() if (p / "config.json").is_file()) == ["sll_me", "sll_sle", "xe"]

    lines = video_markdown(results).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:9] == ["method", "Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE"]
    assert head[9:] == DIVERSITY_COLUMNS
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}
    assert list(rows) == NEW
    for method in NEW:
        values = [float(v) for v in rows[method]]
        assert len(values) == len(head) - 1 and all(math.isfinite(v) for v in values)
        row = results["methods"][method]
        for how in ("rs", "bs"):  # fractions of distinct n-grams, and BLEU-4 against the other 4
            assert all(0.0 <= row[how][c] <= 1.0 for c in ("Div-1", "Div-2", "mBLEU-4"))


def test_video_markdown_layout():
    """[Wang18]'s Table 2 columns x 100, then [Chen20]'s Table 4 sets: CIDEr-D x 100, diversity as fractions."""
    beam = {"Bleu_1": 0.7, "Bleu_2": 0.6, "Bleu_3": 0.5, "Bleu_4": 0.4, "METEOR": 0.28, "ROUGE_L": 0.5,
            "CIDEr": 1.316, "SPICE": 0.382}
    row = {"beam": beam, "rs": {"CIDEr": 0.9, "Div-1": 0.31, "Div-2": 0.42, "mBLEU-4": 0.612},
           "bs": {"CIDEr": 1.2055, "Div-1": 0.2, "Div-2": 0.3, "mBLEU-4": 0.7}}
    lines = video_markdown({"methods": {"sll_sle": row}}).splitlines()
    assert lines[1] == "|---|" + "---:|" * 16
    assert lines[2] == ("| sll_sle | 70.0 | 60.0 | 50.0 | 40.0 | 28.0 | 50.0 | 131.6 | 38.2 | 90.0 | 0.310 | 0.420 | "
                        "0.612 | 120.5 | 0.200 | 0.300 | 0.700 |")


def test_the_exploration_rows_share_the_rl_baseline_budget():
    """SLL-ME and SLL-SLE on video differ from the RL-baseline's recipe in their own section only, and
    share its stages ([Chen20]'s Table 3: SLL, SLL-ME, SLL-SLE from one model, one budget)."""
    rl, me, sle = (load_run_config(CONFIGS / f"moving-shapes_{r}.yaml") for r in ("scst", "sll_me", "sll_sle"))
    for cfg in (me, sle):
        for section in ("data", "optim", "rl", "reward", "val", "decode"):
            assert getattr(cfg, section) == getattr(rl, section), section
        assert cfg.seed == rl.seed and cfg.init_from == rl.init_from
    assert me.sll_me.baseline == rl.scst.baseline == sle.sll_sle.baseline == "greedy"
    assert me.sll_me.entropy_weight == 0.01 and sle.sll_sle.alpha == 0.5
    video = bench_rows("moving-shapes")
    assert [s.name for s in stages_of(METHODS, "moving-shapes")] == METHODS
    assert {video[m].stages[-1].init_from for m in ("scst", "sll_me", "sll_sle")} == {"xe"}
