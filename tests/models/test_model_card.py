"""The model card of a checkpoint's ``hf/`` folder (rlcap.models.hf.model_card): written by every save of a
transformers policy, its header the metadata the Hub reads, its scores those of the last ``rlcap eval``
with the checkpoint's own decoding (tests/models/test_model_card_round5.py: the decoding, the prompt, GRPO)."""

from __future__ import annotations

import json

import pytest
import yaml

from rlcap.cli import main
from rlcap.models.hf.model_card import base_model_of, pipeline_tag, read_header
from tests.models.hf_captioners import captioner_with_store
from tests.tiny import tiny_overrides

pytest.importorskip("transformers")


def _header(card) -> dict:
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_card_after_training_and_after_eval(tmp_path, capsys):
    dataset, model, store = captioner_with_store("git", tmp_path)
    xe = tmp_path / "xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, xe, **{
        "model.arch": "hf", "model.path": model, "model.dropout": 0.0, "xe.epochs": 1})]) == 0
    card = xe / "best" / "hf" / "README.md"
    header = _header(card)
    assert header["base_model"] == str(model.resolve()) and header["library_name"] == "transformers"
    assert header["pipeline_tag"] == "image-to-text" and {"rlcap", "xe"} <= set(header["tags"])
    text = card.read_text(encoding="utf-8")
    assert "| data | `dataset.json` (24 train, 6 val images) |" in text, text
    assert "lora_rank" not in text and "| xe.epochs | `1` |" in text
    assert "No `rlcap eval` with the checkpoint's own decoding has scored this checkpoint yet" in text

    # an SCST run from it: its card names the first base model, its method and its reward
    scst = tmp_path / "scst"
    overrides = [o for o in tiny_overrides(dataset, store, scst) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={xe / 'best'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2", "max_steps=1"]) == 0
    best = scst / "best" if (scst / "best").is_dir() else scst / "last"
    header = _header(best / "hf" / "README.md")
    assert header["base_model"] == str(model.resolve())
    assert {"rlcap", "scst", "reinforcement-learning"} <= set(header["tags"])
    assert "1 x `cider_d`" in (best / "hf" / "README.md").read_text(encoding="utf-8")

    # rlcap eval with the checkpoint's own decoding writes its scores into the card, the same as scores.json
    capsys.readouterr()
    assert main(["eval", str(xe / "best")]) == 0
    scores = json.loads((xe / "best" / "eval_test" / "scores.json").read_text())["model"]
    text = card.read_text(encoding="utf-8")
    rows = dict(line.strip("|").split("|")[:2] for line in text.split("## Scores")[1].splitlines()
                if line.startswith("| ") and not line.startswith("| metric"))
    shown = {name.strip(): float(value) for name, value in rows.items()}
    assert shown.keys() == scores.keys() and all(abs(shown[m] - scores[m]) < 5e-5 for m in scores), (shown, scores)
    assert _header(card)["base_model"] == str(model.resolve())  # the header kept


def test_base_model_and_pipeline_tag(tmp_path):
    hub = tmp_path / "models--Salesforce--blip-image-captioning-base" / "snapshots" / "abc123"
    hub.mkdir(parents=True)
    assert base_model_of(hub) == "Salesforce/blip-image-captioning-base"
    named = tmp_path / "local"
    named.mkdir()
    (named / "config.json").write_text(json.dumps({"_name_or_path": "nlpconnect/vit-gpt2-image-captioning"}))
    assert base_model_of(named) == "nlpconnect/vit-gpt2-image-captioning"
    (named / "config.json").write_text("{}")
    assert base_model_of(named) == str(named.resolve()) and pipeline_tag(named) == "image-to-text"
    (named / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    assert pipeline_tag(named) == "image-text-to-text"
    assert read_header(named / "README.md") == {}
