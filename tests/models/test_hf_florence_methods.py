"""The sequence-level methods on Florence-2 as the policy (rlcap.models.hf.seq2seq_vlm), built tiny offline, its
store written by `rlcap features --encoder hf:DIR`: SCST, SLL-SLE and WTF-RL each take two steps that move the
policy from its XE checkpoint; XE, SCST, SLL-SLE and WTF-RL resume exactly after SIGKILL."""

from __future__ import annotations

import math

import pytest
import torch

from rlcap import api
from rlcap.data.loader import DataConfig
from rlcap.rewards.image_bank import build_image_bank
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log
from tests.methods.same_losses import CONFIGS, SMALL_EMBEDDING
from tests.tiny import tiny_overrides

pytest.importorskip("transformers")

RL = {"rl.batch_size": 8, "rl.n_samples": 2, "decode.max_len": 6, "val.max_images": 4}


@pytest.fixture(scope="module")
def florence(tmp_path_factory):
    """(dataset, store, folder), the XE checkpoint, the retrieval reward's paths: a tiny Florence-2 built on the
    tiny dataset's captions, its store, one epoch of XE, and a retriever on the store for WTF-RL's reward."""
    from rlcap.cli import main
    from rlcap.models.hf.build_vlm import build_vlm
    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset

    folder = tmp_path_factory.mktemp("florence_methods")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    import json

    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    model = build_vlm("florence2", folder / "florence", captions, tokenizer="word")
    store = folder / "florence.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0

    def run(recipe: str, name: str, **extra) -> None:
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"),
                                      tiny_overrides(dataset, store, folder / name, **extra)))

    run("shapes_xe", "xe", **{"model.arch": "hf", "model.path": model, "xe.epochs": 1, "optim.lr": 0.003})
    run("shapes_retrieval", "retrieval", **{k.replace("embedding.", "retriever.", 1): v
                                             for k, v in SMALL_EMBEDDING.items()})
    bank = folder / "bank.h5"
    build_image_bank(folder / "retrieval" / "best", DataConfig(dataset=str(dataset), features=str(store)),
                     k=3).save(bank)
    retrieval = f"{{retrieval: {folder / 'retrieval' / 'best'}, retrieval_bank: {bank}}}"
    return (dataset, store, folder), folder / "xe" / "best", retrieval


def _runs(retrieval: str) -> dict[str, tuple[str, dict]]:
    """algorithm -> (recipe, overrides), sized for two steps on the tiny set."""
    return {
        "scst": ("shapes_scst", {}),
        "sll_sle": ("shapes_sll_sle", {}),
        "wtf_rl": ("shapes_wtf_rl", {"decode.beam_size": 2, "reward.hard_negatives": 2, "reward.paths": retrieval,
                                     "wtf_rl.discriminator_hidden": 16, "wtf_rl.discriminator_pretrain_epochs": 0}),
    }


def _policy(folder) -> dict[str, torch.Tensor]:
    return load_checkpoint(folder, with_trainer=False).weights["policy"]


def test_methods_train_the_florence_policy(florence):
    (dataset, store, folder), xe, retrieval = florence
    start = _policy(xe)
    for algorithm, (recipe, extra) in _runs(retrieval).items():
        out = folder / f"two_steps_{algorithm}"
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), tiny_overrides(dataset, store, out, **{
            **RL, "init_from": xe, "max_steps": 2, **extra})))
        rows = [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]
        assert [r["step"] for r in rows] == [1, 2], algorithm
        assert all(math.isfinite(v) for r in rows for k, v in r.items() if isinstance(v, float)), (algorithm, rows)
        trained = _policy(out / "last")
        assert trained.keys() == start.keys()
        assert any(not torch.equal(trained[k], start[k]) for k in start), f"{algorithm} left the policy as it was"


@pytest.mark.slow  # (a subprocess killed and resumed, each)
@pytest.mark.parametrize("algorithm", ["xe", "scst", "sll_sle", "wtf_rl"])
def test_killed_florence_run_resumes_with_identical_losses(florence, algorithm, tmp_path):
    from tests.train.killing import assert_resume_is_exact

    (dataset, store, folder), xe, retrieval = florence
    if algorithm == "xe":
        start = {"model.arch": "hf", "model.path": folder / "florence", "xe.epochs": 4}  # 6 steps an epoch
        total = 24
    else:
        _, extra = _runs(retrieval)[algorithm]
        start = {"algorithm": algorithm, "init_from": xe, **RL, "rl.epochs": 4, **extra}
        if algorithm == "wtf_rl":  # its recipe's settings: both trajectories weighted by the bidirectional reward
            start.update({"wtf_rl.trajectories": "both", "wtf_rl.similarity": "bicont", "data.seq_per_img": 1})
        total = 12  # 3 steps an epoch
    overrides = tiny_overrides(dataset, store, tmp_path / "unused", **{**start, "optim.lr": 0.001, "save_every": 2})
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, total)
