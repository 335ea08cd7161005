"""Model cards that stay true (issue 64, Build 2): a card's scores are those of an ``rlcap eval`` that decoded as
the exported ``generate()`` does (the checkpoint's beam, lengths, length penalty, n-gram blocking and precision),
which the card names; an exploratory evaluation leaves them. The card and the folder's ``prompt.json`` record the
prompt a vision-language policy was trained with, ``base_model`` is the folder the run started from, and the card
lists the method's own section (GRPO's ``grpo.*``) and ``rl.kl_coef``."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import yaml

from rlcap.cli import main
from rlcap.models.hf.model_card import PROMPT, describe_decoding, own_decoding, same_decoding
from tests.cli.in_process import run_cli
from tests.models.hf_captioners import captioner_with_store
from tests.tiny import tiny_overrides

transformers = pytest.importorskip("transformers")


def _header(card) -> dict:
    return yaml.safe_load(card.read_text(encoding="utf-8").split("---\n")[1])


def _card_scores(card) -> dict[str, float]:
    text = card.read_text(encoding="utf-8").split("## Scores")[1]
    rows = [line.strip("|").split("|")[:2] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| metric")]
    return {name.strip(): float(value) for name, value in rows}


@pytest.fixture(scope="module")
def git_xe(tmp_path_factory):
    """A tiny GIT trained by XE from its folder, beam 3 with a length penalty: (dataset, folder, store, run)."""
    folder = tmp_path_factory.mktemp("card5")
    dataset, model, store = captioner_with_store("git", folder)
    xe = folder / "xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, xe, **{
        "model.arch": "hf", "model.path": model, "model.dropout": 0.0, "xe.epochs": 1,
        "decode.length_penalty": 0.5})]) == 0
    return dataset, model, store, xe


def test_an_exploratory_eval_leaves_the_cards_scores(git_xe, capsys, caplog, tmp_path):
    _, model, _, xe = git_xe
    card = xe / "best" / "hf" / "README.md"
    text = card.read_text(encoding="utf-8")
    # the card says how generate() decodes: the run's decode section, which its generation config holds
    own = "beam search of 3, at most 6 tokens, length penalty 0.5, no n-gram blocking"
    assert own in text and "forward passes in fp32" in text, text
    generation = json.loads((xe / "best" / "hf" / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["max_new_tokens"], generation["length_penalty"]) == (3, 6, 0.5)
    assert _header(card)["base_model"] == str(model.resolve())  # the folder the run started from, not its name
    assert "# captioner, tuned by rlcap (xe)" in text

    # an evaluation with the checkpoint's own decoding: its scores, the decoding named beside them
    assert run_cli(capsys, "eval", str(xe / "best"))[0] == 0
    scores = json.loads((xe / "best" / "eval_test" / "scores.json").read_text())
    assert scores["evaluated"]["decoding"] == {"beam_size": 3, "max_len": 6, "length_penalty": 0.5,
                                               "no_repeat_ngram": 0, "precision": "fp32"}
    shown = _card_scores(card)
    assert shown.keys() == scores["model"].keys() and all(abs(shown[m] - v) < 5e-5 for m, v in scores["model"].items())
    published = card.read_text(encoding="utf-8")
    assert f"`rlcap eval` on the `test` split of `dataset.json`, decoded as `generate()` decodes ({own}, " \
           "forward passes in fp32):" in published

    # an exploratory evaluation (greedy, 2 tokens) writes its own scores.json and leaves the card as it was
    with caplog.at_level(logging.INFO, logger="rlcap.models.hf.model_card"):
        rc, _, err = run_cli(capsys, "eval", str(xe / "best"), "--beam-size", "1", "--max-len", "2",
                             "--out", str(tmp_path / "short"))
    assert rc == 0, err
    short = json.loads((tmp_path / "short" / "scores.json").read_text())
    assert short["evaluated"]["decoding"]["beam_size"] == 1 and short["evaluated"]["decoding"]["max_len"] == 2
    assert card.read_text(encoding="utf-8") == published
    assert "keeps its scores" in caplog.text and "greedy, at most 2 tokens" in caplog.text, caplog.text
    # ... so does another length penalty or precision; the checkpoint's own settings given as options rewrite it
    assert run_cli(capsys, "eval", str(xe / "best"), "--length-penalty", "1.0", "--split", "val")[0] == 0
    assert card.read_text(encoding="utf-8") == published
    assert run_cli(capsys, "eval", str(xe / "best"), "--beam-size", "3", "--max-len", "6", "--split", "val")[0] == 0
    assert "on the `val` split" in card.read_text(encoding="utf-8")
    val = json.loads((xe / "best" / "eval_val" / "scores.json").read_text())["model"]
    assert all(abs(_card_scores(card)[m] - v) < 5e-5 for m, v in val.items())


def test_same_decoding_compares_what_decides_the_captions():
    own = own_decoding({"decode": {"beam_size": 1, "max_len": 16, "length_penalty": 0.0, "no_repeat_ngram": 0,
                                   "temperature": 0.7}, "precision": "fp32"})
    assert own == {"beam_size": 1, "max_len": 16, "length_penalty": 0.0, "no_repeat_ngram": 0, "precision": "fp32"}
    # greedy decoding reads neither the length penalty nor the n-gram blocking
    assert same_decoding(own, {**own, "length_penalty": 2.0, "no_repeat_ngram": 3})
    beam = {**own, "beam_size": 3}
    assert not same_decoding(beam, {**beam, "length_penalty": 2.0})
    assert not same_decoding(beam, {**beam, "no_repeat_ngram": 3})
    assert not same_decoding(own, {**own, "precision": "bf16"}) and not same_decoding(own, {**own, "max_len": 2})
    assert not same_decoding(own, {})  # (no decoding recorded: not the checkpoint's)
    assert describe_decoding(beam) == ("beam search of 3, at most 16 tokens, length penalty 0, no n-gram blocking, "
                                       "forward passes in fp32")


def test_a_grpo_card_lists_its_section_and_the_kl_term(git_xe, capsys):
    dataset, model, store, xe = git_xe
    grpo = xe.parent / "grpo"
    overrides = [o for o in tiny_overrides(dataset, store, grpo) if not o.startswith("model.")]
    rc, _, err = run_cli(capsys, "train", "configs/shapes_grpo.yaml", *overrides, f"init_from={xe / 'best'}",
                         "rl.epochs=1", "rl.batch_size=8", "rl.n_samples=2", "rl.kl_coef=0.04", "max_steps=1")
    assert rc == 0, err
    best = grpo / "best" if (grpo / "best").is_dir() else grpo / "last"
    card = best / "hf" / "README.md"
    text = card.read_text(encoding="utf-8")
    section = json.loads((best / "config.json").read_text())["grpo"]
    assert section and all(f"| grpo.{key} | `{value}` |" in text for key, value in section.items()), text
    assert "| rl.kl_coef | `0.04` |" in text and "| rl.n_samples | `2` |" in text
    header = _header(card)
    assert header["base_model"] == str(model.resolve()) and "grpo" in header["tags"]  # the first run's start
    assert "## Prompt" not in text and not (best / "hf" / PROMPT).exists()  # GIT reads no prompt


@pytest.mark.slow  # (a tiny Qwen2-VL's store, XE run and evaluation)
def test_a_vlm_card_and_folder_record_the_prompt_generate_needs(tmp_path, capsys):
    """``prompt.json`` holds the text the policy's processor read with each picture; ``generate()`` from that text
    and the pictures writes rlcap's greedy captions."""
    from PIL import Image

    from rlcap.encoders.hf_vlm import load_processor
    from rlcap.models.hf.build_vlm import build_vlm
    from rlcap.models.hf.prompt import prompt_text
    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset

    dataset, _ = make_tiny_dataset(tmp_path)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    model = build_vlm("qwen2_vl", tmp_path / "qwen2_vl", captions)  # (a folder named as its model type)
    store = tmp_path / "qwen.h5"
    assert main(["features", str(tmp_path), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store), "--dtype", "float32"]) == 0  # (generate()'s tokens, unrounded by float16)
    xe = tmp_path / "xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, xe, **{
        "model.arch": "hf", "model.path": model, "model.prompt": "Name the shape.", "xe.epochs": 2,
        "optim.lr": 0.003, "decode.beam_size": 1})]) == 0
    hf = xe / "best" / "hf"
    recorded = json.loads((hf / PROMPT).read_text())["prompt"]
    assert recorded == prompt_text(load_processor(model), "Name the shape.") and "Name the shape." in recorded
    text = (hf / "README.md").read_text(encoding="utf-8")
    assert "## Prompt\n" in text and f"\n{recorded}\n" in text and "| model.prompt | `Name the shape.` |" in text
    assert _header(hf / "README.md")["base_model"] == str(model.resolve())
    assert run_cli(capsys, "eval", str(xe / "best"))[0] == 0
    ours = {str(p["image_id"]): p["caption"] for p in
            json.loads((xe / "best" / "eval_test" / "predictions.json").read_text())}
    assert "greedy, at most 6 tokens, forward passes in fp32" in (hf / "README.md").read_text(encoding="utf-8")
    # a transformers user's generate() with the recorded prompt: rlcap's captions
    policy = transformers.AutoModelForImageTextToText.from_pretrained(hf).eval()
    processor = load_processor(hf)
    theirs = {}
    for record in (r for r in json.loads(dataset.read_text())["images"] if r["split"] == "test"):
        picture = Image.open(tmp_path / record["filename"]).convert("RGB")
        inputs = processor(text=[recorded], images=[[picture]], return_tensors="pt")
        with torch.no_grad():
            ids = policy.generate(**{k: v for k, v in inputs.items() if k != "labels"})
        theirs[str(record["imgid"])] = processor.tokenizer.decode(ids[0, inputs["input_ids"].shape[1]:],
                                                                  skip_special_tokens=True).strip()
    assert len(ours) == 6 and ours == theirs

