"""Bad inputs refused where they are read, each in one line through the CLI (exit code 2): an image
id twice, caption fields of the wrong type, non-finite features, region counts out of range, an
empty vocabulary, an ``init_from`` checkpoint made for other data, a checkpoint whose weights do
not fit its config."""

from __future__ import annotations

import json
import logging
import shutil

import h5py
import numpy as np
import pytest

from rlcap.cli import main
from tests.tiny import make_tiny_dataset, tiny_overrides, tiny_xe_run


@pytest.fixture(scope="module")
def xe(tmp_path_factory):
    """The tiny dataset and an XE checkpoint trained on it: (dataset, feats, best)."""
    return tiny_xe_run(tmp_path_factory.mktemp("xe"), epochs=1)


@pytest.fixture
def tiny(tmp_path):
    return make_tiny_dataset(tmp_path)


def _train(tmp_path, capsys, dataset, feats, *extra):
    """``rlcap train`` on the tiny sizes: (exit code, stderr)."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("algorithm: xe\n")
    rc = main(["train", str(recipe), *tiny_overrides(dataset, feats, tmp_path / "run"), *extra])
    return rc, capsys.readouterr().err


def _images(dataset):
    return json.loads(dataset.read_text())["images"]


def _write_karpathy(dataset, images):
    dataset.write_text(json.dumps({"images": images}))


def _write_jsonl(path, items):
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def _as_jsonl(dataset, path):
    """The tiny Karpathy file as JSONL items (id, split, captions)."""
    items = [{"id": str(im["imgid"]), "split": im["split"], "captions": [s["raw"] for s in im["sentences"]]}
             for im in _images(dataset)]
    return _write_jsonl(path, items), items


# --- an image id twice -------------------------------------------------------------------------


def test_karpathy_id_twice(tiny, tmp_path, capsys):
    dataset, feats = tiny
    images = _images(dataset)
    images[5]["imgid"] = 2
    _write_karpathy(dataset, images)
    assert _train(tmp_path, capsys, dataset, feats) == (
        2, f"rlcap train: error: {dataset}: image id '2' appears twice (images[2] and images[5]); every image "
           "needs its own id\n")


def test_jsonl_id_twice(tiny, tmp_path, capsys):
    path, items = _as_jsonl(tiny[0], tmp_path / "d.jsonl")
    items[6]["id"] = "1"
    _write_jsonl(path, items)
    assert _train(tmp_path, capsys, path, tiny[1]) == (
        2, f"rlcap train: error: {path}: image id '1' appears twice (line 2 and line 7); every image needs "
           "its own id\n")


def test_coco_id_twice_in_the_split_list(tiny, tmp_path, capsys):
    ann = tmp_path / "captions.json"
    ann.write_text(json.dumps({"images": [{"id": i, "file_name": f"{i}.png"} for i in range(36)],
                               "annotations": [{"image_id": i, "caption": "a red circle"} for i in range(36)]}))
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": list(range(24)), "val": [*range(24, 30), 3], "test": list(range(30, 36))}))
    assert _train(tmp_path, capsys, ann, tiny[1], "data.format=coco", f"data.coco_splits={splits}") == (
        2, f"rlcap train: error: {splits}: image id '3' appears twice (train[3] and val[6]); every image "
           "needs its own id\n")


def test_msrvtt_video_twice(tiny, tmp_path, capsys):
    ann = tmp_path / "msrvtt.json"
    videos = [{"video_id": str(i), "split": "train" if i < 24 else "validate" if i < 30 else "test"} for i in range(36)]
    videos[9]["video_id"] = "4"
    ann.write_text(json.dumps({"videos": videos,
                               "sentences": [{"video_id": str(i), "caption": "a red circle"} for i in range(36)]}))
    assert _train(tmp_path, capsys, ann, tiny[1]) == (
        2, f"rlcap train: error: {ann}: video id '4' appears twice (videos[4] and videos[9]); every video "
           "needs its own id\n")


def _refs_and_preds(tmp_path, refs_text, preds_text):
    refs, preds = tmp_path / "refs.json", tmp_path / "preds.json"
    refs.write_text(refs_text)
    preds.write_text(preds_text)
    return refs, preds


def test_score_refs_with_an_id_twice(tmp_path, capsys):
    # JSON keeps the last of two keys: image 1's first references would be dropped silently
    refs, preds = _refs_and_preds(tmp_path, '{"1": ["a dog"], "2": ["a cat"], "1": ["a bird"]}',
                                  '{"1": "a dog", "2": "a cat"}')
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap score: error: {refs}: image id '1' appears twice as a key; every image needs its own id "
        "(JSON keeps only the last of the two)\n")


def test_score_karpathy_refs_with_an_id_twice(tmp_path, capsys):
    images = [{"cocoid": 7, "sentences": [{"raw": "a dog"}]}, {"cocoid": 8, "sentences": [{"raw": "a cat"}]},
              {"cocoid": 7, "sentences": [{"raw": "a bird"}]}]
    refs, preds = _refs_and_preds(tmp_path, json.dumps({"images": images}), '[{"image_id": 7, "caption": "a dog"}]')
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap score: error: {refs}: image id '7' appears twice (images[0] and images[2]); every image needs "
        "its own id\n")


def test_score_preds_with_an_id_twice(tmp_path, capsys):
    refs, preds = _refs_and_preds(tmp_path, '{"1": ["a dog"], "2": ["a cat"]}',
                                  '{"2": ["a cat"], "1": ["a dog"], "2": ["a dog"]}')
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap score: error: {preds}: image id '2' appears twice as a key; every image needs its own id "
        "(JSON keeps only the last of the two)\n")


# --- caption fields of the wrong type -----------------------------------------------------------


def test_jsonl_captions_as_one_string(tiny, tmp_path, capsys):
    # read as a list, "a red circle" would be 12 one-character captions
    path, items = _as_jsonl(tiny[0], tmp_path / "d.jsonl")
    items[2]["captions"] = "a red circle"
    _write_jsonl(path, items)
    assert _train(tmp_path, capsys, path, tiny[1]) == (
        2, f"rlcap train: error: {path}:3: 'captions' is a string; expected a list of caption strings "
           '(["a red circle"] for one caption)\n')


def test_jsonl_caption_that_is_a_number(tiny, tmp_path, capsys):
    path, items = _as_jsonl(tiny[0], tmp_path / "d.jsonl")
    items[0]["captions"] = ["a red circle", 42]
    _write_jsonl(path, items)
    assert _train(tmp_path, capsys, path, tiny[1]) == (
        2, f"rlcap train: error: {path}:1: captions[1] is a number (42); expected a caption string\n")


def test_karpathy_raw_caption_that_is_a_number(tiny, tmp_path, capsys):
    dataset, feats = tiny
    images = _images(dataset)
    images[4]["sentences"][1]["raw"] = 3.5
    _write_karpathy(dataset, images)
    assert _train(tmp_path, capsys, dataset, feats) == (
        2, f"rlcap train: error: {dataset}: image '4' sentences[1] 'raw' is a number (3.5); expected the "
           "caption text\n")


# --- feature stores -----------------------------------------------------------------------------


def _damaged_copy(feats, path, damage):
    shutil.copy(feats, path)
    with h5py.File(path, "r+") as f:
        damage(f)
    return path


def test_nan_features_refused_in_eval(xe, tmp_path, capsys):
    # they decoded to garbage captions with exit code 0
    _, feats, best = xe

    def nan_in_31(f):
        f["fc"][31, 2] = np.nan

    bad = _damaged_copy(feats, tmp_path / "nan.h5", nan_in_31)
    assert main(["eval", str(best), "--split", "test", f"data.features={bad}"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap eval: error: {bad}: the features of image '31' are not finite (NaN or inf): re-extract them "
        "(rlcap features)\n")


def test_inf_region_features_refused_in_training(tiny, tmp_path, capsys):
    dataset, feats = tiny

    def inf_in_5(f):
        f["att"][5, 1, 0] = np.inf

    bad = _damaged_copy(feats, tmp_path / "inf.h5", inf_in_5)
    assert _train(tmp_path, capsys, dataset, bad) == (
        2, f"rlcap train: error: {bad}: the features of image '5' are not finite (NaN or inf): re-extract them "
           "(rlcap features)\n")


def test_no_regions_anywhere(tiny, tmp_path, capsys):
    dataset, feats = tiny

    def no_regions(f):
        f["att_count"][:] = 0

    bad = _damaged_copy(feats, tmp_path / "empty.h5", no_regions)
    assert _train(tmp_path, capsys, dataset, bad) == (
        2, f"rlcap train: error: {bad}: 24 of 24 images have att_count 0 (no region features), the first '0': "
           "re-extract them (rlcap features)\n")


def test_more_regions_than_stored(tiny, tmp_path, capsys):
    dataset, feats = tiny  # 4 regions stored per image

    def nine_in_3(f):
        f["att_count"][3] = 9

    bad = _damaged_copy(feats, tmp_path / "over.h5", nine_in_3)
    assert _train(tmp_path, capsys, dataset, bad) == (
        2, f"rlcap train: error: {bad}: image '3' has att_count 9; expected 1 to 4 (the regions stored per "
           "image): the file is damaged; re-extract it (rlcap features)\n")


# --- empty vocabulary ---------------------------------------------------------------------------


def test_all_training_captions_empty(tiny, tmp_path, capsys):
    dataset, feats = tiny
    images = _images(dataset)
    for im in images:
        if im["split"] == "train":
            im["sentences"] = [{"raw": ""}, {"raw": " . "}]
    _write_karpathy(dataset, images)
    assert _train(tmp_path, capsys, dataset, feats) == (
        2, f"rlcap train: error: {dataset}: the 48 training captions of 24 images hold no words, so the "
           "vocabulary is empty: give captions with text\n")


def test_min_count_above_every_word(tiny, tmp_path, capsys):
    dataset, feats = tiny  # 24 training images, 3 captions each: "a" is the most frequent word, 48 times
    assert _train(tmp_path, capsys, dataset, feats, "data.min_count=500") == (
        2, f"rlcap train: error: {dataset}: no word appears data.min_count=500 times in the 72 training captions "
           "of 24 images, so the vocabulary is empty: lower data.min_count\n")


# --- init_from a checkpoint made for other data -------------------------------------------------

RL = ["algorithm=scst", "rl.epochs=1", "rl.batch_size=8", "rl.n_samples=2", "max_steps=1"]


def test_init_from_a_checkpoint_of_other_captions(xe, tmp_path, capsys):
    dataset, feats, best = xe
    path, items = _as_jsonl(dataset, tmp_path / "other.jsonl")
    for item in items:
        item["captions"] = ["a purple dog", "one purple dog"]
    _write_jsonl(path, items)
    rc, err = _train(tmp_path, capsys, path, feats, *RL, f"init_from={best}")
    # the checkpoint's 12 words + 4 specials; this data's words: dog, purple (48 times), a, one (24)
    assert (rc, err) == (
        2, f"rlcap train: error: init_from {best}: its vocabulary (16 words) lacks 3 of the 4 words of this "
           "run's training captions ('dog', 'purple', 'one', ...): it was trained on other captions; start from "
           "a checkpoint trained on this data, or pass allow_init_mismatch=true to train with its vocabulary "
           "(those words become <unk>)\n")
    assert _train(tmp_path, capsys, path, feats, *RL, f"init_from={best}", "allow_init_mismatch=true")[0] == 0


def test_init_from_a_checkpoint_of_other_feature_sizes(xe, tmp_path, capsys):
    _, _, best = xe
    dataset, feats6 = make_tiny_dataset(tmp_path, fc_dim=6)
    assert _train(tmp_path, capsys, dataset, feats6, *RL, f"init_from={best}") == (
        2, f"rlcap train: error: init_from {best} takes 8-d pooled and 8-d region features, but {feats6} holds "
           "6-d and 6-d ones: its weights cannot read them; give features made with its encoder\n")


def test_init_from_a_checkpoint_of_another_image_size(xe, tmp_path, capsys):
    _, _, best = xe
    dataset, feats64 = make_tiny_dataset(tmp_path, image_size=64)
    assert _train(tmp_path, capsys, dataset, feats64, *RL, f"init_from={best}") == (
        2, f"rlcap train: error: init_from {best} was trained on features of 32-px images, but {feats64} holds "
           "features of 64-px images: pass data.features=FILE extracted with `rlcap features --image-size 32`, "
           "or allow_init_mismatch=true\n")


def test_scst_without_init_from_warns(tiny, tmp_path, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="rlcap.train.init_source"):
        assert _train(tmp_path, capsys, *tiny, *RL)[0] == 0
    assert [r.getMessage() for r in caplog.records if r.name == "rlcap.train.init_source"] == [
        "algorithm=scst starts from random weights (no init_from): it is meant to continue an XE model; "
        "pass init_from=XE_RUN/best"]


# --- a checkpoint whose weights do not fit its config ------------------------------------------


def test_checkpoint_weights_that_do_not_fit_its_config(xe, tmp_path, capsys):
    _, _, best = xe
    edited = tmp_path / "edited"
    shutil.copytree(best, edited)
    manifest = json.loads((edited / "checkpoint.json").read_text())
    manifest["specs"]["policy"]["settings"]["hidden_dim"] = 24  # trained with 16; the policy is built from its spec
    (edited / "checkpoint.json").write_text(json.dumps(manifest))
    assert main(["eval", str(edited), "--split", "test"]) == 2
    # the fc model's LSTM: word.proj (4 x hidden, embed), its bias, w_hh (4 x hidden, hidden), logit (vocab, hidden)
    assert capsys.readouterr().err == (
        f"rlcap eval: error: {edited}: the weights of part 'policy' do not fit the model the checkpoint describes: "
        "word.proj.weight is (64, 16) there but (96, 16) in the model, and 3 more tensors differ in shape "
        "(a damaged checkpoint, or an edited checkpoint.json or config.json)\n")
