"""A vision-language policy that trains its image side (model.train_vision, rlcap.models.hf.vision_training): its
tokens from the pictures' processor outputs equal the frozen route's, its gradients reach the tower (all) or the
projector only; an XE run then a GRPO run with a KL term (reference and checkpoint holding the tower), killed and
resumed exactly, change the tower, and `best/hf`'s own `generate()` writes rlcap's greedy captions."""

from __future__ import annotations

import json

import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.errors import ConfigError, DataError
from tests.tiny import tiny_overrides

transformers = pytest.importorskip("transformers")
ONLINE = {"data.features": "", "model.train_vision": "all"}  # (and data.images: the pictures' folder)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """(dataset, the pictures' folder, a tiny Qwen2-VL's folder)."""
    from tests.models.vlm_matrix import tiny_vlm_run

    folder = tmp_path_factory.mktemp("train_vision")
    dataset, model, _ = tiny_vlm_run(folder)
    return dataset, folder, model


def test_trained_image_side_reads_pixels_and_gets_gradients(qwen, tmp_path):
    from rlcap.data.feats import Feats
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.models.vlm_matrix import captions, pictures

    _, _, folder = qwen
    encoder = load_vlm_encoder(folder)
    host = encoder.on_host(torch.from_numpy(encoder.prepare(pictures())))  # three sizes
    fc, att, counts = encoder.from_host(host)
    stored = Feats(fc, att, torch.arange(att.shape[1])[None] < counts[:, None])
    given = encoder.pixel_feats(host)
    assert given.att.shape[1] == 0 and given.fc[:, -4:].equal(fc[:, -4:])
    frozen = HFVLMCaptioner(folder).eval()
    tokens = captions(frozen)
    with torch.no_grad():
        expected = frozen(stored, tokens)
    for mode, trained in (("all", "visual.blocks.0.attn.qkv.weight"), ("projector", "visual.merger.mlp.0.weight"),
                          ("lora", "visual.blocks.0.attn.qkv.lora_B.default.weight")):
        policy = HFVLMCaptioner(folder, train="lora" if mode == "lora" else "all", train_vision=mode).eval()
        logits = policy(given, tokens)
        real = torch.isfinite(expected)
        torch.testing.assert_close(logits[real], expected[real], rtol=1e-5, atol=1e-5)
        logits[real].logsumexp(-1).sum().backward()
        side = dict(policy.weights.side.modules.named_parameters())
        assert side[trained].grad is not None and side[trained].grad.abs().sum() > 0, mode
        if mode == "projector":  # Qwen2-VL's merger (its norm and MLP) after the tower's last block, nothing else
            assert {n for n, p in side.items() if p.requires_grad} == {
                n for n in side if n.startswith("visual.merger.")}
        if mode == "lora":  # adapters on the tower's layers only; exported merged into its weights
            assert all(".lora_" in n for n, p in side.items() if p.requires_grad)
            with torch.no_grad():
                side[trained].add_(0.1)
                adapted = policy(given, tokens)
            policy.export_pretrained(tmp_path / "lora")
            with torch.no_grad():
                exported = HFVLMCaptioner(tmp_path / "lora", train_vision="all").eval()(given, tokens)
            torch.testing.assert_close(exported[real], adapted[real], rtol=1e-5, atol=1e-5)
            assert not torch.allclose(adapted[real], expected[real], atol=1e-3)
        with pytest.raises(DataError, match="data.features unset"):
            policy.check_store({}, "tokens.h5")
    with pytest.raises(DataError, match="image side is frozen"):
        frozen(given, tokens)
    # checkpoints across the two: a frozen run's weights into a tower-training policy keep its own tower (the
    # folder's), a tower-training run's into a frozen policy leave the saved tower out (its folder holds it)
    trains = HFVLMCaptioner(folder, train_vision="all")
    tower = {k: v.clone() for k, v in trains.state_dict().items() if ".visual." in k}
    assert tower and not any(".visual." in k for k in frozen.state_dict())
    trains.load_state_dict(frozen.state_dict())
    assert all(trains.state_dict()[k].equal(v) for k, v in tower.items())
    frozen.load_state_dict(trains.state_dict())


def test_train_vision_is_refused_where_nothing_could_train_it():
    from rlcap.models import build_model
    from rlcap.models.model_config import ModelConfig

    with pytest.raises(ConfigError, match="model.arch=updown reads features from a store"):
        build_model(ModelConfig(arch="updown", train_vision="all"), 10, 8, 8)
    with pytest.raises(ConfigError, match="LoRA adapters on the tower go with model.train=lora"):
        ModelConfig(arch="hf", path="x", train="lora", train_vision="all")


def _tower(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model-tower.safetensors"))


def test_tower_training_run_changes_the_tower_and_exports_it(qwen, tmp_path):
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.methods.same_losses import CONFIGS
    from tests.models.test_hf_vlm_cli import _exported_generate

    dataset, pictures, folder = qwen
    xe = tmp_path / "xe"
    api.train(api.load_run_config(str(CONFIGS / "shapes_xe.yaml"), tiny_overrides(dataset, "", xe, **{
        **ONLINE, "data.images": pictures, "model.arch": "hf", "model.path": folder, "xe.epochs": 1,
        "xe.batch_size": 12, "val.max_images": 2, "optim.lr": 0.003})))  # (2 steps)
    best = xe / "best"
    assert json.loads((best / "config.json").read_text())["model"]["train_vision"] == "all"
    original = HFVLMCaptioner(folder).weights.side.state()  # (the folder's tower, under the export's names)
    tuned = _tower(best / "hf")
    assert sorted(original) == sorted(tuned)
    assert any(not value.equal(original[key]) for key, value in tuned.items()), "XE left the tower as it was"
    assert main(["eval", str(best), "--beam-size", "1"]) == 0  # rlcap's greedy captions, the pictures encoded online
    ours = {str(p["image_id"]): p["caption"] for p in
            json.loads((best / "eval_test" / "predictions.json").read_text())}
    theirs = _exported_generate(best / "hf", pictures, dataset, num_beams=1)
    assert len(ours) == 6 and ours == theirs
    picture = pictures / "30.png"  # `rlcap caption`: the tokens of the checkpoint's own (tuned) image side
    assert api.caption_images(best, [picture], beam_size=1) == {str(picture): ours["30"]}


@pytest.mark.slow  # (a subprocess killed and resumed)
def test_tower_training_grpo_resumes_exactly_with_the_tower_in_its_reference(qwen, tmp_path):
    from rlcap.train.checkpoint import load_checkpoint
    from tests.train.killing import assert_resume_is_exact

    dataset, pictures, folder = qwen
    rl = tiny_overrides(dataset, "", tmp_path / "unused", **{
        **ONLINE, "data.images": pictures, "algorithm": "grpo", "model.arch": "hf", "model.path": folder,
        "rl.batch_size": 8, "rl.n_samples": 2, "decode.max_len": 6, "val.max_images": 4, "rl.epochs": 2,
        "grpo.iterations": 2, "rl.kl_coef": 0.1, "optim.lr": 0.003, "save_every": 2})
    assert_resume_is_exact(rl, tmp_path / "grpo", tmp_path / "killed", 2, 6)
    saved = load_checkpoint(tmp_path / "killed" / "last")
    assert any(".visual." in key for key in saved.weights["reference"]), "the KL reference holds no tower"
    assert any(".visual." in key for key in saved.weights["policy"]), "the policy's checkpoint holds no tower"
    reference = {k: v for k, v in saved.weights["reference"].items() if ".visual." in k}
    assert any(not v.equal(saved.weights["policy"][k]) for k, v in reference.items()), "GRPO left the tower"


@pytest.mark.slow  # (a model built a family)
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "smolvlm", "llava", "paligemma", "gemma3", "idefics2",
                                    "internvl", "llava_onevision", "glm4v", "mistral3"])
def test_every_family_reads_its_pictures_processor_outputs_as_its_stored_tokens(family, tmp_path):
    """Pictures of three sizes: each family's policy that trains its image side (all, and projector) gives the
    teacher-forced logits of the frozen policy on the float32 tokens, from the processor outputs in rows."""
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.models.vlm_matrix import built_family, captions

    folder, frozen, _, shown, stored = built_family(family, tmp_path)
    from rlcap.encoders.hf_vlm import load_vlm_encoder

    encoder = load_vlm_encoder(folder)
    given = encoder.pixel_feats(encoder.on_host(torch.from_numpy(encoder.prepare(shown))))
    tokens = captions(frozen)
    with torch.no_grad():
        expected = frozen(stored, tokens)
        real = torch.isfinite(expected)
        for mode in ("all", "projector"):
            logits = HFVLMCaptioner(folder, train_vision=mode).eval()(given, tokens)
            torch.testing.assert_close(logits[real], expected[real], rtol=1e-5, atol=1e-5)
