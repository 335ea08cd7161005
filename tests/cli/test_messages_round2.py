"""Inputs that once gave a traceback or a misleading line, each now one exact line on stderr (exit
code 2) or the right behaviour: output paths checked before any work, empty option lists, non-UTF-8,
empty and duplicate-key YAML, folders of videos, bounded --max-len, recipes found from any working
directory, concepts split sizes that starve training."""

from __future__ import annotations

import json
import re

import pytest

from rlcap import api
from rlcap.metrics import METRIC_NAMES
from rlcap.recipes import checkout_configs, find_recipes
from tests.conftest import REPO
from tests.tiny import make_tiny_dataset, tiny_overrides
from tests.cli.in_process import run_cli


@pytest.fixture(scope="module")
def encoder_ckpt(tmp_path_factory):
    """A checkpoint trained on 1280-d features, as `rlcap caption` encodes them."""
    folder = tmp_path_factory.mktemp("caption")
    dataset, feats = make_tiny_dataset(folder, fc_dim=1280, regions=4, image_size=64)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "run", **{"xe.epochs": 1})))
    return folder / "run" / "best"


# --- output paths, checked before any work --------------------------------------------------------

def test_caption_out_an_existing_folder(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    rc, _, err = run_cli(capsys, "caption", str(tmp_path / "ckpt"), "a.png", "--out", str(tmp_path / "results"))
    assert (rc, err) == (2, f"rlcap caption: error: argument --out: {tmp_path / 'results'} is a folder; expected a "
                            f"file name (e.g. {tmp_path / 'results' / 'captions.json'}) (see rlcap caption --help)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # no stray results.tmp


def test_caption_out_in_a_missing_folder(tmp_path, capsys):
    out = tmp_path / "missing" / "dir" / "x.json"
    rc, _, err = run_cli(capsys, "caption", str(tmp_path / "ckpt"), "a.png", "--out", str(out))
    assert (rc, err) == (2, f"rlcap caption: error: argument --out: the folder {out.parent} does not exist; create "
                            "it first (see rlcap caption --help)\n")
    assert not (tmp_path / "missing").exists()


def test_eval_out_an_existing_file(tmp_path, capsys):
    (tmp_path / "scores").write_text("mine")
    rc, _, err = run_cli(capsys, "eval", str(tmp_path / "ckpt"), "--out", str(tmp_path / "scores"))
    assert (rc, err) == (2, f"rlcap eval: error: argument --out: {tmp_path / 'scores'} is a file; expected a folder "
                            "(made when missing) (see rlcap eval --help)\n")
    assert (tmp_path / "scores").read_text() == "mine"


# --- empty option lists ---------------------------------------------------------------------------

def test_score_with_no_metric(tmp_path, capsys):
    (tmp_path / "refs.json").write_text(json.dumps({"1": ["a red circle"]}))
    rc, out, err = run_cli(capsys, "score", "--refs", str(tmp_path / "refs.json"), "--preds",
                        str(tmp_path / "refs.json"), "--metrics", " , ")
    assert (rc, out) == (2, "")
    assert err == (f"rlcap score: error: --metrics ' , ' names no metric; give one or more of "
                   f"{', '.join(METRIC_NAMES)} (or leave --metrics out for the default set)\n")


def test_bench_with_no_method(tmp_path, capsys, monkeypatch):
    from rlcap.bench.registry import bench_rows

    monkeypatch.chdir(tmp_path)  # the default --data is data/shapes here: nothing may be generated
    rc, _, err = run_cli(capsys, "bench", "--methods", "", "--out", "out")
    assert (rc, err) == (2, f"rlcap bench: error: --methods '' names no method; give one or more of "
                            f"{', '.join(sorted(bench_rows('shapes')))}\n")
    assert list(tmp_path.iterdir()) == []


def test_retrieval_index_of_a_dual_encoder_without_features(tmp_path, capsys):
    dataset, feats = make_tiny_dataset(tmp_path)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "ret", **{
        "algorithm": "embedding", "embedding.epochs": 1, "embedding.batch_size": 8, "embedding.model.word_dim": 8,
        "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8})))
    retriever = tmp_path / "ret" / "best"
    rc, _, err = run_cli(capsys, "retrieval", "index", str(retriever), "--dataset", str(dataset),
                      "--out", str(tmp_path / "bank.h5"))
    assert (rc, err) == (2, f"rlcap retrieval: error: {retriever} is a dual encoder, which embeds feature vectors: "
                            "give the feature store of the dataset (--features FILE, made as its training features "
                            "were)\n")
    assert not (tmp_path / "bank.h5").exists()


# --- YAML recipes ---------------------------------------------------------------------------------

def test_a_recipe_that_is_not_utf8(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"algorithm: xe\nout_dir: caf\xe9\n")  # Latin-1
    rc, _, err = run_cli(capsys, "train", str(recipe))
    assert (rc, err) == (2, f"rlcap train: error: config {recipe} is not UTF-8 text (byte 0xe9 on line 2): save it "
                            "as UTF-8\n")


def test_an_empty_recipe(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# nothing set yet\n")
    rc, _, err = run_cli(capsys, "train", str(recipe), f"out_dir={tmp_path / 'run'}")
    assert (rc, err) == (2, f"rlcap train: error: config {recipe} is empty: a recipe sets at least its algorithm "
                            "(see configs/); to train on the defaults, write `algorithm: xe`\n")
    assert not (tmp_path / "run").exists()


def test_a_key_given_twice_in_a_recipe(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("algorithm: xe\nmodel:\n  hidden_dim: 32\n  embed_dim: 16\n  hidden_dim: 64\n")
    rc, _, err = run_cli(capsys, "train", str(recipe))
    assert (rc, err) == (2, f"rlcap train: error: config {recipe}: key 'hidden_dim' is given twice (lines 3 and 5); "
                            "YAML would keep only the last: remove one\n")
    # a merge key may be overridden: that is what it is for
    recipe.write_text("base: &b {hidden_dim: 32, embed_dim: 16}\nmodel:\n  <<: *b\n  hidden_dim: 64\n")
    from rlcap.config import read_yaml

    assert read_yaml(recipe)["model"] == {"hidden_dim": 64, "embed_dim": 16}


def test_train_without_a_recipe_is_an_error_on_stderr(capsys):
    rc, out, err = run_cli(capsys, "train")
    assert (rc, out, err) == (2, "", "rlcap train: error: give a YAML recipe (see configs/) or --help-config\n")


def test_train_that_stops_before_its_first_validation(tmp_path, capsys):
    dataset, feats = make_tiny_dataset(tmp_path)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("algorithm: xe\n")
    rc, out, _ = run_cli(capsys, "train", str(recipe), *tiny_overrides(dataset, feats, tmp_path / "run"), "max_steps=1")
    assert rc == 0
    assert out.splitlines()[-1] == (f"done: 1 steps, not validated yet (best/ is kept by val CIDEr-D), run folder "
                                    f"{tmp_path / 'run'}")
    assert "-inf" not in out and not (tmp_path / "run" / "best").exists()


# --- images and videos ----------------------------------------------------------------------------

def test_features_on_two_videos_that_share_an_id(tmp_path, capsys):
    (tmp_path / "clips").mkdir()
    for name in ("ok.mp4", "ok.avi"):
        (tmp_path / "clips" / name).write_bytes(b"")
    rc, _, err = run_cli(capsys, "features", str(tmp_path / "clips"), "--out", str(tmp_path / "f.h5"))
    assert (rc, err) == (2, f"rlcap features: error: two videos share the id 'ok': {tmp_path / 'clips' / 'ok.avi'} "
                            f"and {tmp_path / 'clips' / 'ok.mp4'}\n")


def test_features_on_a_folder_of_images_and_videos(tmp_path, capsys):
    from PIL import Image

    (tmp_path / "mixed").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / "mixed" / name)
    (tmp_path / "mixed" / "c.mp4").write_bytes(b"")
    rc, _, err = run_cli(capsys, "features", str(tmp_path / "mixed"), "--out", str(tmp_path / "f.h5"))
    assert (rc, err) == (2, f"rlcap features: error: {tmp_path / 'mixed'} holds both images (2, e.g. a.png) and "
                            "videos (1, e.g. c.mp4): a feature store holds one kind; give a folder of images or a "
                            "folder of videos\n")
    assert not (tmp_path / "f.h5").exists()


def test_caption_a_folder_of_videos(encoder_ckpt, tmp_path, capsys):
    pytest.importorskip("av")
    from tests.encoders.test_video import write_clip

    (tmp_path / "clips").mkdir()
    write_clip(tmp_path / "clips" / "clip.mp4", frames=12)
    rc, out, _ = run_cli(capsys, "caption", str(encoder_ckpt), str(tmp_path / "clips"))
    assert rc == 0
    assert [line.split("\t")[0] for line in out.splitlines()] == [str(tmp_path / "clips" / "clip.mp4")]
    (tmp_path / "empty").mkdir()
    rc, _, err = run_cli(capsys, "caption", str(encoder_ckpt), str(tmp_path / "empty"))
    assert (rc, err) == (2, f"rlcap caption: error: {tmp_path / 'empty'} is a folder with no images or videos in it "
                            "(.jpg, .jpeg, .png, .bmp, .gif, .webp, .tif, .tiff, .mp4, .avi, .mkv, .mov, .webm, "
                            ".m4v, .mpg, .mpeg)\n")


# --- bounds and help ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["eval", "caption"])
def test_max_len_is_bounded(command, capsys):
    argv = [command, "ckpt", *(["a.png"] if command == "caption" else []), "--max-len", "100000"]
    rc, _, err = run_cli(capsys, *argv)
    assert (rc, err) == (2, f"rlcap {command}: error: argument --max-len: expected an integer from 1 to 512, got "
                            f"100000 (see rlcap {command} --help)\n")
    _, out, _ = run_cli(capsys, command, "--help")
    assert "longest caption in words, 1 to 512" in " ".join(out.split())


def test_data_shapes_help_points_to_docs_that_exist(capsys):
    rc, out, _ = run_cli(capsys, "data", "shapes", "--help")
    named = re.findall(r"docs/\w+\.md", out)
    assert rc == 0 and "docs/SHAPES.md" in named
    assert all((REPO / doc).is_file() for doc in named)


# --- bench and demo recipes from any working directory ----------------------------------------------

def test_recipes_found_beside_the_package_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert checkout_configs() == REPO / "configs"
    assert find_recipes(None, ["shapes_xe.yaml", "shapes_scst.yaml"]) == REPO / "configs"


def test_recipes_missing_everywhere(tmp_path, monkeypatch):
    from rlcap.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rlcap.recipes.checkout_configs", lambda: tmp_path / "src_configs")
    with pytest.raises(ConfigError) as info:
        find_recipes(None, ["shapes_xe.yaml"])
    assert str(info.value) == (f"the recipes shapes_xe.yaml are neither in {tmp_path / 'src_configs'} (beside "
                               f"rlcap's source) nor in {tmp_path / 'configs'} (the working directory): give "
                               "--configs DIR, configs/ in an rlcap checkout")


def test_demo_with_a_configs_folder_lacking_the_recipes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "shapes_xe.yaml").write_text("algorithm: xe\n")
    rc, _, err = run_cli(capsys, "demo", "--configs", "mine")
    assert (rc, err) == (2, "rlcap demo: error: --configs mine: shapes_scst.yaml is not there (needed: "
                            "shapes_xe.yaml, shapes_scst.yaml); give the folder of rlcap's recipes, configs/ in an "
                            "rlcap checkout\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # refused before any data was generated


# --- concepts split sizes -------------------------------------------------------------------------

def test_concepts_split_sizes_that_leave_training_too_little(tmp_path, capsys):
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps({str(i): ["a dog runs", "a dog on grass"] for i in range(8092)}))
    rc, _, err = run_cli(capsys, "data", "concepts", "--captions", str(captions), "--out", str(tmp_path / "out"))
    assert (rc, err) == (2, "rlcap data: error: the caption file has 8092 images: 5000 test (--n-test) and 2500 "
                            "validation (--n-val) would leave 592 for training, less than half; lower --n-test and "
                            "--n-val (e.g. --n-test 809 --n-val 809)\n")
    assert not (tmp_path / "out").exists()


def test_concepts_build_prints_its_split_statistics(tmp_path, capsys):
    words = ["dog", "cat", "horse", "bird"]
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps({str(i): [f"a {words[i % 4]} on the grass", f"a {words[i % 4]} outside"]
                                    for i in range(20)}))
    rc, out, _ = run_cli(capsys, "data", "concepts", "--captions", str(captions), "--out", str(tmp_path / "out"),
                      "--n-test", "4", "--n-val", "2", "--drop", "0", "--distractors", "0")
    lines = out.splitlines()
    assert rc == 0 and lines[0].endswith("(4 test, 2 val, 14 train) in " + lines[0].split(" in ")[-1])
    # every held-out caption "a WORD on the grass" has two concepts (WORD, grass); none dropped or added
    assert lines[1:] == [
        "split  scenes  share  concepts   kept  dropped  distractors  regions",
        "train      14    70%      2.00   2.00     0.00         0.00     2.00",
        "val         2    10%      2.00   2.00     0.00         0.00     2.00",
        "test        4    20%      2.00   2.00     0.00         0.00     2.00"]
