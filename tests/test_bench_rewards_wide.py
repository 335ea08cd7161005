"""benchmarks/bench_rewards_wide.py (make bench-rewards-wide): the gain's paired bootstrap, the lines it writes, the
checkpoint it decodes, its refusal of other pictures, and bench_rewards.py reading its test split from TEST_DATA."""

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    import bench_rewards
    import bench_rewards_wide as wide
finally:
    sys.path.pop(0)


def test_a_gain_every_picture_shares_has_no_spread():
    base = {str(i): 0.2 + 0.1 * (i % 5) for i in range(50)}
    gain, low, high = wide.paired_gain({i: v * 1.1 for i, v in base.items()}, base)
    assert gain == pytest.approx(0.1) and low == pytest.approx(0.1) and high == pytest.approx(0.1)
    assert wide.paired_gain(base, base) == pytest.approx((0.0, 0.0, 0.0))


def test_a_gain_on_some_pictures_has_an_interval_around_it():
    """Half the pictures gain 0.2, half nothing: the gain is the means' ratio, inside an interval that excludes 0
    and a gain twice as large, and the same seed gives the same interval."""
    base = {str(i): 0.5 for i in range(400)}
    row = {i: v + (0.2 if int(i) % 2 else 0.0) for i, v in base.items()}
    gain, low, high = wide.paired_gain(row, base)
    assert gain == pytest.approx(0.2)  # 0.6 / 0.5 - 1
    assert 0 < low < gain < high < 2 * gain
    assert wide.paired_gain(row, base) == (gain, low, high)


def test_gain_lines_read_each_qa_row_against_cider_d_scst_by_the_judges_mean():
    ids = [str(i) for i in range(10)]
    per_image = {}
    for judge, (base, row) in {"judge": (0.5, 0.6), "judge2": (0.5, 0.7)}.items():
        per_image["scst_box", judge] = dict.fromkeys(ids, base)
        per_image["scst_qa_box_joined", judge] = dict.fromkeys(ids, row)
        per_image["xe_box", judge] = dict.fromkeys(ids, 0.4)
    lines = wide.gain_lines(["xe_box", "scst_box", "scst_qa_box_joined"], per_image)
    assert lines == ["- scst_qa_box_joined: +30.0% (95% interval +30.0% to +30.0%); judge +20.0% (+20.0% to "
                     "+20.0%), judge2 +40.0% (+40.0% to +40.0%)."]  # (0.6 + 0.7) / 2 / 0.5 - 1
    assert wide.gain_lines(["xe_box"], per_image) == ["- No CIDEr-D SCST row was judged: no gain is read."]


def test_the_count_line_counts_captions_from_chair_s():
    found = {"scst_box": {"CHAIR_s": 0.0012}, "row": {"CHAIR_s": 0.003}}
    assert wide.count_line(found, 5000) == ("- Captions naming a shape the picture does not hold (CHAIR_s x "
                                            "pictures): scst_box 6, row 15, of 5000.")


def test_the_checkpoint_is_the_one_the_bench_judges_the_row_by(tmp_path):
    """A QA row is judged at the end of its budget (its run's last/), and a row not run is refused."""
    with pytest.raises(SystemExit, match="run the row first"):
        wide.checkpoint("scst_qa_box_joined", tmp_path)
    last = tmp_path / "scst_qa_box_joined" / "last"
    last.mkdir(parents=True)
    (last / "config.json").write_text("{}")
    assert wide.checkpoint("scst_qa_box_joined", tmp_path) == last


def _dataset(path: Path, images: list[dict]) -> Path:
    path.write_text(json.dumps({"dataset": "shapes", "images": images}))
    return path


def test_a_wider_split_must_hold_the_benchs_pictures_as_they_are(tmp_path):
    pictures = [{"imgid": i, "split": split, "sentences": [{"raw": f"a red circle {i}"}]}
                for i, split in enumerate(["train", "val", "test"])]
    ours = _dataset(tmp_path / "ours.json", pictures)
    wider = _dataset(tmp_path / "wider.json", [*pictures, {"imgid": 3, "split": "test", "sentences": []}])
    wide.check_same_pictures(ours, wider)
    changed = _dataset(tmp_path / "changed.json", [*pictures[:2], {**pictures[2], "sentences": []}])
    with pytest.raises(SystemExit, match="image 2 and 0 more"):
        wide.check_same_pictures(ours, changed)


def test_only_a_wider_split_than_the_benchs_is_taken():
    with pytest.raises(SystemExit):
        wide.main(["--questions", "joined", "--image-size", "224", "--test-images", "1000"])


def test_the_test_split_is_read_from_test_data(tmp_path, monkeypatch):
    """bench_rewards.py's test references and scenes come from TEST_DATA (the wider split once set), its readers
    still from DATA."""
    from rlcap.data.synthetic.scenes import Scene, SceneObject

    scene = Scene("white", (SceneObject("circle", "red", "medium", None, 0.2, 0.5, 0.1),))
    images = [{"imgid": i, "split": split, "filepath": "images", "filename": f"{i}.png", "scene": scene.to_dict(),
               "sentences": [{"raw": f"a red circle {i}", "tokens": ["a", "red", "circle", str(i)]}]}
              for i, split in ((0, "train"), (1, "test"), (2, "test"))]
    _dataset(tmp_path / "dataset_shapes.json", images)
    monkeypatch.setattr(bench_rewards, "TEST_DATA", tmp_path)
    assert bench_rewards.refs_of_test.__wrapped__() == {"1": ["a red circle 1"], "2": ["a red circle 2"]}
    assert sorted(bench_rewards.scenes_of_test.__wrapped__()) == ["1", "2"]


def test_phrases_read_the_length_cap_from_the_runs_folder(tmp_path, monkeypatch):
    """The wider split's captions lie in their own folder; the cap they are read against is their run's."""
    from rlcap.data.synthetic.scenes import Scene, SceneObject

    scene = Scene("white", (SceneObject("circle", "red", "medium", None, 0.2, 0.5, 0.1),))
    monkeypatch.setattr(bench_rewards, "scenes_of_test", lambda: {"1": scene})
    monkeypatch.setattr(bench_rewards, "captions_of", lambda name, out: {"1": "a red circle"})
    for cap in (3, 4):
        (tmp_path / f"runs{cap}" / "scst_box").mkdir(parents=True)
        (tmp_path / f"runs{cap}" / "scst_box" / "config.json").write_text(json.dumps({"decode": {"max_len": cap}}))
    read = {cap: bench_rewards.phrases(["scst_box"], str(tmp_path / "wide"), str(tmp_path / f"runs{cap}"))
            for cap in (3, 4)}
    assert read[3]["scst_box"]["at_cap"] == 1.0 and read[4]["scst_box"]["at_cap"] == 0.0
    with pytest.raises(FileNotFoundError):
        bench_rewards.phrases(["scst_box"], str(tmp_path / "wide"))  # (no run there)


def test_the_figures_are_read_again_while_the_checkpoints_are_the_same(tmp_path, monkeypatch):
    """judged(): scored once and kept in judged.json row by row; a row read from there while its captions name the
    same checkpoint; the row whose checkpoint changed, or a row added, scored alone."""
    calls = []

    def scores(names, qs, per_image):
        calls.append(names)
        per_image |= {(n, j): {"1": 0.5} for n in names for j in bench_rewards.JUDGES}
        return {n: {"QA-acc": 0.5} for n in names}

    monkeypatch.setattr(bench_rewards, "scores", scores)
    monkeypatch.setattr(bench_rewards, "by_kind", lambda names, qs, judge: {n: {"count": 0.4} for n in names})
    monkeypatch.setattr(bench_rewards, "phrases", lambda names, out, runs: {n: {"at_cap": 0.0} for n in names})
    qs = bench_rewards.SETS["main"]
    wide_qs = replace(qs, out=str(tmp_path))
    (tmp_path / "captions").mkdir()
    for n in ("scst_box", "scst_qa_box"):
        (tmp_path / "captions" / f"{n}.json").write_text(json.dumps({"captions": {}, "checkpoint": [n, 1]}))
    first = wide.judged(["scst_box", "scst_qa_box"], qs, wide_qs)
    assert wide.judged(["scst_box", "scst_qa_box"], qs, wide_qs) == first and len(calls) == 1
    assert first[3][("scst_qa_box", "judge2")] == {"1": 0.5}
    (tmp_path / "captions" / "scst_box.json").write_text(json.dumps({"captions": {}, "checkpoint": ["scst_box", 2]}))
    again = wide.judged(["scst_box", "scst_qa_box"], qs, wide_qs)
    assert calls == [["scst_box", "scst_qa_box"], ["scst_box"]]  # the changed row alone scored again
    assert again == first and list(again[0]) == ["scst_box", "scst_qa_box"]  # in the rows' order
    (tmp_path / "captions" / "xe_box.json").write_text(json.dumps({"captions": {}, "checkpoint": ["xe_box", 1]}))
    added = wide.judged(["xe_box", "scst_box", "scst_qa_box"], qs, wide_qs)
    assert calls[-1] == ["xe_box"] and list(added[0]) == ["xe_box", "scst_box", "scst_qa_box"]
    assert added[1]["judge"]["scst_qa_box"] == {"count": 0.4} and added[3][("xe_box", "judge")] == {"1": 0.5}
    wide.judged(["scst_qa_box"], qs, wide_qs)  # a row left out is kept in the file for the next call
    wide.judged(["xe_box", "scst_qa_box"], qs, wide_qs)
    assert len(calls) == 3
