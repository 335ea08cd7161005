"""The KL term to the reference policy (``rl.kl_coef``, methods/reference.py) in every method that samples: two
steps of each with beta > 0 on a policy of rlcap's own (fc, the tiny shapes data) and on a transformers one (the
tiny GIT), the KL logged and the reference still the starting weights; a LoRA policy's reference is the base
model (its adapters off, no copy), equal to the base model's own output."""

from __future__ import annotations

import math

import pytest
import torch

from rlcap import api
from rlcap.data.loader import DataConfig
from rlcap.methods.registry import METHODS
from rlcap.rewards.image_bank import build_image_bank
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log
from tests.methods.same_losses import CONFIGS, SMALL_EMBEDDING
from tests.tiny import make_tiny_dataset, tiny_overrides

BETA = 0.05
RL = {"rl.batch_size": 8, "rl.n_samples": 2, "decode.max_len": 6, "val.max_images": 4, "rl.kl_coef": BETA,
      "max_steps": 2}
# what trains no captioner from samples: XE, the auxiliary models, and HRL (no KL term: rl.kl_coef is not read)
NOT_SAMPLING = {"xe", "embedding", "retriever", "critic", "hrl"}


def _runs(retrieval: str, ac: dict) -> dict[str, tuple[str, dict]]:
    """algorithm -> (recipe, overrides), sized for two steps on the tiny set."""
    distinct = {"decode.beam_size": 2, "reward.hard_negatives": 2, "reward.paths": retrieval, "data.seq_per_img": 1}
    return {
        "scst": ("shapes_scst", {}),
        "sll_me": ("shapes_sll_me", {}),
        "sll_sle": ("shapes_sll_sle", {}),
        "grpo": ("shapes_grpo", {"grpo.iterations": 2}),
        "pg": ("shapes_pg_cider", {"pg.baseline_hidden": 16}),
        "mixer": ("shapes_mixer", {"mixer.baseline_hidden": 16, "mixer.start": 2, "mixer.delta": 1}),
        "ac": ("shapes_ac", {"ac.lookahead": "[]", "ac.value_pretrain_epochs": 0, **ac}),
        "wtf_rl": ("shapes_wtf_rl", {**distinct, "wtf_rl.discriminator_hidden": 16,
                                     "wtf_rl.discriminator_pretrain_epochs": 0}),
        "scst_discriminator": ("shapes_scst_discriminator", {**distinct, "scst_discriminator.discriminator_hidden": 16,
                                                             "scst_discriminator.discriminator_pretrain_epochs": 0}),
    }


def _retrieval(run, folder, dataset, store) -> str:
    """A tiny retriever and its image bank (the [Chaffin24] methods' reward): reward.paths."""
    run("shapes_retrieval", "retrieval", **{k.replace("embedding.", "retriever.", 1): v for k, v in SMALL_EMBEDDING.items()})
    bank = folder / "bank.h5"
    build_image_bank(folder / "retrieval" / "best", DataConfig(dataset=str(dataset), features=str(store)), k=3).save(bank)
    return f"{{retrieval: {folder / 'retrieval' / 'best'}, retrieval_bank: {bank}}}"


def _every_method_two_steps(dataset, store, folder, xe, runs, **extra) -> dict[str, dict]:
    """Two steps of each run with beta > 0; {algorithm: its last checkpoint's weights}."""
    assert set(runs) == set(METHODS) - NOT_SAMPLING  # a sampling method registered later is added here
    saved = {}
    for algorithm, (recipe, overrides) in runs.items():
        out = folder / f"kl_{algorithm}"
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), tiny_overrides(dataset, store, out, **{
            **RL, "init_from": xe, **overrides, **extra})))
        rows = [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]
        assert [r["step"] for r in rows] == [1, 2], algorithm
        assert all(math.isfinite(r["kl"]) and r["kl"] >= 0 for r in rows), (algorithm, rows)
        saved[algorithm] = load_checkpoint(out / "last", with_trainer=False).weights
    start = load_checkpoint(xe, with_trainer=False).weights["policy"]
    for algorithm, weights in saved.items():
        assert any(not torch.equal(weights["policy"][k], start[k]) for k in start), algorithm
    return saved


def _same_as(weights: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> bool:
    return weights.keys() == start.keys() and all(torch.equal(weights[k], start[k]) for k in start)


def test_every_sampling_method_takes_two_steps_with_a_kl_term_on_an_own_policy(tmp_path):
    dataset, feats = make_tiny_dataset(tmp_path)

    def run(recipe: str, name: str, **extra) -> None:
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), tiny_overrides(dataset, feats, tmp_path / name,
                                                                                       **extra)))

    run("shapes_xe", "xe", **{"xe.epochs": 2})
    xe = tmp_path / "xe" / "best"
    runs = _runs(_retrieval(run, tmp_path, dataset, feats), {"reward.weights": "{cider_d: 1.0}"})
    saved = _every_method_two_steps(dataset, feats, tmp_path, xe, runs)
    start = load_checkpoint(xe, with_trainer=False).weights["policy"]
    for algorithm, weights in saved.items():  # the frozen copy: the starting weights, saved with the run
        assert _same_as(weights["reference"], start), algorithm
    # beta = 0: no reference built, nothing logged
    run("shapes_scst", "no_kl", **{**RL, "init_from": xe, "rl.kl_coef": 0.0})
    assert "reference" not in load_checkpoint(tmp_path / "no_kl" / "last", with_trainer=False).weights
    assert not any("kl" in r for r in read_log(tmp_path / "no_kl" / "log.jsonl"))


@pytest.fixture(scope="module")
def git(tmp_path_factory):
    """(dataset, store, folder, captioner folder, XE checkpoint) of the tiny GIT on the tiny set."""
    pytest.importorskip("transformers")
    from tests.models.hf_captioners import captioner_with_store

    folder = tmp_path_factory.mktemp("git")
    dataset, model, store = captioner_with_store("git", folder)
    api.train(api.load_run_config(str(CONFIGS / "shapes_xe.yaml"), tiny_overrides(dataset, store, folder / "xe", **{
        "model.arch": "hf", "model.path": model, "xe.epochs": 1, "optim.lr": 0.003})))
    return dataset, store, folder, model, folder / "xe" / "best"


def test_every_sampling_method_takes_two_steps_with_a_kl_term_on_a_transformers_policy(git):
    dataset, store, folder, _, xe = git

    def run(recipe: str, name: str, **extra) -> None:
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), tiny_overrides(dataset, store, folder / name,
                                                                                       **extra)))

    runs = _runs(_retrieval(run, folder, dataset, store), {"ac.value_features": "hidden",
                                                          "reward.weights": "{cider_d: 1.0}"})
    saved = _every_method_two_steps(dataset, store, folder, xe, runs)
    start = load_checkpoint(xe, with_trainer=False).weights["policy"]
    assert all(_same_as(weights["reference"], start) for weights in saved.values())


def test_a_lora_policys_reference_is_its_base_model_without_a_copy(git, tmp_path):
    """With its adapters switched off (and moved off 0, so that they change the output), the LoRA policy computes
    exactly what the model under them computes (the folder's weights, read into a plain policy); a LoRA run with
    beta > 0 saves no reference part and logs its KL."""
    from rlcap.data.feats import Feats
    from rlcap.models.base import TrainsAdapters
    from rlcap.models.hf.captioner import HFCaptioner

    dataset, store, folder, model, xe = git
    lora, plain = HFCaptioner(model, train="lora", lora_rank=2).eval(), HFCaptioner(model).eval()
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if ".lora_B." in name:  # B starts at 0 (the adapter adds nothing): make it add something
                param.copy_(torch.randn_like(param) * 0.5)
    assert isinstance(lora, TrainsAdapters) and lora.trains_adapters and not plain.trains_adapters
    g = torch.Generator().manual_seed(0)
    width = plain._tower_width()
    feats = Feats(torch.zeros(2, width), torch.randn(2, 3, width, generator=g), torch.ones(2, 3, dtype=torch.bool))
    tokens = torch.tensor([[1, 5, 6, 7], [1, 8, 5, 0]])
    with torch.no_grad():
        base = plain(feats, tokens)
        adapted = lora(feats, tokens)
        with lora.adapters_off():
            off = lora(feats, tokens)
        again = lora(feats, tokens)
    assert not torch.allclose(adapted, base, atol=1e-4)  # the adapters change the output
    assert torch.equal(off, base)
    assert torch.equal(again, adapted)  # on again on leaving
    assert all(p.requires_grad == (".lora_" in n) for n, p in lora.model.named_parameters())

    out = tmp_path / "lora_kl"
    api.train(api.load_run_config(str(CONFIGS / "shapes_scst.yaml"), tiny_overrides(dataset, store, out, **{
        **RL, "init_from": xe, "model.train": "lora", "optim.lr": 0.01})))
    rows = [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["kl"]) for r in rows)
    assert sorted(load_checkpoint(out / "last", with_trainer=False).weights) == ["policy"]
