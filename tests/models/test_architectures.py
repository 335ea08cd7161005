"""Architectures (model.arch) (rlcap.models.architecture) and a checkpoint that stands alone (issue 56, Build 3, Acceptance): an hf run
trained on a tiny VisionEncoderDecoder, its run folder moved, the model folder it started from deleted and the
data folder moved, captions and is reported as it is; is evaluated and resumed with the data's new location given
(the resumed run logs the uninterrupted run's losses), and a message names the missing data and its key."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.config import to_dict
from rlcap.data.vocab import Vocab
from rlcap.errors import ConfigError, RlcapError
from rlcap.eval.open_run import open_run
from rlcap.models import ARCHITECTURES, AttValueNetwork, ModelConfig, ShowTell, ValueNetwork
from rlcap.train.checkpoint import MANIFEST, load_checkpoint, save_checkpoint
from rlcap.train.logger import read_log
from tests.conftest import REPO
from tests.models.hf_captioners import captioner_with_store, save_captioner
from tests.models.toy_architecture import TOY, ToyGRU
from tests.tiny import make_tiny_dataset, tiny_overrides



@pytest.mark.parametrize("value_class", [ValueNetwork, AttValueNetwork])
def test_each_part_records_its_spec_and_an_older_checkpoint_without_specs_still_opens(tmp_path, value_class):
    """The value network is built again from its own spec, never from the ac section; a checkpoint of a release that
    recorded no specs (and no ac.value_features) opens the network its weights show."""
    cfg = api.load_run_config(None, ["algorithm=ac", "model.arch=fc", "model.embed_dim=8", "model.hidden_dim=8", "model.att_hidden_dim=8"])
    vocab = Vocab.build([["a", "red", "circle"]], 1)
    modules = {"policy": ShowTell(cfg.model, len(vocab), 6, 5), "value": value_class(cfg.model, len(vocab), 6, 5)}
    config = {**to_dict(cfg), "feature_dims": {"fc": 6, "att": 5, "image_size": None}}
    folder = save_checkpoint(tmp_path / "best", modules, config, vocab, None, {"step": 1, "epoch": 1})
    manifest = json.loads((folder / MANIFEST).read_text())
    features = "att" if value_class is AttValueNetwork else "fc"
    assert manifest["specs"]["value"] == {"class": f"rlcap.models.value.{value_class.__name__}", "family": "value",
                                          "settings": {"features": features}}
    assert manifest["specs"]["policy"]["family"] == "fc" and manifest["specs"]["policy"]["settings"] == config["model"]
    assert type(open_run(folder, device="cpu", value=True).value) is value_class
    del manifest["specs"]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    del config["ac"]
    (folder / "config.json").write_text(json.dumps(config))
    opened = open_run(folder, device="cpu", value=True).value
    assert type(opened) is value_class
    for key, tensor in opened.state_dict().items():
        assert tensor.equal(modules["value"].state_dict()[key]), key


def test_the_policy_is_built_from_its_spec_and_an_older_checkpoint_from_its_config(tmp_path):
    """open_run builds the policy from checkpoint.json's spec of it, not from config.json's model section (here
    edited to another architecture); a checkpoint that recorded no specs is built from that section."""
    cfg = api.load_run_config(None, ["model.arch=fc", "model.embed_dim=8", "model.hidden_dim=8"])
    vocab = Vocab.build([["a", "red", "circle"]], 1)
    policy = ShowTell(cfg.model, len(vocab), 6, 5)
    config = {**to_dict(cfg), "feature_dims": {"fc": 6, "att": 5, "image_size": None}}
    folder = save_checkpoint(tmp_path / "best", {"policy": policy}, config, vocab, None, {"step": 1, "epoch": 1})
    recorded = (folder / "config.json").read_text()
    (folder / "config.json").write_text(json.dumps({**config, "model": {**config["model"], "arch": "updown",
                                                                        "hidden_dim": 16}}))

    def same_policy() -> bool:
        opened = open_run(folder, device="cpu").policy
        return type(opened) is ShowTell and all(t.equal(policy.state_dict()[k]) for k, t in opened.state_dict().items())

    assert same_policy()
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["specs"]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RlcapError, match="weights of part 'policy' do not fit the model the checkpoint describes"):
        open_run(folder, device="cpu")  # no spec: config.json's section, the edited one
    (folder / "config.json").write_text(recorded)
    assert same_policy()


def _require_transformers() -> None:
    pytest.importorskip("transformers")


def _losses(run) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in read_log(run / "log.jsonl") if r["split"] == "train"]


def _command(dataset, store, out, model, epochs: int) -> list[str]:
    return ["train", str(REPO / "configs" / "shapes_xe.yaml"), *tiny_overrides(dataset, store, out, **{
        "model.arch": "hf", "model.path": model, "model.dropout": 0.0, "xe.epochs": epochs, "optim.lr": 0.003})]


@pytest.mark.slow
def test_a_moved_hf_run_without_its_model_folder_captions_reports_evaluates_and_resumes(tmp_path, monkeypatch,
                                                                                         capsys):
    _require_transformers()
    data = tmp_path / "data"
    data.mkdir()
    dataset, model, store = captioner_with_store("vision_encoder_decoder", data)
    assert main(_command(dataset, store, tmp_path / "full", model, 3)) == 0  # the uninterrupted run
    assert main(_command(dataset, store, tmp_path / "run", model, 2)) == 0
    assert main(["eval", str(tmp_path / "run" / "best"), "--beam-size", "1", "--out", str(tmp_path / "before")]) == 0
    moved, new_data = tmp_path / "elsewhere" / "run", tmp_path / "moved_data"
    moved.parent.mkdir()
    shutil.move(tmp_path / "run", moved)
    shutil.rmtree(model)
    shutil.move(data, new_data)
    monkeypatch.chdir(tmp_path / "elsewhere")
    pictures = sorted(str(p) for p in new_data.glob("*.png"))[:3]
    assert main(["caption", "run/best", *pictures, "--out", "captions.json"]) == 0
    assert main(["report", "run"]) == 0 and (moved / "report.html").is_file()
    capsys.readouterr()
    assert main(["eval", "run/best", "--beam-size", "1"]) == 2
    err = capsys.readouterr().err
    assert "data.dataset" in err and "not found" in err and len(err.strip().splitlines()) == 1, err
    new = [f"data.dataset={new_data / dataset.name}", f"data.features={new_data / store.name}"]
    assert main(["eval", "run/best", "--beam-size", "1", "--out", "after", *new]) == 0
    assert (tmp_path / "elsewhere" / "after" / "predictions.json").read_text() == (
        (tmp_path / "before" / "predictions.json").read_text())
    capsys.readouterr()
    assert main([*_command(dataset, store, "run", model, 3), "resume=true"]) == 2  # the data's old place
    err = capsys.readouterr().err
    assert "data.dataset" in err and str(dataset) in err and len(err.strip().splitlines()) == 1, err
    resume = _command(new_data / dataset.name, new_data / store.name, "run", model, 3)
    assert main([*resume, "resume=true"]) == 0
    assert _losses(moved) == pytest.approx(_losses(tmp_path / "full"), abs=1e-6) and len(_losses(moved)) == 18


@pytest.fixture
def toy(monkeypatch):
    """The toy architecture registered: the one line of src/rlcap/models/architectures.py that adds it there."""
    monkeypatch.setitem(ARCHITECTURES, "toy", TOY)


def _help_lines(capsys, *argv) -> dict[str, str]:
    assert main(["train", "--help-config", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {line.split()[0]: line for line in lines[1:lines.index("")]}


def test_the_registry_line_is_all_that_names_a_family(toy, capsys):
    """With its one line in ARCHITECTURES (the fixture), model.arch takes the toy, --help-config lists it among the
    architectures, and a toy run's model keys are those the architecture names: nothing else in src/ lists architectures."""
    shown = _help_lines(capsys, "algorithm=xe", "model.arch=toy")
    assert shown["model.arch"].endswith(": fc, updown, transformer, hrl, hf, toy")
    assert sorted(k for k in shown if k.startswith("model.")) == ["model.arch", "model.embed_dim", "model.hidden_dim"]
    assert api.load_run_config(None, ["model.arch=toy", "model.hidden_dim=8"]).reads("model.hidden_dim")
    assert not api.load_run_config(None, ["model.arch=toy"]).reads("model.num_heads")


def test_an_unregistered_family_is_refused_and_not_listed(capsys):
    shown = _help_lines(capsys, "algorithm=xe")
    assert "toy" not in shown["model.arch"] and shown["model.arch"].endswith(": " + ", ".join(ARCHITECTURES))
    with pytest.raises(ConfigError, match="model.arch: unknown architecture 'toy'; expected one of fc, updown"):
        api.load_run_config(None, ["model.arch=toy"])


@pytest.mark.slow
def test_a_toy_architecture_trains_saves_resumes_and_evaluates_through_the_cli(toy, tmp_path, capsys):
    dataset, feats = make_tiny_dataset(tmp_path)

    def command(out: str, epochs: int) -> list[str]:
        return ["train", str(REPO / "tests" / "train" / "empty.yaml"),
                *tiny_overrides(dataset, feats, tmp_path / out, arch="toy", **{"xe.epochs": epochs})]

    assert main(command("full", 3)) == 0  # the uninterrupted run
    assert main(command("run", 2)) == 0
    policy = load_checkpoint(tmp_path / "run" / "last", with_trainer=False)
    assert policy.manifest["specs"]["policy"]["class"] == "tests.models.toy_architecture.ToyGRU"
    assert policy.manifest["specs"]["policy"]["family"] == "toy"
    assert main([*command("run", 3), "resume=true"]) == 0
    assert _losses(tmp_path / "run") == pytest.approx(_losses(tmp_path / "full"), abs=1e-6)
    assert len(_losses(tmp_path / "run")) == 18
    saved = load_checkpoint(tmp_path / "run" / "last", with_trainer=False).weights["policy"]
    assert set(saved) == set(ToyGRU(ModelConfig(arch="toy"), 10, 4, 4).state_dict())
    assert any(not saved[k].equal(policy.weights["policy"][k]) for k in saved)  # the resumed epoch trained it
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run" / "last"), "--beam-size", "2", "--out", str(tmp_path / "eval")]) == 0
    scores = json.loads((tmp_path / "eval" / "scores.json").read_text())
    assert "CIDEr" in json.dumps(scores)
    predictions = json.loads((tmp_path / "eval" / "predictions.json").read_text())
    assert len(predictions) == 6 and all(p["caption"] for p in predictions)


def test_architecture_md_shows_the_toy_architecture_as_it_is():
    """docs/ARCHITECTURE.md's worked example of adding a architecture is the toy architecture's file, which the test
    above registers, trains, resumes and evaluates."""
    source = (REPO / "tests" / "models" / "toy_architecture.py").read_text(encoding="utf-8")
    architecture = source.split("# --- the architecture: docs/ARCHITECTURE.md shows it from here ---\n")[1].split("# --- to here")[0]
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    shown = page.split("## How to add an architecture")[1].split("```python\n")[1].split("```")[0]
    assert shown == architecture


def test_hf_checkpoints_link_the_frozen_tower_of_the_one_they_replace(tmp_path):
    """hf/ stays a folder from_pretrained loads; a save that replaces a checkpoint holding the same tower links its
    file (the same inode, nothing written), and writes it anew when the tower differs."""
    _require_transformers()
    import transformers

    from rlcap.data.hf_text import TokenizerVocab
    from rlcap.models.hf.captioner import HFCaptioner
    from rlcap.models.hf.export import TEXT_FILE, TOWER_FILE
    from rlcap.train.checkpoint import own_model_path

    dataset, _ = make_tiny_dataset(tmp_path)
    model = save_captioner("git", tmp_path / "git", dataset)
    vocab = TokenizerVocab.from_folder(model)
    policy = HFCaptioner(model, len(vocab))
    cfg = api.load_run_config(None, ["model.arch=hf", f"model.path={model}"])
    config = own_model_path({**to_dict(cfg), "feature_dims": {"fc": 0, "att": 0, "image_size": None}})

    def save() -> tuple[int, int]:
        folder = save_checkpoint(tmp_path / "last", {"policy": policy}, config, vocab, None, {"step": 1})
        return tuple(os.stat(folder / "hf" / name).st_ino for name in (TOWER_FILE, TEXT_FILE))

    first, second = save(), save()
    assert second[0] == first[0] and second[1] != first[1]
    loaded = transformers.GitForCausalLM.from_pretrained(tmp_path / "last" / "hf")
    original = transformers.GitForCausalLM.from_pretrained(model)
    for key, tensor in original.state_dict().items():
        assert tensor.equal(loaded.state_dict()[key]), key
    tower = policy.weights.side.modules
    with torch.no_grad():
        next(tower.parameters()).add_(1.0)
    policy.weights._digest = None  # (a tower is frozen for a run: its digest is cached; here it changed)
    third = save()
    assert third[0] != second[0]
    loaded = transformers.GitForCausalLM.from_pretrained(tmp_path / "last" / "hf")
    changed = {k for k, v in original.state_dict().items() if not v.equal(loaded.state_dict()[k])}
    assert len(changed) == 1 and "image_encoder" in changed.pop()
