"""Every instruction VLM family as a policy, killed with SIGKILL and resumed: XE, SCST and SLL-SLE runs of Qwen2.5-VL,
SmolVLM, LLaVA and PaliGemma, and XE, SCST and GRPO runs of the families users start from in 2026 (Qwen3-VL, GLM-4.1V,
Gemma 3, Idefics2, InternVL, LLaVA-OneVision, Mistral 3), each built tiny, log the uninterrupted run's losses
(Qwen2-VL's, with WTF-RL's: tests/models/test_hf_vlm_cli.py; Florence-2's: tests/models/test_hf_florence_methods.py)."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

transformers = pytest.importorskip("transformers")
FAMILIES = ("qwen2_5_vl", "smolvlm", "llava", "paligemma")
NEW_FAMILIES = ("qwen3_vl", "glm4v", "gemma3", "idefics2", "internvl", "llava_onevision", "mistral3")
RUNS = [(family, algorithm) for family in FAMILIES for algorithm in ("xe", "scst", "sll_sle")] + \
    [(family, algorithm) for family in NEW_FAMILIES for algorithm in ("xe", "scst", "grpo")]


@pytest.fixture(scope="module")
def family_xe(request, tmp_path_factory):
    """A tiny ``family`` model on the tiny pictures, its store, and its XE checkpoint: ((dataset, store, folder), xe)."""
    from rlcap import api
    from rlcap.models.hf.build_vlm import build_vlm
    from tests.methods.same_losses import CONFIGS

    folder = tmp_path_factory.mktemp(f"resume_{request.param}")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    model = build_vlm(request.param, folder / "captioner", captions)
    store = folder / "tokens.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0
    api.train(api.load_run_config(str(CONFIGS / "shapes_xe.yaml"), tiny_overrides(dataset, store, folder / "xe", **{
        "model.arch": "hf", "model.path": model, "xe.epochs": 1, "optim.lr": 0.003})))
    return (dataset, store, folder), folder / "xe" / "best"


@pytest.mark.slow  # (a subprocess killed and resumed, each)
@pytest.mark.parametrize("family_xe,algorithm", RUNS, indirect=["family_xe"])
def test_killed_vision_language_run_resumes_with_identical_losses(family_xe, algorithm, tmp_path):
    from tests.models.test_hf_methods import RL, _method_runs
    from tests.train.killing import assert_resume_is_exact

    (dataset, store, folder), xe = family_xe
    if algorithm == "xe":
        start = {"model.arch": "hf", "model.path": folder / "captioner", "xe.epochs": 2}  # 6 steps an epoch
        total = 12
    else:
        _, extra = _method_runs("", "")[algorithm]
        start = {"algorithm": algorithm, "init_from": xe, **RL, "rl.epochs": 3, **extra}
        total = 9  # 3 steps an epoch
    overrides = tiny_overrides(dataset, store, tmp_path / "unused", **{**start, "optim.lr": 0.001, "save_every": 2})
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, total)
