"""A transformers policy with no feature store (data.features unset, data.images the pictures' folder) computes its
image tokens online (rlcap.encoders.online) and trains as from a float32 store of them: XE, SCST and GRPO log the
store run's losses (1e-5), and the online run's checkpoint evaluates and captions without a store."""

from __future__ import annotations

import json

import pytest

from rlcap import api
from rlcap.train.logger import read_log
from tests.models.vlm_matrix import tiny_vlm_run
from tests.tiny import tiny_overrides

pytest.importorskip("transformers")
RL = {"rl.batch_size": 8, "rl.n_samples": 2, "decode.max_len": 6, "val.max_images": 4, "rl.epochs": 2}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """(dataset, the pictures' folder, a float32 store of the tiny Qwen2-VL's tokens, its folder)."""
    folder = tmp_path_factory.mktemp("online")
    dataset, model, store = tiny_vlm_run(folder, store="tokens.h5", dtype="float32")
    return dataset, folder, store, model


def _run(recipe, overrides, store_or_pictures):
    from tests.methods.same_losses import CONFIGS

    api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), overrides + store_or_pictures))


def _losses(out):
    return [(r["step"], r["loss"]) for r in read_log(out / "log.jsonl") if r["split"] == "train"]


def test_online_and_store_runs_log_the_same_losses(qwen, tmp_path):
    dataset, pictures, store, model = qwen
    online = ["data.features=", f"data.images={pictures}"]
    runs = {}
    for route, data in (("store", [f"data.features={store}"]), ("online", online)):
        xe = tiny_overrides(dataset, store, tmp_path / f"xe_{route}", **{
            "model.arch": "hf", "model.path": model, "xe.epochs": 1, "optim.lr": 0.003})
        _run("shapes_xe", xe, data)
        runs[("xe", route)] = _losses(tmp_path / f"xe_{route}")
        for algorithm, extra in (("scst", {}), ("grpo", {"grpo.iterations": 2})):
            rl = tiny_overrides(dataset, store, tmp_path / f"{algorithm}_{route}", **{
                "init_from": tmp_path / f"xe_{route}" / "best", **RL, **extra, "optim.lr": 0.001})
            _run(f"shapes_{algorithm}", rl, data)
            runs[(algorithm, route)] = _losses(tmp_path / f"{algorithm}_{route}")
    for algorithm in ("xe", "scst", "grpo"):
        store_losses, online_losses = runs[(algorithm, "store")], runs[(algorithm, "online")]
        assert len(store_losses) >= 5 and [s for s, _ in store_losses] == [s for s, _ in online_losses]
        assert online_losses == pytest.approx(store_losses, rel=1e-5, abs=1e-5), algorithm
    # the online run's checkpoint records no store and is evaluated, and captions pictures, without one
    best = tmp_path / "grpo_online" / "best"
    config = json.loads((best / "config.json").read_text())
    assert config["data"]["features"] == "" and config["feature_dims"]["encoder"].startswith("hf:")
    on_pictures = api.evaluate(best, split="test", beam_size=1)
    on_store = api.evaluate(tmp_path / "grpo_store" / "best", split="test", beam_size=1)
    assert on_pictures["model"] == pytest.approx(on_store["model"], abs=1e-6)
    picture = next(pictures.glob("*.png"))
    from_store = api.caption_images(tmp_path / "grpo_store" / "best", [picture], beam_size=1)
    assert api.caption_images(best, [picture], beam_size=1) == from_store and from_store[str(picture)]


@pytest.mark.parametrize("workers", [0, 1])
def test_two_processes_online_log_one_process_s_losses(qwen, tmp_path, workers):
    """`rlcap train ... nproc=2` with no store: each rank encodes its share of a batch's pictures
    (rlcap.train.optimizer.own_share), on its read-ahead thread or in a worker process of its own
    (``data.workers``), and the losses are one process's."""
    import os
    import subprocess
    import sys

    from tests.train.killing import EMPTY, REPO

    dataset, pictures, store, model = qwen
    common = tiny_overrides(dataset, "", "unused", **{"model.arch": "hf", "model.path": model, "max_steps": 4,
                                                      "xe.epochs": 1, "optim.lr": 0.003, "data.images": pictures,
                                                      "val.batch_size": 4})
    common = [o for o in common if not o.startswith("out_dir")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for n in (1, 2):
        proc = subprocess.run([sys.executable, "-m", "rlcap", "train", str(EMPTY), *common,
                               f"out_dir={tmp_path / str(n)}", f"nproc={n}", f"data.workers={workers * (n - 1)}"],
                              capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    one, two = _losses(tmp_path / "1"), _losses(tmp_path / "2")
    assert len(one) == 4 and [s for s, _ in one] == [s for s, _ in two]
    assert [loss for _, loss in two] == pytest.approx([loss for _, loss in one], rel=1e-5)
