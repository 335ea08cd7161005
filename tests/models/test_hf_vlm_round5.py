"""Vision-language model folders as users have them (issue 64, Build 4), through the CLI where the probe met them:
the prompt a run reads logged once, a chat model's folder without its chat template refused; a float32 folder's
store serving a bf16 policy (QUICKSTART's VLM recipes) and the tuned folder's store keeping its digest; a prompt
holding the image token, a folder without its processor's files, a prompt past the language model's positions
(Florence-2's refused, a decoder-only one warned of), a whitespace prompt; and a recipe from ``model.path`` not
said to start from random weights."""

from __future__ import annotations

import json
import logging
import shutil

import h5py
import pytest
import torch

from rlcap.cli import main
from tests.cli.in_process import run_cli
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

transformers = pytest.importorskip("transformers")

FAMILIES = ("qwen2_vl", "smolvlm", "paligemma", "florence2")


@pytest.fixture(scope="module")
def vlms(tmp_path_factory):
    """(root, dataset, {family: (folder, store)}): each family built tiny in float32 and its store written by
    `rlcap features`."""
    from rlcap.models.hf.build_vlm import build_vlm

    root = tmp_path_factory.mktemp("vlm5")
    dataset, _ = make_tiny_dataset(root)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    built = {}
    for family in FAMILIES:
        folder = build_vlm(family, root / family, captions)
        store = root / f"{family}.h5"
        assert main(["features", str(root), "--dataset", str(dataset), "--encoder", f"hf:{folder}",
                     "--out", str(store)]) == 0
        built[family] = (folder, store)
    return root, dataset, built


def _xe(vlms, family, out, *extra, folder=None):
    """`rlcap train configs/shapes_xe.yaml` on ``family``'s store, one epoch: its argv."""
    _, dataset, built = vlms
    own, store = built[family]
    return ["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, out, **{
        "model.arch": "hf", "model.path": folder or own, "xe.epochs": 1}), *extra]


def _one_line(err: str, command: str = "train") -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlcap {command}: error: "), err
    return lines[0]


def _messages(caplog, level, name=None) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and (name is None or r.name == name)]


def test_the_prompt_is_logged_once_and_a_chat_folder_without_its_template_is_refused(vlms, tmp_path, capsys,
                                                                                      caplog):
    """The prompt text a run reads, logged once (INFO), with the chat template's vision delimiters; the same folder
    without chat_template.jinja (a partial download) trained on PaliGemma's task prefix without them: now refused
    in one line, decided by what its processor does (it needs the picture's place written into the text), where
    PaliGemma's processor, which places the picture itself, trains without a template."""
    folder, _ = vlms[2]["qwen2_vl"]
    with caplog.at_level(logging.INFO, logger="rlcap.models.hf.prompt"):
        assert main(_xe(vlms, "qwen2_vl", tmp_path / "whole")) == 0
    said = [m for m in _messages(caplog, logging.INFO) if "the prompt before each caption" in m]
    assert len(said) == 1 and "<|vision_start|><|image_pad|><|vision_end|>Describe this image" in said[0], said
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)
    (partial / "chat_template.jinja").unlink()
    rc, _, err = run_cli(capsys, *_xe(vlms, "qwen2_vl", tmp_path / "partial_run", folder=partial))
    assert rc == 2
    assert "needs the picture's place written into the prompt" in _one_line(err) and "chat_template.jinja" in err
    assert not (tmp_path / "partial_run" / "last").exists()


@pytest.mark.parametrize("family", ["qwen2_vl", "smolvlm", "paligemma"])
def test_a_float32_towers_tokens_are_the_bf16_towers_within_bf16(vlms, family):
    """What a bf16 policy on a float32 folder's store relies on: the image tokens of the float32 image side (what
    `rlcap features` stores), rounded to bf16 as the bf16 language model reads them, equal those of the image side
    loaded in bf16 (what `generate()` of the bf16 model computes from the pixels) within bf16's precision: four of
    its units (2**-8) of the largest token (measured over the 36 pictures: at most 1.8 units for SmolVLM, 2.5 for
    Qwen2-VL, 3.1 for PaliGemma; the bf16 tower's own rounding, the float32 tokens being the nearer the exact)."""
    from PIL import Image

    from rlcap.data.hf_text import captioner_config
    from rlcap.encoders.hf_vlm import image_tokens, load_vlm_encoder

    root, _, built = vlms
    folder, _ = built[family]
    encoder = load_vlm_encoder(folder)
    _, model_class = captioner_config(folder)
    bf16 = model_class.from_pretrained(folder, dtype=torch.bfloat16).eval()
    for name in ("3.png", "17.png"):
        picture = Image.open(root / name).convert("RGB")
        with torch.no_grad():
            stored = image_tokens(encoder.model, encoder.processor, picture).float()
            theirs = image_tokens(bf16, encoder.processor, picture).float()
        assert stored.dtype == torch.float32 and next(encoder.model.parameters()).dtype == torch.float32
        bound = 4 * 2 ** -8 * stored.abs().max()
        assert (stored.bfloat16().float() - theirs).abs().max() <= bound


def test_quickstarts_vlm_recipes_on_a_float32_folder(vlms, tmp_path, capsys, caplog):
    """configs/coco_vlm_scst.yaml (model.dtype=bfloat16, precision bf16) with model.path a float32 folder and the
    store `rlcap features` wrote for it, as QUICKSTART runs it: it trains (the store was refused), and says
    nothing of random weights (it starts from the folder's); SCST from its checkpoint reads the same store; its
    `best/hf` declares float32 (the image side as the folder held it, the bf16 weights exact), so that `rlcap
    features` on it records the original store's image side; coco_vlm_grpo.yaml from model.path neither warns."""
    root, dataset, built = vlms
    folder, store = built["smolvlm"]
    quick = [f"data.dataset={dataset}", f"data.features={store}", f"model.path={folder}", "data.min_count=1",
             "rl.batch_size=8", "rl.n_samples=2", "rl.micro_batch=8", "val.max_images=4", "decode.beam_size=1",
             "decode.max_len=6", "track.to=[]", "threads=1"]
    with caplog.at_level(logging.WARNING):
        assert main(["train", "configs/coco_vlm_scst.yaml", *quick, f"out_dir={tmp_path / 'scst'}"]) == 0
        assert main(["train", "configs/coco_vlm_grpo.yaml", *quick, f"out_dir={tmp_path / 'grpo'}", "max_steps=1",
                     "rl.batch_size=4"]) == 0
    assert not [m for m in _messages(caplog, logging.WARNING) if "random weights" in m], caplog.text
    exported = tmp_path / "scst" / "best" / "hf"
    assert json.loads((exported / "config.json").read_text())["dtype"] == "float32"
    again = [o for o in quick if not o.startswith("model.path=")]
    assert main(["train", "configs/coco_vlm_scst.yaml", *again, f"init_from={tmp_path / 'scst' / 'best'}",
                 f"out_dir={tmp_path / 'again'}", "max_steps=1"]) == 0
    tuned = tmp_path / "tuned.h5"
    assert main(["features", str(root), "--dataset", str(dataset), "--encoder", f"hf:{exported}",
                 "--out", str(tuned)]) == 0
    with h5py.File(store) as first, h5py.File(tuned) as second:
        assert first.attrs["tower_weights"] == second.attrs["tower_weights"]


def test_a_prompt_holding_the_image_token(vlms, tmp_path, capsys, caplog):
    """`<image>caption es`, as transformers' PaliGemma warning asks users to write it, was a traceback (two image
    tokens for one picture): the token is removed with a warning, since rlcap places the picture, and the run
    reads one image token then the task prefix."""
    with caplog.at_level(logging.INFO, logger="rlcap.models.hf.prompt"):
        rc, _, err = run_cli(capsys, *_xe(vlms, "paligemma", tmp_path / "run", "model.prompt=<image>caption es"))
    assert rc == 0, err
    warned = _messages(caplog, logging.WARNING)
    assert len(warned) == 1 and "holds <image>: rlcap places the picture itself" in warned[0], warned
    said = [m for m in _messages(caplog, logging.INFO) if "the prompt before each caption" in m]
    assert len(said) == 1 and said[0].endswith("'<image>caption es'"), said


def test_a_folder_without_its_processor_config(vlms, tmp_path, capsys):
    """Without processor_config.json, `rlcap train` was a raw OSError: now one line, the one `rlcap features`
    gives, naming the files a processor is read from."""
    root, dataset, built = vlms
    folder = tmp_path / "partial"
    shutil.copytree(built["qwen2_vl"][0], folder)
    (folder / "processor_config.json").unlink()
    rc, _, err = run_cli(capsys, *_xe(vlms, "qwen2_vl", tmp_path / "run", folder=folder))
    assert rc == 2
    line = _one_line(err)
    assert f"cannot load the processor of {folder}" in line and "processor_config.json" in line
    rc, _, err = run_cli(capsys, "features", str(root), "--dataset", str(dataset), "--encoder", f"hf:{folder}",
                         "--out", str(tmp_path / "x.h5"))
    assert rc == 2 and _one_line(err, "features").split("error: ")[1] == line.split("error: ")[1]


def test_a_prompt_past_the_language_models_positions(vlms, tmp_path, capsys, caplog):
    """Florence-2's language encoder has learned positions: a prompt (with the picture's tokens) of more than its
    max_position_embeddings was an IndexError, now one line; one of exactly that many builds and runs. A
    decoder-only model's prompt at or past its max_position_embeddings trained without a word: now a warning,
    once."""
    from rlcap.data.feats import Feats
    from rlcap.errors import ConfigError
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner

    folder, _ = vlms[2]["florence2"]
    short = Seq2SeqVLMCaptioner(folder, prompt="a")
    positions = short.model.config.get_text_config().max_position_embeddings
    words = positions - short.prompt_ids.shape[1] + 1  # ("a": one token each)
    full = Seq2SeqVLMCaptioner(folder, prompt=" ".join(["a"] * words)).eval()
    assert full.prompt_ids.shape[1] == positions
    channels, high, wide = full.grid
    feats = Feats(torch.zeros(1, channels + 4), torch.randn(1, high * wide, channels), None)
    with torch.no_grad():
        assert torch.isfinite(full(feats, torch.tensor([[1, 5, 6]])).logsumexp(-1)).all()
    with pytest.raises(ConfigError, match=f"{positions + 1} tokens, more than the {positions} positions"):
        Seq2SeqVLMCaptioner(folder, prompt=" ".join(["a"] * (words + 1)))
    rc, _, err = run_cli(capsys, *_xe(vlms, "florence2", tmp_path / "florence", f"model.prompt={'a ' * 600}"))
    assert rc == 2 and "positions of the language encoder" in _one_line(err)
    with caplog.at_level(logging.WARNING, logger="rlcap.models.hf.prompt"):
        rc, _, err = run_cli(capsys, *_xe(vlms, "qwen2_vl", tmp_path / "qwen", f"model.prompt={'a ' * 600}"))
    assert rc == 0, err
    warned = _messages(caplog, logging.WARNING)
    assert len(warned) == 1 and "at or past the language model's max_position_embeddings (512)" in warned[0]


@pytest.mark.parametrize("family", ["qwen2_vl", "florence2"])
def test_a_whitespace_prompt(vlms, tmp_path, capsys, family):
    """`model.prompt=" "` was "expected str, got None" (YAML reads whitespace as null): now the override keeps
    it as written and the policy refuses it in one line."""
    rc, _, err = run_cli(capsys, *_xe(vlms, family, tmp_path / "run", "model.prompt=   "))
    assert rc == 2
    assert _one_line(err) == ("rlcap train: error: model.prompt: '   ' holds only whitespace: write the "
                              "instruction, or leave it empty for the default")
