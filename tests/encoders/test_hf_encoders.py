"""`--encoder hf:DIR`: transformers vision models from a local folder, each family built tiny with random weights
(tests/encoders/hf_models.py) and saved as a downloaded model is. A store's rows are the model's own forward
pass (computed here by each family's own modules, independently of rlcap's one code path) within float16's
rounding; a captioner trains on each store; a store never mixes encoders."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.encoders.extract import extract_features
from rlcap.train.logger import read_log
from tests.encoders.hf_models import KINDS, save_tiny
from tests.tiny import make_tiny_dataset, tiny_overrides

pytest.importorskip("transformers")


def reference(kind: str, model, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(fc, att) of ``pixels`` by the family's own modules: what FEATURES.md says each store holds."""
    with torch.no_grad():
        if kind in ("clip", "siglip"):
            tower = model.vision_model(pixel_values=pixels)
            projection = getattr(model, "visual_projection", None)
            fc = projection(tower.pooler_output) if projection is not None else tower.pooler_output
            tokens = tower.last_hidden_state
            return fc, tokens[:, 1:] if kind == "clip" else tokens  # SigLIP has no class token
        if kind == "clip_vision_projection":
            out = model(pixel_values=pixels)
            return out.image_embeds, out.last_hidden_state[:, 1:]
        if kind == "convnext":
            out = model(pixel_values=pixels)
            return out.pooler_output, out.last_hidden_state.flatten(2).transpose(1, 2)
        if kind == "dinov2":  # the class token and its 2 register tokens come first
            out = model(pixel_values=pixels)
            return out.pooler_output, out.last_hidden_state[:, 3:]
        if kind == "git":  # a captioner: every token its decoder reads; no pooler, so their mean
            tokens = model.git.image_encoder(pixel_values=pixels).last_hidden_state
            return tokens.mean(1), tokens
        if kind in ("vision_encoder_decoder", "blip"):  # captioners: every token, the class token too
            out = (model.encoder if kind == "vision_encoder_decoder" else model.vision_model)(pixel_values=pixels)
            return out.pooler_output, out.last_hidden_state
        out = model(pixel_values=pixels)  # ViT
        return out.pooler_output, out.last_hidden_state[:, 1:]


def _within_float16_rounding(stored: np.ndarray, expected: torch.Tensor) -> None:
    expected = expected.float().numpy()
    step = np.abs(np.spacing(expected.astype(np.float16))).astype(np.float32)  # one float16 step at each value
    assert stored.shape == expected.shape
    assert np.all(np.abs(stored.astype(np.float32) - expected) <= step), np.abs(stored - expected).max()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny dataset (36 images, ids "0".."35") with a picture for each id, and a folder per family."""
    from tests.encoders.conftest import write_images

    folder = tmp_path_factory.mktemp("hf")
    dataset, _ = make_tiny_dataset(folder)
    images = write_images(folder / "im", 36, size=(40, 30))
    pictures = {str(k): images[f"img{k}"] for k in range(36)}
    models = {kind: save_tiny(kind, folder / kind, seed=k) for k, kind in enumerate(KINDS)}
    return folder, dataset, pictures, models


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_holds_the_models_own_forward_pass(tiny, kind):
    import transformers

    from rlcap.encoders.images import load_image

    folder, _, pictures, models = tiny
    out = folder / f"{kind}.h5"
    first = dict(list(pictures.items())[:6])
    extract_features(first, out, encoder=f"hf:{models[kind]}", num_workers=0)
    model = getattr(transformers, type_name(models[kind])).from_pretrained(models[kind]).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(models[kind])
    pixels = processor(images=[load_image(p) for p in first.values()], return_tensors="pt")["pixel_values"]
    fc, att = reference(kind, model, pixels)
    with h5py.File(out, "r") as f:
        order = [list(f["ids"].asstr()[()]).index(i) for i in first]
        _within_float16_rounding(f["fc"][order], fc)
        _within_float16_rounding(f["att"][order], att)
        assert f.attrs["encoder"] == f"hf:{type(model).__name__}" and f.attrs["precision"] == "fp32"
        assert f.attrs["encoder_path"] == str(models[kind].resolve()) and len(f.attrs["encoder_weights"]) == 32


def type_name(folder) -> str:
    import json

    return json.loads((folder / "config.json").read_text())["architectures"][0]


@pytest.mark.parametrize("kind", ["clip_vision_projection", "vit", "convnext", "vision_encoder_decoder"])
def test_a_captioner_trains_one_xe_epoch_on_each_store(tiny, kind):
    folder, dataset, pictures, models = tiny
    feats = folder / f"all_{kind}.h5"
    extract_features(pictures, feats, encoder=f"hf:{models[kind]}", num_workers=0)
    run = folder / f"xe_{kind}"
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, run, **{"xe.epochs": 1,
                                                                              "model.arch": "updown"})))
    losses = [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]
    assert len(losses) == 6 and all(np.isfinite(losses))


def test_a_store_never_mixes_encoders(tiny, capsys):
    folder, _, pictures, models = tiny
    images = folder / "im"
    out = folder / "mixed.h5"
    assert main(["features", str(images), "--out", str(out), "--encoder", f"hf:{models['vit']}"]) == 0
    capsys.readouterr()
    assert main(["features", str(images), "--out", str(out), "--encoder", f"hf:{models['clip']}"]) == 2
    assert capsys.readouterr().err == (f"rlcap features: error: {out} holds features made with encoder='hf:ViTModel', "
                                       "not 'hf:CLIPModel': give the same setting to continue it, or write them to "
                                       "another file (or delete this one to start over)\n")
    other = save_tiny("vit", folder / "vit_other", seed=99)  # the same family, other weights
    assert main(["features", str(images), "--out", str(out), "--encoder", f"hf:{other}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlcap features: error: {out} holds features made with encoder_weights='") and \
        err.count("\n") == 1
    assert main(["features", str(images), "--out", str(out)]) == 2  # EfficientNet-Lite0
    assert "holds features made with encoder='hf:ViTModel', not 'efficientnet-lite0'" in capsys.readouterr().err
    assert main(["features", str(images), "--out", str(folder / "x.h5"), "--encoder", f"hf:{models['vit']}",
                 "--image-size", "64"]) == 2
    assert "--image-size is efficientnet-lite0's: hf:" in capsys.readouterr().err
    assert main(["features", str(images), "--out", str(folder / "x.h5"), "--encoder", "clip"]) == 2
    assert "--encoder: 'clip' is not one of efficientnet-lite0, hf:DIR" in capsys.readouterr().err
    assert main(["features", str(images), "--out", str(folder / "x.h5"), "--encoder", f"hf:{folder / 'none'}"]) == 2
    assert "no config.json there" in capsys.readouterr().err


def test_through_the_cli_features_of_a_tiny_clip_then_xe(tiny, capsys):
    """As a user would: `rlcap features IMAGES --encoder hf:DIR`, rows equal to transformers' own forward,
    then `rlcap train` XE on that store."""
    import transformers

    from rlcap.encoders.images import load_image

    folder, dataset, pictures, models = tiny
    store = folder / "cli_clip.h5"
    assert main(["features", str(folder / "im"), "--out", str(store), "--encoder", f"hf:{models['clip']}",
                 "--dataset", str(_with_files(folder, dataset))]) == 0
    model = transformers.CLIPModel.from_pretrained(models["clip"]).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(models["clip"])
    ids = [str(k) for k in range(36)]
    with torch.no_grad():
        pixels = processor(images=[load_image(pictures[i]) for i in ids], return_tensors="pt")["pixel_values"]
        fc = model.get_image_features(pixel_values=pixels).pooler_output  # (transformers 5: the projected embedding)
    with h5py.File(store, "r") as f:
        order = [list(f["ids"].asstr()[()]).index(i) for i in ids]
        _within_float16_rounding(f["fc"][order], fc)
    capsys.readouterr()
    run = folder / "cli_xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, run, **{"xe.epochs": 1})]) == 0
    assert "done: 6 steps" in capsys.readouterr().out


def _with_files(folder, dataset):
    """The tiny dataset with each image's file name, so that `rlcap features --dataset` finds its pictures."""
    import json

    data = json.loads(dataset.read_text())
    for item in data["images"]:
        item["filename"] = f"img{item['imgid']}.png"
    path = folder / "dataset_files.json"
    path.write_text(json.dumps(data))
    return path


def test_caption_encodes_images_with_the_hf_model_its_features_came_from(tiny, capsys):
    """`rlcap caption` reads the encoder from the checkpoint (its store recorded the model and its folder): the
    picture's features are those `rlcap features` wrote for it, within float16's rounding."""
    import shutil

    from rlcap.encoders.load import checkpoint_encoder
    from rlcap.encoders.images import load_image
    from rlcap.eval.open_run import open_run

    folder, dataset, pictures, models = tiny
    model_dir = folder / "vit_for_caption"
    shutil.copytree(models["vit"], model_dir)
    feats = folder / "caption_vit.h5"
    extract_features(pictures, feats, encoder=f"hf:{model_dir}", num_workers=0)
    run = folder / "caption_run"
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, run, **{"xe.epochs": 1})))
    config = open_run(run / "best", device="cpu").config
    assert config["feature_dims"]["encoder"] == "hf:ViTModel"
    encoder = checkpoint_encoder(run / "best", config["feature_dims"])
    fc, _ = encoder.features(torch.from_numpy(encoder.prepare([load_image(pictures["0"])])))
    with h5py.File(feats, "r") as f:
        _within_float16_rounding(f["fc"][list(f["ids"].asstr()[()]).index("0")][None], fc)
    capsys.readouterr()
    assert main(["caption", str(run / "best"), str(pictures["0"]), str(pictures["1"])]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    shutil.rmtree(model_dir)
    assert main(["caption", str(run / "best"), str(pictures["0"])]) == 2
    assert f"was trained on features of hf:ViTModel read from {model_dir.resolve()}, which is not there now" in \
        capsys.readouterr().err
