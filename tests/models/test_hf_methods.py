"""Every method that trains a captioner, on a transformers captioner as the policy (`model.arch: hf`), for each
family (VisionEncoderDecoder ViT + GPT-2, BLIP, GIT) built tiny with a tokenizer trained on the captions:
XE, SCST, SLL-ME, SLL-SLE, GRPO, PG with rollouts, MIXER, actor-critic with its value network on the decoder's hidden
state (ac.value_features=hidden), WTF-RL and SCST-Discriminator each take two steps that move the policy; XE,
SCST, SLL-SLE and WTF-RL resume exactly after SIGKILL; what model.train trains; init_from a transformers folder."""

from __future__ import annotations

import math
import re

import pytest
import torch

from rlcap import api
from rlcap.data.loader import DataConfig
from rlcap.rewards.image_bank import build_image_bank
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log
from rlcap.methods.registry import METHODS
from tests.methods.same_losses import CONFIGS, SMALL_EMBEDDING
from tests.models.hf_captioners import captioner_with_store
from tests.tiny import tiny_overrides
from tests.train.killing import assert_resume_is_exact

pytest.importorskip("transformers")

FAMILIES = ["vision_encoder_decoder", "blip", "git"]
# the registered methods that train no captioner, or [Wang18]'s own (HRL keeps its manager-worker captioner)
NOT_A_POLICY = {"embedding", "retriever", "critic", "hrl"}
RL = {"rl.batch_size": 8, "rl.n_samples": 2, "decode.max_len": 6, "val.max_images": 4}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(overrides for a run on the family's store, the XE checkpoint, the retrieval reward's paths, the embedding's)."""
    folder = tmp_path_factory.mktemp(request.param)
    dataset, model, store = captioner_with_store(request.param, folder)

    def run(recipe: str, name: str, **extra) -> None:
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"),
                                      tiny_overrides(dataset, store, folder / name, **extra)))

    run("shapes_xe", "xe", **{"model.arch": "hf", "model.path": model, "xe.epochs": 1, "optim.lr": 0.003})
    run("shapes_embedding", "embedding", **SMALL_EMBEDDING)
    run("shapes_retrieval", "retrieval", **{k.replace("embedding.", "retriever.", 1): v for k, v in SMALL_EMBEDDING.items()})
    bank = folder / "bank.h5"
    build_image_bank(folder / "retrieval" / "best", DataConfig(dataset=str(dataset), features=str(store)), k=3).save(bank)
    retrieval = f"{{retrieval: {folder / 'retrieval' / 'best'}, retrieval_bank: {bank}}}"
    return (dataset, store, folder), folder / "xe" / "best", retrieval, f"{{embedding: {folder / 'embedding' / 'best'}}}"


def _method_runs(retrieval: str, embedding: str) -> dict[str, tuple[str, dict]]:
    """algorithm -> (recipe, overrides), sized for two steps on the tiny set."""
    distinct = {"decode.beam_size": 2, "reward.hard_negatives": 2, "reward.paths": retrieval}
    return {
        "scst": ("shapes_scst", {}),
        "sll_me": ("shapes_sll_me", {}),
        "sll_sle": ("shapes_sll_sle", {}),
        "grpo": ("shapes_grpo", {"grpo.iterations": 2}),
        "pg": ("shapes_pg_cider", {"pg.baseline_hidden": 16}),
        "mixer": ("shapes_mixer", {"mixer.baseline_hidden": 16, "mixer.start": 2, "mixer.delta": 1}),
        "ac": ("shapes_ac", {"ac.lookahead": "[]", "ac.value_features": "hidden", "ac.value_pretrain_epochs": 0,
                             "reward.paths": embedding}),
        "wtf_rl": ("shapes_wtf_rl", {**distinct, "wtf_rl.discriminator_hidden": 16,
                                     "wtf_rl.discriminator_pretrain_epochs": 0}),
        "scst_discriminator": ("shapes_scst_discriminator", {**distinct, "scst_discriminator.discriminator_hidden": 16,
                                                             "scst_discriminator.discriminator_pretrain_epochs": 0}),
    }


def _policy(folder) -> dict[str, torch.Tensor]:
    return load_checkpoint(folder, with_trainer=False).weights["policy"]


def test_every_method_trains_the_hf_policy(family):
    (dataset, store, folder), xe, retrieval, embedding = family
    runs = _method_runs(retrieval, embedding)
    assert set(runs) | {"xe"} == set(METHODS) - NOT_A_POLICY  # a method registered later is added here
    start = _policy(xe)
    for algorithm, (recipe, extra) in runs.items():
        out = folder / f"two_steps_{algorithm}"
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), tiny_overrides(dataset, store, out, **{
            **RL, "init_from": xe, "max_steps": 2, **extra})))
        rows = [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]
        assert [r["step"] for r in rows] == [1, 2], algorithm
        assert all(math.isfinite(v) for r in rows for k, v in r.items() if isinstance(v, float)), (algorithm, rows)
        trained = _policy(out / "last")
        assert trained.keys() == start.keys()
        assert any(not torch.equal(trained[k], start[k]) for k in start), f"{algorithm} left the policy as it was"


# (a KL run's reference resumes too: a frozen copy of the XE policy, or, under LoRA, the base with its adapters off)
KL_RUNS = {"scst_kl": ("scst", {"rl.kl_coef": 0.05}),
           "grpo_kl_lora": ("grpo", {"rl.kl_coef": 0.05, "model.train": "lora", "model.lora_rank": 4})}


@pytest.mark.parametrize("algorithm", ["xe", "scst", "sll_sle", "wtf_rl", *KL_RUNS])
def test_killed_hf_run_resumes_with_identical_losses(family, algorithm, tmp_path):
    (dataset, store, folder), xe, retrieval, _ = family
    algorithm, kl = KL_RUNS.get(algorithm, (algorithm, {}))
    if algorithm == "xe":
        start = {"model.arch": "hf", "model.path": folder / "captioner", "xe.epochs": 4}  # 6 steps an epoch
        total = 24
    else:
        recipe, extra = _method_runs(retrieval, "")[algorithm]
        start = {"algorithm": algorithm, "init_from": xe, **RL, "rl.epochs": 4, **{
            k: v for k, v in extra.items() if k != "reward.paths"}}
        if algorithm == "wtf_rl":  # its recipe's settings: both trajectories weighted by the bidirectional reward
            start.update({"wtf_rl.trajectories": "both", "wtf_rl.similarity": "bicont", "reward.paths": retrieval,
                          "data.seq_per_img": 1})
        total = 12  # 3 steps an epoch
    start.update(kl)
    overrides = tiny_overrides(dataset, store, tmp_path / "unused", **{**start, "optim.lr": 0.001, "save_every": 2})
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, total)


def test_what_model_train_trains(family, tmp_path):
    """decoder: the layer stack only; lora: only the adapters (the weights under them as the XE checkpoint left
    them), whose hf/ export holds them merged; a run from a LoRA checkpoint that trains otherwise merges them."""
    (dataset, store, folder), xe, _, _ = family
    start = _policy(xe)
    for mode in ("decoder", "lora"):
        out = tmp_path / mode
        api.train(api.load_run_config(str(CONFIGS / "shapes_scst.yaml"), tiny_overrides(dataset, store, out, **{
            **RL, "init_from": xe, "max_steps": 2, "model.train": mode, "optim.lr": 0.01})))
        trained = _policy(out / "last")
        before = {k: start.get(k.replace(".base_layer.", ".")) for k in trained}  # (the adapters: none before)
        changed = {k for k, b in before.items() if b is None or not torch.equal(trained[k], b)}
        if mode == "decoder":
            assert changed and all(re.search(r"\.(layer|h)\.\d+\.", k) for k in changed), sorted(changed)
            assert not any("embed" in k or "wte" in k or "wpe" in k for k in changed), sorted(changed)
        else:
            assert changed and all(".lora_" in k for k in changed), sorted(changed)
            assert any(".lora_B." in k and trained[k].abs().sum() > 0 for k in changed)  # B starts at 0: it learned
    # the LoRA run's own hf/ folder: the adapters merged into transformers' plain weights
    lora_hf = tmp_path / "lora" / "last" / "hf"
    assert not any("lora" in k for k in _safetensors_keys(lora_hf))
    # a run from it that trains otherwise starts from its adapters merged into the weights (docs/MODELS.md)
    api.train(api.load_run_config(str(CONFIGS / "shapes_scst.yaml"), tiny_overrides(
        dataset, store, tmp_path / "merged", **{**RL, "init_from": tmp_path / "lora" / "last", "max_steps": 1,
                                                "model.train": "decoder"})))
    assert not any(".lora_" in k for k in _policy(tmp_path / "merged" / "last"))
    # ... which a run starts from as from any transformers folder, with the same numbers
    from rlcap.eval.open_run import open_run
    from rlcap.methods import load_run_config
    from rlcap.train.session import open_session

    cfg = load_run_config(str(CONFIGS / "shapes_scst.yaml"), tiny_overrides(
        dataset, store, tmp_path / "from_hf", **{**RL, "init_from": lora_hf}))
    s = open_session(cfg)
    assert (s.cfg.model.arch, s.cfg.model.path) == ("hf", str(lora_hf.resolve()))
    loaded = s.model.state_dict()
    model = open_run(tmp_path / "lora" / "last", device="cpu").policy
    merged = {f"model.{k}": v for k, v in model.weights.merged_state().items()}  # (the tied output layer: once in loaded)
    assert set(loaded) <= set(merged)
    assert all(torch.allclose(loaded[k], merged[k], atol=1e-6) for k in loaded)


def _safetensors_keys(folder) -> list[str]:
    from safetensors import safe_open

    keys = []
    for path in folder.glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            keys += list(f.keys())
    assert keys
    return keys

