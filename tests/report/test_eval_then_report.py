"""The README's flow through the CLI, as a user types it: train, `rlcap eval RUN/best` (which writes
RUN/best/eval_test), then `rlcap report RUN`. Once the report found no evaluation folder and showed no
pictures; and an evaluation folder of any other name found no dataset ("no file name in the dataset" on
every item) and called its split by the folder's name. Files of the wrong shape are one line each."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides


def _run(capsys, *argv):
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run trained through `rlcap train` in a folder of its own, its dataset with pictures."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("flow")
    dataset, feats = make_tiny_dataset(folder)
    add_pictures(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, feats, folder / "run")]) == 0
    return folder


def _pictures(page: str) -> int:
    return page.count("data:image/jpeg;base64,")


def test_eval_of_best_then_report_of_the_run_shows_the_pictures(trained, capsys):
    run = trained / "run"
    rc, out, _ = _run(capsys, "eval", run / "best")
    assert rc == 0 and f"wrote {run / 'best'}/eval_test/predictions.json" in out
    rc, out, _ = _run(capsys, "report", run)
    assert rc == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "no evaluation folder" not in page and "no file name in the dataset" not in page
    assert page.count('class="item"') == 6 and _pictures(page) == 6  # the 6 test images, each with its picture
    assert "a red circle" in page.lower() or "a blue" in page.lower() or "a green" in page.lower()  # references


def test_an_evaluation_folder_of_any_name_knows_its_checkpoint_split_and_dataset(trained, tmp_path, capsys):
    run = trained / "run"
    mine = tmp_path / "elsewhere" / "myeval"
    assert _run(capsys, "eval", run / "best", "--split", "val", "--out", mine)[0] == 0
    record = json.loads((mine / "scores.json").read_text())["evaluated"]
    assert record["checkpoint"] == str((run / "best").resolve()) and record["split"] == "val"
    assert record["data"]["dataset"] == str((trained / "dataset.json").resolve())
    rc, _, _ = _run(capsys, "report", mine)
    page = (mine / "report.html").read_text(encoding="utf-8")
    assert rc == 0 and "no file name in the dataset" not in page and _pictures(page) == 6  # 6 validation images
    assert "split <b>val</b> (6 images)" in page and "on the val split" in page  # not "myeval"
    assert "learning rate" in page  # the run's settings, found through the checkpoint


def test_a_run_reports_its_most_recent_test_evaluation(trained, capsys):
    """`eval_*` of the run and of its checkpoints: the test split's first, the most recent of them."""
    from rlcap.report.collect import collect

    run = trained / "run"
    assert _run(capsys, "eval", run / "best", "--split", "val")[0] == 0  # newer, but not the test split
    assert _run(capsys, "eval", run / "last", "--beam-size", "1")[0] == 0  # the newest test evaluation
    data = collect(run)
    assert data.split == "test" and data.systems[0].checkpoint == (run / "last").resolve()


@pytest.mark.parametrize("name, text, said", [
    ("config.json", "{bad", "cannot read it as JSON"),
    ("predictions.json", '[{"image_id": 1}]', "not laid out as expected (KeyError: 'caption')"),
    ("predictions.json", '{"1": "a dog"}', "expected a JSON list, got dict: COCO results"),
    ("scores.json", '{"model": 3}', "not laid out as expected (TypeError"),
    ("results.json", '{"methods": [1, 2]}', "not laid out as expected (AttributeError"),
    ("results.json", "[1, 2]", "expected a JSON object, got list"),
])
def test_a_file_of_the_wrong_shape_is_one_line(tmp_path, capsys, name, text, said):
    folder = tmp_path / "r"
    folder.mkdir()
    if name == "config.json":
        (folder / "log.jsonl").write_text("")
    if name == "scores.json":
        (folder / "predictions.json").write_text('[{"image_id": 1, "caption": "a dog"}]')
    (folder / name).write_text(text)
    rc, _, err = _run(capsys, "report", folder)
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"rlcap report: error: {folder / name}: "), err
    assert said in err
