"""Hugging Face datasets as caption data (rlcap.data.hf_datasets): shapes written by `datasets` as an image folder
with metadata.jsonl, as Parquet with the pictures' bytes and as a save_to_disk folder give, through `rlcap
features`, XE and SCST, the same features and losses as the same data through dataset_shapes.json; bad inputs are
one line naming the row, and write nothing."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes
from rlcap.train.logger import read_log
from tests.cli.in_process import run_cli
from tests.tiny import tiny_overrides

datasets = pytest.importorskip("datasets")


def _items(source):
    """(id, split as datasets names it, captions, picture file) of each image of dataset_shapes.json."""
    names = {"train": "train", "val": "validation", "test": "test"}
    return [(str(i["imgid"]), names[i["split"]], [s["raw"] for s in i["sentences"]],
             source.parent / i["filepath"] / i["filename"])
            for i in json.loads(source.read_text())["images"]]


def imagefolder(source, out):
    """One folder per split, each with its pictures and a metadata.jsonl (captions: a list per image)."""
    for image_id, split, captions, picture in _items(source):
        (out / split).mkdir(parents=True, exist_ok=True)
        shutil.copy(picture, out / split / picture.name)
        with open(out / split / "metadata.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"file_name": picture.name, "caption": captions}) + "\n")
    return out


def parquet(source, out):
    """One Parquet file, the pictures' bytes in an Image column, the ids and splits in columns of their own."""
    items = _items(source)
    table = datasets.Dataset.from_dict({
        "picture": [{"bytes": p.read_bytes(), "path": None} for *_, p in items],
        "text": [c for _, _, c, _ in items], "imgid": [int(i) for i, *_ in items], "part": [s for _, s, *_ in items],
    }).cast_column("picture", datasets.Image())
    out.mkdir()
    table.to_parquet(str(out / "shapes.parquet"))
    return out / "shapes.parquet"


def save_to_disk(source, out):
    """A DatasetDict with its own splits, the pictures' bytes in an Image column (with their file names: the ids)."""
    splits: dict = {}
    for image_id, split, captions, picture in _items(source):
        rows = splits.setdefault(split, {"image": [], "caption": []})
        rows["image"].append({"bytes": picture.read_bytes(), "path": picture.name})
        rows["caption"].append(captions)
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.List(datasets.Value("string"))})
    datasets.DatasetDict({k: datasets.Dataset.from_dict(v, features=features) for k, v in splits.items()}).save_to_disk(
        str(out))
    return out


LAYOUTS = {"imagefolder": (imagefolder, []), "parquet": (parquet, ["image=picture", "caption=text", "id=imgid",
                                                                    "split=part"]),
           "save_to_disk": (save_to_disk, [])}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """The tiny shapes through dataset_shapes.json: its features, and the losses of XE and of SCST after it."""
    folder = tmp_path_factory.mktemp("hf_datasets")
    source = generate_shapes(ShapesConfig(seed=3, n_train=12, n_val=4, n_test=4, image_size=32, workers=1),
                             folder / "shapes")
    return folder, source, _train(folder / "json", source, source.parent, ["--dataset", str(source)], [])


def _train(out, dataset, image_dir, feature_args, columns):
    """`rlcap features`, XE (2 epochs) and SCST (3 steps) on ``dataset``: (features, XE losses, SCST losses)."""
    out.mkdir()
    store = out / "feats.h5"
    rc = _cli("features", str(image_dir), *feature_args, "--image-size", "32", "--out", str(store))
    assert rc == 0
    data = [f"data.{key}_column={name}" for key, name in (c.split("=") for c in columns)]
    assert _cli("train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, out / "xe"), *data) == 0
    overrides = [o for o in tiny_overrides(dataset, store, out / "scst") if not o.startswith("model.")]
    assert _cli("train", "configs/shapes_scst.yaml", *overrides, *data, f"init_from={out / 'xe' / 'best'}",
                "rl.epochs=1", "rl.batch_size=4", "rl.n_samples=2") == 0
    with h5py.File(store) as f:
        ids = [x.decode() for x in f["ids"][()]]
        feats = dict(zip(ids, f["fc"][()]))
    return feats, _losses(out / "xe"), _losses(out / "scst")


def _cli(*argv) -> int:
    from rlcap.cli import main

    return main(list(argv))


def _losses(run) -> list[float]:
    return [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_a_datasets_layout_trains_as_the_json(shapes, name):
    folder, source, (feats, xe, scst) = shapes
    write, columns = LAYOUTS[name]
    dataset = write(source, folder / name)
    column_args = ["--columns", ",".join(columns)] if columns else []
    theirs, their_xe, their_scst = _train(folder / f"{name}_run", dataset, dataset, column_args, columns)
    assert theirs.keys() == feats.keys() and all(np.array_equal(theirs[i], feats[i]) for i in feats)
    assert len(xe) == len(their_xe) > 0 and their_xe == pytest.approx(xe, rel=1e-6, abs=1e-7)
    assert len(scst) == len(their_scst) == 3 and their_scst == pytest.approx(scst, rel=1e-6, abs=1e-7)


def _bad_imagefolder(folder, change):
    """A two-image image folder (train and validation) whose metadata ``change`` spoils."""
    from PIL import Image

    rows = []
    for k, split in enumerate(("train", "validation")):
        (folder / split).mkdir(parents=True)
        Image.new("RGB", (32, 32), (40 * k, 0, 0)).save(folder / split / f"{k}.png")
        rows.append((split, {"file_name": f"{k}.png", "caption": ["a red square", "red"]}))
    change(rows)
    for split, row in rows:
        with open(folder / split / "metadata.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    return folder


def _parquet_without_a_picture(folder):
    folder.mkdir()
    datasets.Dataset.from_dict({"image": [{"bytes": b"x", "path": "0.png"}, None], "caption": ["a", "b"],
                                "split": ["train", "train"]}).cast_column("image", datasets.Image()).to_parquet(
        str(folder / "train.parquet"))
    return folder


def _parquet_without_a_caption_column(folder):
    folder.mkdir()
    datasets.Dataset.from_dict({"image": [{"bytes": b"x", "path": "0.png"}], "text": ["a"]}).cast_column(
        "image", datasets.Image()).to_parquet(str(folder / "train-00000-of-00001.parquet"))
    return folder


BAD = {
    "duplicate id": (lambda f: _bad_imagefolder(f, lambda rows: rows[1][1].update(file_name="../train/0.png")),
                     "validation/metadata.jsonl row 0: id '0' appears twice"),
    "empty caption": (lambda f: _bad_imagefolder(f, lambda rows: rows[0][1].update(caption=["a red square", " "])),
                      "train/metadata.jsonl row 0: an empty caption in column 'caption'"),
    "missing picture": (lambda f: _bad_imagefolder(f, lambda rows: rows[1][1].update(file_name="9.png")),
                        "validation/metadata.jsonl row 0: its picture validation/9.png is not found"),
    "no picture bytes": (_parquet_without_a_picture, "train row 1: no picture in column 'image'"),
    # (the column named as each command names it, --columns caption=COL or data.caption_column: test_messages_round5)
    "no caption column": (_parquet_without_a_caption_column,
                          "train row 0: no column 'caption' (its columns: text); name it with "),
    "caption of the wrong type": (lambda f: _bad_imagefolder(f, lambda rows: rows[0][1].update(caption=7)),
                                  "train/metadata.jsonl row 0: column 'caption' is 7 (int)"),
}


@pytest.mark.parametrize("bad", list(BAD))
def test_a_bad_input_is_one_line_naming_the_row_and_writes_nothing(tmp_path, capsys, bad):
    make, said = BAD[bad]
    dataset = make(tmp_path / "data")
    rc, _, err = run_cli(capsys, "features", str(dataset), "--image-size", "32", "--out", str(tmp_path / "f.h5"))
    assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "f.h5").exists()
    (tmp_path / "empty.h5").touch()  # (never read: the captions fail first)
    rc, _, err = run_cli(capsys, "train", "configs/shapes_xe.yaml",
                         *tiny_overrides(dataset, tmp_path / "empty.h5", tmp_path / "run"))
    assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_pictures_stored_as_bytes_are_read_in_place(tmp_path, capsys):
    """A save_to_disk dataset's pictures, stored as bytes, are read where they lie by `rlcap caption`, `rlcap eval
    --clip` and the report's gallery, as the same pictures from their files; none is unpacked to a file."""
    from tests.retrieval.test_clip_score import tiny_clip

    source = generate_shapes(ShapesConfig(seed=4, n_train=8, n_val=2, n_test=3, image_size=32, workers=1),
                             tmp_path / "shapes")
    dataset = save_to_disk(source, tmp_path / "ds")
    files_before = sorted(p for p in dataset.rglob("*"))
    assert _cli("features", str(dataset), "--image-size", "32", "--out", str(tmp_path / "f.h5")) == 0
    assert _cli("train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, tmp_path / "f.h5", tmp_path / "xe"),
                "xe.epochs=1") == 0
    best = tmp_path / "xe" / "best"
    # rlcap caption: the dataset's pictures caption as their files do
    assert _cli("caption", str(best), str(dataset), "--out", str(tmp_path / "from_bytes.json")) == 0
    files = sorted((source.parent / "images").glob("*.png"), key=lambda p: int(p.stem))
    assert _cli("caption", str(best), *map(str, files), "--out", str(tmp_path / "from_files.json")) == 0
    from_bytes = json.loads((tmp_path / "from_bytes.json").read_text())
    from_files = json.loads((tmp_path / "from_files.json").read_text())
    assert len(from_bytes) == len(from_files) == 13
    # (the dataset's rows in the order of the files: its splits train, validation, test as dataset_shapes.json's)
    assert list(from_bytes.values()) == [from_files[str(f)] for f in files], (from_bytes, from_files)
    assert all(key.startswith(str(dataset)) and " row " in key for key in from_bytes)  # each named by its row
    # a transformers encoder reads them as the default one does: the same features as from the files
    tiny_clip(tmp_path / "clip")
    encoder = f"hf:{tmp_path / 'clip'}"
    assert _cli("features", str(dataset), "--encoder", encoder, "--out", str(tmp_path / "a.h5")) == 0
    assert _cli("features", str(source.parent), "--dataset", str(source), "--encoder", encoder,
                "--out", str(tmp_path / "b.h5")) == 0
    with h5py.File(tmp_path / "a.h5") as a, h5py.File(tmp_path / "b.h5") as b:
        order = np.argsort(a["ids"][()]), np.argsort(b["ids"][()])
        assert np.array_equal(a["att"][()][order[0]], b["att"][()][order[1]]) and len(order[0]) == 13
    # rlcap eval --clip: the pictures read from the dataset, the same CLIP-S as from the files
    assert _cli("eval", str(best), "--clip", str(tmp_path / "clip"), "--out", str(tmp_path / "ev")) == 0
    per_image = json.loads((tmp_path / "ev" / "per_image.json").read_text())
    from rlcap.eval.clip_score import load_clip, score_with_clip

    predictions = json.loads((tmp_path / "ev" / "predictions.json").read_text())
    captions = {str(p["image_id"]): p["caption"] for p in predictions}
    _, expected = score_with_clip(load_clip(tmp_path / "clip"), captions,
                                  {i: source.parent / "images" / f"{i}.png" for i in captions})
    assert all(per_image[i]["CLIP-S"] == pytest.approx(expected[i]["CLIP-S"], abs=1e-6) for i in captions)
    # the report's gallery shows every test picture
    assert _cli("report", str(tmp_path / "ev")) == 0
    page = (tmp_path / "ev" / "report.html").read_text()
    assert page.count("data:image/jpeg;base64") >= 3 and "no file name in the dataset" not in page
    assert sorted(p for p in dataset.rglob("*")) == files_before  # nothing unpacked
