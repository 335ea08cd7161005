"""`model.arch: hf`, as a user runs it: `rlcap features --encoder hf:DIR` on the pictures, then `rlcap train` XE
and SCST with `model.arch=hf model.path=DIR`, then `rlcap eval`; the text goes through the model's own
tokenizer (trained here on the captions) and rewards and metrics read the decoded words."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main
from rlcap.train.logger import read_log
from tests.models.hf_captioners import save_captioner
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
    scst = folder / f"{kind}_scst"
    overrides = [o for o in tiny_overrides(dataset, store, scst) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={xe / 'best'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2"]) == 0
    assert len(_losses(scst)) == 3
    capsys.readouterr()
    assert main(["eval", str(scst / "best"), "--beam-size", "2"]) == 0
    predictions = json.loads((scst / "best" / "eval_test" / "predictions.json").read_text())
    words = {w for p in predictions for w in p["caption"].split()}
    assert len(predictions) == 6 and words and words <= {"a", "red", "blue", "green", "circle", "square", "triangle",
                                                          "big", "small", "on", "the", "left", "."}, words
