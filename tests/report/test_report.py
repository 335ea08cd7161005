"""rlcap report: the layouts it reads, the figures it computes, and the page it writes (escaped, self-contained)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rlcap.cli import main
from rlcap.errors import RlcapError
from rlcap.metrics.retrieval import expected_ranks
from rlcap.report import write_report
from rlcap.report.collect import System, collect
from rlcap.train.logger import OWN_REWARD
from rlcap.report.stats import best_cells, diversity, gallery_ids
from tests.report.conftest import SCRIPT_CAPTION


def test_diversity_by_hand():
    d = diversity(["a red circle", "a red circle", "a red circle and a red square", "blue"], top=2, n=3)
    assert (d["captions"], d["distinct"], d["vocabulary"]) == (4, 3, 6)
    assert d["mean_words"] == pytest.approx((3 + 3 + 7 + 1) / 4)
    assert d["frequent"] == [("a red circle", 2), ("a red circle and a red square", 1)]
    assert d["ngrams"][0] == ("a red circle", 3)  # twice alone, once inside the long caption
    assert d["self_repeating"] == pytest.approx(1 / 4)  # "a red" twice in one caption


def test_best_cells_skip_references_and_know_which_way_is_better():
    systems = [System("xe", {"CIDEr": 1.0}, extra={"Self-BLEU": 80.0}),
               System("scst", {"CIDEr": 1.2}, extra={"Self-BLEU": 90.0}),
               System("nearest_neighbour", {"CIDEr": 2.0}, reference=True)]
    assert best_cells(systems, ["CIDEr"]) == {"CIDEr": "scst"}
    assert best_cells(systems, ["Self-BLEU"], "extra") == {"Self-BLEU": "xe"}  # lower is better


def test_gallery_sample_is_seeded_and_adds_each_pairs_extremes():
    ids = [str(i) for i in range(100)]
    xe = System("xe", {}, per_image={i: {"CIDEr": 1.0} for i in ids})
    scst = System("scst", {}, per_image={i: {"CIDEr": 1.0 + (int(i) - 50) / 100} for i in ids})
    shown, why = gallery_ids(ids, [xe, scst], sample=10, seed=3, everything=False, extremes=2)
    again, _ = gallery_ids(ids, [xe, scst], sample=10, seed=3, everything=False, extremes=2)
    assert shown == again and len({i for i in shown if why[i] == "sample"}) == 10
    assert why.get("99") in ("scst gained most over xe", "sample") and why.get("0") in ("scst lost most against xe",
                                                                                       "sample")
    assert {"99", "98", "0", "1"} <= set(shown) and len(shown) <= 14
    assert gallery_ids(ids, [xe, scst], 10, 3, everything=True)[0] == ids


def test_expected_ranks_share_ties():
    # image 0's caption ties with caption 1 for image 0; image 1 prefers caption 0
    sim = np.array([[0.5, 0.5, 0.1],
                    [0.9, 0.2, 0.1],
                    [0.0, 0.0, 1.0]])
    ranks = expected_ranks(sim)
    assert ranks["i2t"].tolist() == [1.5, 2.0, 1.0]
    assert ranks["t2i"].tolist() == [2.0, 2.0, 1.0]  # captions 0 and 1: another image scores higher
    with pytest.raises(RlcapError, match="square"):
        expected_ranks(np.zeros((2, 3)))


@pytest.mark.slow  # the tiny runs and bench of tests/report/conftest.py
def test_layouts(reported):
    runs = reported["runs"]
    both = collect(runs)
    assert both.kind == "runs" and [s.name for s in both.systems] == ["xe", "scst", "nearest_neighbour"]
    assert [s.reference for s in both.systems] == [False, False, True] and list(both.settings) == ["xe", "scst"]
    assert all(len(s.captions) == 6 and len(s.per_image) == 6 for s in both.systems)
    assert both.conventions and "scst" in both.conventions[0]
    run = collect(runs / "scst")
    assert run.kind == "run" and run.systems[0].log == runs / "scst" / "log.jsonl"
    assert collect(runs / "scst" / "best").source == runs / "scst"  # a checkpoint folder: its run
    evaluation = collect(runs / "xe" / "eval_test")
    assert evaluation.kind == "eval" and evaluation.split == "test"
    assert [s.name for s in evaluation.systems] == ["xe", "nearest_neighbour"]
    bench = collect(reported["bench"])
    assert bench.kind == "bench" and [s.name for s in bench.systems] == ["xe", "scst", "nearest_neighbour"]
    assert all(len(s.per_image) == 6 for s in bench.systems)
    with pytest.raises(RlcapError, match="no run"):
        collect(reported["bench"] / "captions")


@pytest.mark.slow  # the tiny runs and bench of tests/report/conftest.py
def test_page_escapes_captions_and_embeds_everything(reported, tmp_path):
    out = write_report(reported["runs"], tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    assert SCRIPT_CAPTION not in page and "&lt;script&gt;document.title" in page
    assert "&lt;b&gt;square&lt;/b&gt;" in page and "&amp; a" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from a network
    assert page.count('class="item"') == 6  # the 6 test images (fewer than the sample of 48)
    assert page.count("data:image/jpeg;base64,") == 6
    assert page.count("<svg") >= 3  # loss, reward, validation curves
    metrics = json.loads((reported["runs"] / "scst" / "eval_test" / "scores.json").read_text())["model"]
    assert f"{metrics['CIDEr']:.4f}" in page


@pytest.mark.slow  # the tiny runs and bench of tests/report/conftest.py
def test_missing_dataset_is_said_on_the_page(reported, tmp_path):
    out = write_report(reported["runs"], tmp_path / "r.html", dataset=tmp_path / "nowhere.json")
    page = out.read_text(encoding="utf-8")
    assert "not found (pass --dataset)" in page and page.count('class="item"') == 6 and "data:image" not in page


@pytest.mark.slow  # the tiny runs and bench of tests/report/conftest.py
def test_cli_and_bench_write_the_report(reported, tmp_path, capsys):
    assert (reported["bench"] / "report.html").exists()  # rlcap bench ends with it
    saved = json.loads((reported["bench"] / "captions" / "scst.json").read_text())
    assert set(saved) == {"captions", "per_image", "ranks"} and len(saved["captions"]) == 6
    assert main(["report", str(reported["bench"]), "--out", str(tmp_path / "b.html"), "--sample", "2"]) == 0
    assert f"report: {tmp_path / 'b.html'}" in capsys.readouterr().out
    page = (tmp_path / "b.html").read_text(encoding="utf-8")
    assert page.count('class="item"') >= 2 and "nearest_neighbour" in page
    assert main(["report", str(tmp_path / "missing")]) == 2


@pytest.mark.slow  # the tiny runs and bench of tests/report/conftest.py
def test_the_report_reads_captions_without_tokenizing_them(reported):
    from rlcap.data.readers import raw_captions, read_dataset

    with raw_captions():
        raw = read_dataset(reported["dataset"])
    assert raw[0].captions and raw[0].tokens == []
    assert read_dataset(reported["dataset"])[0].tokens  # outside it, as before


def test_settings_say_when_a_method_has_its_own_reward():
    from rlcap.report.page import settings_rows

    # the reward each run's log records it learned from (not what its method's code says)
    learned = {"scst": {"cider_d": 1.0}, "wtf_rl": OWN_REWARD}
    rows = dict(settings_rows({"scst": {"algorithm": "scst", "reward": {"weights": {"cider_d": 1.0}}},
                               "wtf_rl": {"algorithm": "wtf_rl", "reward": {"weights": {"cider_d": 1.0}}}},
                              learned=learned, epochs={"scst": 2}))
    assert rows["reward"] == ["{'cider_d': 1.0}", "the method's own (conventions below)"]
    assert rows["algorithm"] == ["scst", "wtf_rl"] and "XE epochs" not in rows
    assert rows["epochs done"] == ["2", "-"]  # the epochs each run's last checkpoint records
    no_log = dict(settings_rows({"scst": {"algorithm": "scst", "reward": {"weights": {"cider_d": 1.0}}}}))
    assert no_log["reward"] == ["{'cider_d': 1.0}"]  # a run whose log records none: its config's weights


@pytest.mark.slow  # the tiny runs of tests/report/conftest.py
def test_the_settings_table_is_what_each_run_recorded(reported, tmp_path):
    """Epochs from each run's last checkpoint, the reward its log records it learned from: no method's code nor a
    method's own section read (tests/test_imports.py: report/ imports no method)."""
    from rlcap.report.page import settings_rows

    data = collect(reported["runs"])
    runs = list(data.settings)
    assert sorted(runs) == ["scst", "xe"] and data.learned == {"scst": {"cider_d": 1.0}}  # (xe's log records none)
    rows = dict(settings_rows(data.settings, data.drawn, data.learned, data.epochs))
    epochs = {run: json.loads((reported["runs"] / run / "last" / "checkpoint.json").read_text())["epoch"]
              for run in runs}
    assert rows["epochs done"] == [str(epochs[run]) for run in runs] and epochs["scst"] == 1
    assert rows["reward"][runs.index("scst")] == "{'cider_d': 1.0}" and rows["reward"][runs.index("xe")] == "-"
    out = tmp_path / "r.html"
    assert main(["report", str(reported["runs"]), "--out", str(out), "--sample", "2"]) == 0
    assert "<td>epochs done</td>" in out.read_text(encoding="utf-8")


def test_a_summed_rewards_parts_get_their_own_curves(tmp_path):
    """log.jsonl's reward/<name> (rlcap.rewards.combine.part_means) are drawn, one plot each, after the reward."""
    from rlcap.report.plots import PART_TITLE, curves, plot_all

    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(json.dumps({"split": "train", "step": s, "time": 60.0 * s, "loss": 1.0, "reward": 1.5,
                                         "reward/cider_d": 1.0, "reward/qa_utility": 0.5}) for s in (1, 2)) + "\n")
    found = curves({"run": log})
    assert found[f"{PART_TITLE}qa_utility"]["run"] == [(1, 0.0, 0.5), (2, 1.0, 0.5)]
    titles = [p["title"] for p in plot_all({"run": log})]
    assert titles == ["training loss", "mean training reward", f"{PART_TITLE}cider_d", f"{PART_TITLE}qa_utility"]
