"""Instruction vision-language models as rlcap policies, as a user runs them (rlcap.models.hf.vlm): a folder built
offline (rlcap.models.hf.build_vlm), `rlcap features --encoder hf:DIR`, XE, SCST, `rlcap eval` and `rlcap caption`,
with `best/hf`'s own `generate()` writing rlcap's greedy captions; every method on a Qwen2-VL policy, and runs
killed with SIGKILL that resume exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rlcap.cli import main
from tests.report.conftest import add_pictures
from tests.tiny import make_tiny_dataset, tiny_overrides

transformers = pytest.importorskip("transformers")

@pytest.fixture(scope="module")
def pictured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vlm_cli")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    return folder, dataset


def _losses(run):
    from rlcap.train.logger import read_log

    return [r["loss"] for r in read_log(run / "log.jsonl") if r["split"] == "train"]


@pytest.mark.slow  # (a store, XE, SCST, eval and caption runs, each)
@pytest.mark.parametrize("family,train", [("qwen2_vl", "all"), ("smolvlm", "lora"), ("llava", "decoder"),
                                          ("paligemma", "all"), ("gemma3", "all"), ("idefics2", "lora"),
                                          ("qwen3_vl", "all"), ("glm4v", "lora"), ("internvl", "all"), ("llava_onevision", "lora"),
                                          ("mistral3", "decoder")])
def test_features_xe_scst_eval_caption_through_the_cli(pictured, family, train, capsys):
    """As a user runs it: a folder built offline by `rlcap hf-captioner --family F --size tiny`, `rlcap features
    --encoder hf:DIR` (LLaVA's: a list of image features per picture), XE (whole, LoRA adapters or the language
    model's layers), SCST from XE's best, `rlcap eval` and `rlcap caption` on picture files; `best/hf` loads with
    AutoModelForImageTextToText and its processor, its `generate()` with the prompt writes rlcap's greedy captions,
    and a GRPO run starts from it (`init_from`)."""
    folder, dataset = pictured
    model = folder / family
    assert main(["hf-captioner", str(model), "--dataset", str(dataset), "--family", family, "--size", "tiny",
                 "--vocab-size", "4096"]) == 0
    store = folder / f"{family}.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0
    xe = folder / f"{family}_xe"
    assert main(["train", "configs/shapes_xe.yaml", *tiny_overrides(dataset, store, xe, **{
        "model.arch": "hf", "model.path": model, "model.train": train, "xe.epochs": 3,
        "optim.lr": 0.003 if train == "all" else 0.01})]) == 0
    losses = _losses(xe)
    # it learns the captions; a tiny model whose random embeddings and output layer stay frozen learns slower
    assert losses[-1] < losses[0] * (0.8 if train == "all" else 0.95), losses
    if train != "all":  # the embeddings are the folder's, exported as they were
        assert _embeddings(xe / "best" / "hf").equal(_embeddings(model))
    scst = folder / f"{family}_scst"
    overrides = [o for o in tiny_overrides(dataset, store, scst) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_scst.yaml", *overrides, f"init_from={xe / 'best'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2"]) == 0
    assert len(_losses(scst)) == 3 and all(np.isfinite(_losses(scst)))
    capsys.readouterr()
    assert main(["eval", str(scst / "best"), "--beam-size", "1"]) == 0
    ours = {str(p["image_id"]): p["caption"] for p in
            json.loads((scst / "best" / "eval_test" / "predictions.json").read_text())}
    theirs = _exported_generate(scst / "best" / "hf", folder, dataset, num_beams=1)
    assert len(ours) == 6 and sum(ours[i] == theirs[i] for i in ours) >= 0.9 * len(ours), (ours, theirs)
    # ... and with no arguments, the run's beam search (decode.beam_size=3: its exported generation config)
    assert main(["eval", str(scst / "best"), "--beam-size", "3"]) == 0
    ours = {str(p["image_id"]): p["caption"] for p in
            json.loads((scst / "best" / "eval_test" / "predictions.json").read_text())}
    theirs = _exported_generate(scst / "best" / "hf", folder, dataset)
    assert sum(ours[i] == theirs[i] for i in ours) >= 0.9 * len(ours), (ours, theirs)
    pictures = sorted(str(p) for p in folder.glob("3*.png"))
    assert main(["caption", str(scst / "best"), *pictures]) == 0
    assert capsys.readouterr().out.strip()
    again = folder / f"{family}_from_hf"  # a tuned folder starts a run as a downloaded one does: GRPO here
    overrides = [o for o in tiny_overrides(dataset, store, again) if not o.startswith("model.")]
    assert main(["train", "configs/shapes_grpo.yaml", *overrides, f"init_from={scst / 'best' / 'hf'}", "rl.epochs=1",
                 "rl.batch_size=8", "rl.n_samples=2", "grpo.iterations=2", "max_steps=2"]) == 0
    assert json.loads((again / "config.json").read_text())["model"]["arch"] == "hf"
    assert len(_losses(again)) == 2 and all(np.isfinite(_losses(again)))


def _embeddings(folder) -> torch.Tensor:
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder)
    return model.get_input_embeddings().weight.detach()


def _exported_generate(hf, folder, dataset, **settings) -> dict[str, str]:
    """``hf``'s own ``generate(**settings)`` with its prompt on the test split's pictures: image id -> caption."""
    from PIL import Image

    from rlcap.encoders.hf_vlm import load_processor
    from rlcap.models.hf.prompt import prompt_text

    model = transformers.AutoModelForImageTextToText.from_pretrained(hf).eval()
    processor = load_processor(hf)
    text = prompt_text(processor, "")
    out = {}
    for record in (r for r in json.loads(dataset.read_text())["images"] if r["split"] == "test"):
        picture = Image.open(folder / record["filename"]).convert("RGB")
        inputs = processor(text=[text], images=[[picture]], return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**{k: v for k, v in inputs.items() if k != "labels"}, **settings)
        out[str(record["imgid"])] = processor.tokenizer.decode(ids[0, inputs["input_ids"].shape[1]:],
                                                               skip_special_tokens=True).strip()
    return out


@pytest.fixture(scope="module")
def qwen_runs(tmp_path_factory):
    """A tiny Qwen2-VL on the tiny pictures: (dataset, store, folder), its XE checkpoint and the [Chaffin24] and
    [Shi18] rewards' paths (tests/models/test_hf_methods.py's set-up, on a vision-language model)."""
    from rlcap import api
    from rlcap.data.loader import DataConfig
    from rlcap.models.hf.build_vlm import build_vlm
    from rlcap.rewards.image_bank import build_image_bank
    from tests.methods.same_losses import CONFIGS, SMALL_EMBEDDING

    folder = tmp_path_factory.mktemp("qwen_methods")
    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    model = build_vlm("qwen2_vl", folder / "captioner", captions)
    store = folder / "qwen.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0

    def run(recipe: str, name: str, **extra) -> None:
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"),
                                      tiny_overrides(dataset, store, folder / name, **extra)))

    run("shapes_xe", "xe", **{"model.arch": "hf", "model.path": model, "xe.epochs": 1, "optim.lr": 0.003})
    run("shapes_embedding", "embedding", **SMALL_EMBEDDING)
    run("shapes_retrieval", "retrieval", **{k.replace("embedding.", "retriever.", 1): v
                                            for k, v in SMALL_EMBEDDING.items()})
    bank = folder / "bank.h5"
    build_image_bank(folder / "retrieval" / "best", DataConfig(dataset=str(dataset), features=str(store)),
                     k=3).save(bank)
    retrieval = f"{{retrieval: {folder / 'retrieval' / 'best'}, retrieval_bank: {bank}}}"
    embedding = f"{{embedding: {folder / 'embedding' / 'best'}}}"
    return (dataset, store, folder), folder / "xe" / "best", retrieval, embedding


def test_every_method_trains_a_vision_language_policy(qwen_runs):
    """Two steps of every method that trains a captioner move a Qwen2-VL policy, with finite statistics."""
    from tests.models.test_hf_methods import RL, _method_runs, _policy
    from tests.methods.same_losses import CONFIGS
    from rlcap import api
    from rlcap.train.logger import read_log

    (dataset, store, folder), xe, retrieval, embedding = qwen_runs
    start = _policy(xe)
    for algorithm, (recipe, extra) in _method_runs(retrieval, embedding).items():
        out = folder / f"two_steps_{algorithm}"
        api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), tiny_overrides(dataset, store, out, **{
            **RL, "init_from": xe, "max_steps": 2, **extra})))
        rows = [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]
        assert [r["step"] for r in rows] == [1, 2], algorithm
        assert all(np.isfinite(v) for r in rows for v in r.values() if isinstance(v, float)), (algorithm, rows)
        trained = _policy(out / "last")
        assert trained.keys() == start.keys()
        assert any(not torch.equal(trained[k], start[k]) for k in start), f"{algorithm} left the policy as it was"


@pytest.mark.slow  # (a subprocess killed and resumed, each)
@pytest.mark.parametrize("algorithm", ["xe", "scst", "sll_sle", "wtf_rl"])
def test_killed_vision_language_run_resumes_with_identical_losses(qwen_runs, algorithm, tmp_path):
    from tests.models.test_hf_methods import RL, _method_runs
    from tests.train.killing import assert_resume_is_exact

    (dataset, store, folder), xe, retrieval, _ = qwen_runs
    if algorithm == "xe":
        start = {"model.arch": "hf", "model.path": folder / "captioner", "xe.epochs": 2}  # 6 steps an epoch
        total = 12
    else:
        recipe, extra = _method_runs(retrieval, "")[algorithm]
        start = {"algorithm": algorithm, "init_from": xe, **RL, "rl.epochs": 3, **{
            k: v for k, v in extra.items() if k != "reward.paths"}}
        if algorithm == "wtf_rl":
            start.update({"wtf_rl.trajectories": "both", "wtf_rl.similarity": "bicont", "reward.paths": retrieval,
                          "data.seq_per_img": 1})
        total = 9  # 3 steps an epoch
    overrides = tiny_overrides(dataset, store, tmp_path / "unused", **{**start, "optim.lr": 0.001, "save_every": 2})
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, total)
