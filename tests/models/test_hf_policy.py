"""`model.arch: hf`, as a user runs it: `rlcap features --encoder hf:DIR` on the pictures, then `rlcap train` XE
and SCST with `model.arch=hf model.path=DIR`, then `rlcap eval`; the text goes through the model's own
tokenizer (trained here on the captions) and rewards and metrics read the decoded words."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main
from rlcap.train.logger import read_log
from tests.models.hf_captioners import exported_generate, save_captioner
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def captioned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf_policy")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    return folder, dataset


def _losses(run) -> list[float]:
    return [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]


@pytest.mark.parametrize("kind", ["vision_encoder_decoder", "blip", "git"])
def test_features_then_xe_then_scst_then_eval(captioned, kind, capsys):
    folder, dataset = captioned
    model = save_captioner(kind, folder / kind, dataset)
    store = folder / f"{kind}.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0
    hf = {"model.arch": "hf", "model.path": model, "model.dropout": 0.0}
    xe = folder / f"{kind}_xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, xe, **{
        **hf, "xe.epochs": 3, "optim.lr": 0.003})]) == 0
    losses = _losses(xe)
    assert len(losses) == 18 and losses[-1] < losses[0] * 0.8, losses  # it learns the captions
    _exported_generate_writes_rlcap_greedy_captions(folder, dataset, xe / "best", capsys)
    scst = folder / f"{kind}_scst"
    overrides = [o for o in tiny_overrides(dataset, store, scst) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={xe / 'best'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2"]) == 0
    assert len(_losses(scst)) == 3
    _exported_generate_writes_rlcap_greedy_captions(folder, dataset, scst / "best", capsys)  # the tuned folder
    # ... which a run starts from as a downloaded captioner (QUICKSTART section 8)
    again = folder / f"{kind}_from_hf"
    overrides = [o for o in tiny_overrides(dataset, store, again) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={scst / 'best' / 'hf'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2", "max_steps=1"]) == 0
    assert json.loads((again / "config.json").read_text())["model"]["arch"] == "hf" and len(_losses(again)) == 1
    capsys.readouterr()
    assert main(["eval", str(scst / "best"), "--beam-size", "2"]) == 0
    predictions = json.loads((scst / "best" / "eval_test" / "predictions.json").read_text())
    words = {w for p in predictions for w in p["caption"].split()}
    assert len(predictions) == 6 and words and words <= {"a", "red", "blue", "green", "circle", "square", "triangle",
                                                          "big", "small", "on", "the", "left", "."}, words


def _exported_generate_writes_rlcap_greedy_captions(folder, dataset, best, capsys) -> None:
    """`best/hf` is a transformers folder: `from_pretrained` loads it, and its own `generate()` from the pictures
    writes the captions of rlcap's greedy evaluation (the issue's bar: on at least 90% of the test images)."""
    assert main(["eval", str(best), "--beam-size", "1"]) == 0
    ours = {str(p["image_id"]): p["caption"] for p in json.loads((best / "eval_test" / "predictions.json").read_text())}
    theirs = exported_generate(best, folder, dataset, max_new_tokens=6, num_beams=1, do_sample=False)
    same = sum(ours[i] == theirs[i] for i in ours)
    assert len(ours) == 6 and same >= 0.9 * len(ours), (ours, theirs)
    capsys.readouterr()


def test_hf_captioner_builds_a_folder_a_run_reads(captioned, capsys):
    """`rlcap hf-captioner`: a captioner folder with random weights whose wordpiece tokenizer learnt the training
    captions (every caption's words come back from its ids), refused over a folder that holds a model."""
    from rlcap.data.readers import read_dataset
    from rlcap.models import model_vocab
    from rlcap.models.hf.captioner import HFCaptioner
    from rlcap.models.model_config import ModelConfig

    folder, dataset = captioned
    out = folder / "built"
    assert main(["hf-captioner", str(out), "--dataset", str(dataset), "--family", "blip", "--size", "tiny"]) == 0
    vocab = model_vocab(ModelConfig(arch="hf", path=str(out)))
    captions = [c for r in read_dataset(dataset) if r.split == "train" for c in r.captions]
    for caption in captions:
        ids = vocab.encode(caption.lower().split())
        assert vocab.decode(ids) == " ".join(caption.lower().split()), caption
    assert HFCaptioner(out).vocab_size == len(vocab)
    capsys.readouterr()
    assert main(["hf-captioner", str(out), "--dataset", str(dataset)]) == 2
    assert "already holds a model" in capsys.readouterr().err
