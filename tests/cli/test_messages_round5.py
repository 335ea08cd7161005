"""The fifth probe's messages that pointed the wrong way, through the CLI as it met them: a store made with
`rlcap features --skip-bad` (training stopped at "feature id '5' not found"), `rlcap caption` on a Parquet dataset
(captions named by a stored path, not by row), `--clip` on a folder that is not there and a missing picture found
after the scoring, `--metrics CLIP-S` ("unknown metric"), and `rlcap features` naming a training key."""

from __future__ import annotations

import json
import logging
import shutil

import h5py
import pytest

from rlcap import api
from rlcap.cli import main
from rlcap.data.features import open_feature_store
from rlcap.data.loader import load_data
from rlcap.errors import DataError
from tests.cli.in_process import run_cli
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _features(capsys, folder, dataset, store, *extra):
    return run_cli(capsys, "features", str(folder), "--dataset", str(dataset), "--out", str(store),
                   "--image-size", "32", "--threads", "1", *extra)


def _train(capsys, dataset, store, run, *extra):
    return run_cli(capsys, "train", "configs/shapes_xe.yaml",
                   *tiny_overrides(dataset, store, run, **{"xe.epochs": 1}), *extra)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny dataset with a picture for each image, the store `rlcap features` writes of them (EfficientNet-Lite0
    at 32 px) and an XE checkpoint trained on it: (folder, dataset, store, best)."""
    folder = tmp_path_factory.mktemp("round5")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    assert main(["features", str(folder), "--dataset", str(dataset), "--out", str(folder / "store.h5"),
                 "--image-size", "32", "--threads", "1"]) == 0
    assert main(["train", "configs/shapes_xe.yaml",
                 *tiny_overrides(dataset, folder / "store.h5", folder / "xe", **{"xe.epochs": 1})]) == 0
    return folder, dataset, folder / "store.h5", folder / "xe" / "best"


# --- a. a store made with --skip-bad --------------------------------------------------------------

def test_training_on_a_store_made_with_skip_bad_leaves_the_skipped_out_and_says_so(tmp_path, capsys, caplog):
    """The store records the images --skip-bad left out; a run leaves them out with one warning (it stopped at
    "feature id '5' not found"), a reader asked for one says why it is not there, and once the picture is fixed
    the same `rlcap features` command adds it and the record is gone."""
    dataset, _ = make_tiny_dataset(tmp_path)
    add_pictures(dataset)
    good = (tmp_path / "5.png").read_bytes()
    (tmp_path / "5.png").write_bytes(b"not a picture")
    store = tmp_path / "skip.h5"
    rc, out, _ = _features(capsys, tmp_path, dataset, store, "--skip-bad")
    assert rc == 0 and "1 skipped" in out and f"{store} records them as skipped: a run on it leaves them out" in out
    with h5py.File(store) as f:
        assert list(f["skipped"].asstr()[()]) == ["5"] and "cannot read image" in f["skipped_reason"].asstr()[0]
        assert "5" not in list(f["ids"].asstr()[()]) and len(f["ids"]) == 35
    with caplog.at_level(logging.WARNING, logger="rlcap.data.split_features"):
        rc, _, err = _train(capsys, dataset, store, tmp_path / "run")
    assert rc == 0, err
    said = [r.getMessage() for r in caplog.records if r.name == "rlcap.data.split_features"]
    assert len(said) == 1 and said[0].startswith(f"1 of the 36 images (e.g. '5': cannot read image "), said
    assert f"are not in {store}: rlcap features --skip-bad left them out as unreadable" in said[0]
    data = load_data(api.load_run_config(None, tiny_overrides(dataset, store, tmp_path / "x")).data)
    assert data.sizes() == {"train": 23, "val": 6, "test": 6} and "5" not in data.splits["train"].ids
    with open_feature_store(store) as opened, pytest.raises(DataError) as caught:
        opened.get("5")
    assert str(caught.value).startswith(f"feature id '5' is not in {store}: rlcap features --skip-bad left it out as "
                                        "unreadable when it made the store (cannot read image")
    (tmp_path / "5.png").write_bytes(good)  # fixed: the same command adds it, and it is no longer skipped
    rc, out, _ = _features(capsys, tmp_path, dataset, store, "--skip-bad")
    assert rc == 0 and "encoded 1 images" in out and "0 skipped" in out
    with h5py.File(store) as f:
        assert "skipped" not in f and "5" in list(f["ids"].asstr()[()])
    assert load_data(api.load_run_config(None, tiny_overrides(dataset, store, tmp_path / "x")).data).sizes()[
        "train"] == 24


# --- b. rlcap caption on a Parquet dataset ----------------------------------------------------------

def _parquet(path, pictures, as_bytes: bool):
    """A Parquet file of ``pictures`` in an Image-feature column: their bytes and file names, or only their file
    names (relative to the file's folder), as `datasets` writes a dataset cast from files."""
    cells = [{"bytes": p.read_bytes() if as_bytes else None, "path": p.name} for p in pictures]
    pq.write_table(pa.table({"image": cells, "caption": [["a picture"]] * len(pictures)}), path)
    return path


def test_caption_names_every_picture_of_a_parquet_dataset_by_its_row(tiny, capsys):
    """Docs say each caption is named by its row (`DATASET test row 0`): pictures stored as file names were named
    by the stored path. Both kinds now name rows, and caption as the same files do."""
    folder, dataset, _, best = tiny
    files = sorted(folder.glob("3*.png"))  # 3, 30..35: pictures beside the Parquet files
    as_bytes = _parquet(folder / "test-bytes.parquet", files, True)
    as_paths = _parquet(folder / "test-paths.parquet", files, False)
    captions = {}
    for parquet in (as_bytes, as_paths):
        rc, out, err = run_cli(capsys, "caption", str(best), str(parquet))
        assert rc == 0, err
        rows = [line.split("\t") for line in out.splitlines()]
        assert [name for name, _ in rows] == [f"{parquet} test row {k}" for k in range(len(files))]
        captions[parquet] = [text for _, text in rows]
    rc, out, _ = run_cli(capsys, "caption", str(best), *map(str, files))
    assert rc == 0 and captions[as_bytes] == captions[as_paths] == [line.split("\t")[1] for line in out.splitlines()]


# --- c, d. --clip and CLIP-S ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def clip(tiny):
    pytest.importorskip("transformers")
    from tests.retrieval.test_clip_score import tiny_clip

    return tiny_clip(tiny[0] / "clip")


def _score_files(folder, ids):
    """refs.json and preds.json in ``folder`` of the tiny images ``ids``: `rlcap score`'s arguments."""
    items = {str(i["imgid"]): i for i in json.loads(make_tiny_dataset(folder)[0].read_text())["images"]}
    (folder / "refs.json").write_text(json.dumps({i: [s["raw"] for s in items[i]["sentences"]] for i in ids}))
    (folder / "preds.json").write_text(json.dumps([{"image_id": i, "caption": "a red circle"} for i in ids]))
    return ["--refs", str(folder / "refs.json"), "--preds", str(folder / "preds.json")]


def _errors(err: str) -> list[str]:
    """The lines of ``err`` that say an error (transformers draws its loading bars there too)."""
    return [line for line in err.splitlines() if "error" in line.lower()]


def _pictures(source, ids, out):
    out.mkdir()
    for i in ids:
        shutil.copy(source / f"{i}.png", out / f"{i}.png")
    return out


def test_a_clip_folder_that_does_not_exist_says_so(tiny, tmp_path, capsys):
    """It said the folder "holds none" (no CLIP), as for a folder that holds something else."""
    folder, _, _, best = tiny
    gone = tmp_path / "no_clip"
    rc, _, err = run_cli(capsys, "eval", str(best), "--clip", str(gone), "--out", str(tmp_path / "ev"))
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"rlcap eval: error: {gone}: the CLIP folder does not exist; CLIP-S reads a local CLIP "
                          "folder"), err
    score = _score_files(tmp_path, ["30", "31"])
    rc, _, err = run_cli(capsys, "score", *score, "--metrics", "CIDEr", "--clip", str(gone), "--images",
                         str(_pictures(folder, ["30", "31"], tmp_path / "pics")))
    assert rc == 2 and err.count("\n") == 1 and "the CLIP folder does not exist" in err and "holds none" not in err


def test_score_refuses_a_missing_picture_before_it_scores(tiny, clip, tmp_path, capsys, monkeypatch):
    """An id without a picture was reported after every metric had been computed (SPICE can take minutes)."""
    import rlcap.cli.score

    folder = tiny[0]
    score = _score_files(tmp_path, ["30", "31", "32"])
    pictures = _pictures(folder, ["30", "32"], tmp_path / "pics")
    scored = []
    monkeypatch.setattr(rlcap.cli.score, "score_captions", lambda *a, **k: scored.append(1))
    rc, _, err = run_cli(capsys, "score", *score, "--metrics", "CIDEr", "--clip", str(clip), "--images",
                         str(pictures))
    said = _errors(err)
    assert rc == 2 and len(said) == 1, err
    assert said[0].startswith("rlcap score: error: image '31': no picture for it (1 of 3 captioned images have none)")
    assert scored == []


def test_eval_refuses_a_missing_picture_before_it_decodes(tiny, clip, tmp_path, capsys, monkeypatch):
    """A test picture not there was found when CLIP read it, after the whole split was decoded and scored."""
    import rlcap.decoding.split

    folder, dataset, _, best = tiny
    test = [str(i["imgid"]) for i in json.loads(dataset.read_text())["images"] if i["split"] == "test"]
    pictures = _pictures(folder, test[1:], tmp_path / "pics")
    decoded = []
    monkeypatch.setattr(rlcap.decoding.split, "decode_split", lambda *a, **k: decoded.append(1))
    rc, _, err = run_cli(capsys, "eval", str(best), "--clip", str(clip), "--images", str(pictures),
                         "--out", str(tmp_path / "ev"))
    said = _errors(err)
    assert rc == 2 and len(said) == 1, err
    assert said[0].startswith(f"rlcap eval: error: image '{test[0]}': its picture {pictures / (test[0] + '.png')} "
                              f"is not there (1 of {len(test)} captioned images' pictures are missing)"), err
    assert decoded == [] and not (tmp_path / "ev" / "predictions.json").exists()


def test_metrics_clip_s_points_at_clip(tiny, clip, tmp_path, capsys):
    """`--metrics CLIP-S` said "unknown metric(s) CLIP-S"; with --clip it is taken as said."""
    folder = tiny[0]
    score = _score_files(tmp_path, ["30", "31"])
    rc, _, err = run_cli(capsys, "score", *score, "--metrics", "CIDEr,CLIP-S")
    assert rc == 2 and err.count("\n") == 1 and "unknown metric" not in err, err
    assert err.rstrip() == ("rlcap score: error: --metrics CLIP-S: CLIP-S and RefCLIP-S are scored with a CLIP, not "
                            "by --metrics: give --clip DIR (a local CLIP folder) and --images DIR (the pictures), "
                            "which add both")
    rc, out, err = run_cli(capsys, "score", *score, "--metrics", "CIDEr,CLIP-S", "--clip", str(clip), "--images",
                           str(_pictures(folder, ["30", "31"], tmp_path / "pics")))
    assert rc == 0, err
    shown = [line.split()[0] for line in out.splitlines()[2:]]
    assert shown == ["CIDEr", "CLIP-S", "RefCLIP-S"], out


# --- e. rlcap features names its own flag -----------------------------------------------------------

def test_features_names_its_columns_flag_where_train_names_the_key(tiny, tmp_path, capsys):
    """A Parquet file whose name says no split: `rlcap features` named data.split_column, a training key."""
    folder, _, store, _ = tiny
    parquet = _parquet(tmp_path / "pictures.parquet", sorted(folder.glob("3*.png")), True)
    rc, _, err = run_cli(capsys, "features", str(parquet), "--out", str(tmp_path / "f.h5"), "--image-size", "32")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.rstrip() == (f"rlcap features: error: {parquet} row 0: the dataset has no splits of its own; name the "
                            "column of splits (--columns split=COL)")
    assert not (tmp_path / "f.h5").exists()
    rc, _, err = run_cli(capsys, "features", str(parquet), "--out", str(tmp_path / "f.h5"), "--columns", "split=part")
    assert rc == 2 and err.rstrip().endswith("no column 'part' (its columns: caption); name it with --columns "
                                             "split=COL") and "data." not in err, err
    rc, _, err = _train(capsys, parquet, store, tmp_path / "run")
    assert rc == 2 and err.rstrip().endswith("name the column of splits (data.split_column)"), err
