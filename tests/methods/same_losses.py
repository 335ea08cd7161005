"""The losses of the first 20 steps of tiny runs of the recipes in configs/ (XE, SCST, SLL-SLE, actor-critic,
PG-SPIDEr, WTF-RL, HRL and the auxiliary trainers before them), seeded: what a refactoring of the
training code must leave unchanged.

``python -m tests.methods.same_losses --write`` records them in tests/methods/data/same_losses.json (done
once, before a refactoring, with the code whose behaviour is to be kept); test_same_losses.py compares
every later run with that file. Recorded again when a change meant to alter them landed: last when XE batches
were cut to their longest caption (dropout draws its masks over a batch's shape, so the runs' dropout masks
changed; without dropout the XE losses of fc, UpDown and the transformer were the earlier recording's within
2e-7 relative)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlcap import api
from rlcap.data.loader import DataConfig
from rlcap.rewards.image_bank import build_image_bank
from rlcap.train.logger import read_log
from tests.tiny import hrl_overrides, make_tiny_clips, make_tiny_dataset, tiny_overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RECORDED = Path(__file__).parent / "data" / "same_losses.json"
STEPS = 20
# every run: 20 optimizer steps at most, short validations
BUDGET = {"max_steps": STEPS, "log_every": 1, "val.max_images": 4, "rl.batch_size": 8, "xe.batch_size": 4}
SMALL_EMBEDDING = {"embedding.batch_size": 8, "embedding.model.word_dim": 8, "embedding.model.hidden_dim": 8,
                   "embedding.model.joint_dim": 8}


def _train(recipe: str, overrides: list[str], out: Path) -> list[dict[str, float]]:
    """Train ``configs/<recipe>.yaml`` with ``overrides``; the logged losses of its training steps."""
    api.train(api.load_run_config(str(CONFIGS / f"{recipe}.yaml"), overrides))
    rows = [r for r in read_log(out / "log.jsonl") if r["split"] == "train"]
    return [{k: v for k, v in r.items() if "loss" in k and isinstance(v, float)} | {"step": r["step"]} for r in rows]


def run_recipes(folder: Path, commands: dict[str, tuple[str, list[str]]] | None = None,
                **every: object) -> dict[str, list[dict[str, float]]]:
    """Every recipe's logged losses, trained in ``folder`` (the runs that later ones start from first);
    ``every``: overrides of every run (``device="cpu"``). ``commands``: filled with each run's recipe and
    overrides (out_dir last), so that a test can run it again another way (under torchrun)."""
    dataset, feats = make_tiny_dataset(folder)
    commands = {} if commands is None else commands

    def image_run(recipe: str, name: str, **extra) -> list[dict[str, float]]:
        out = folder / name
        commands[name] = (recipe, tiny_overrides(dataset, feats, out, **{**BUDGET, **every, **extra}))
        return _train(*commands[name], out)

    xe = folder / "xe" / "best"
    losses = {"xe": image_run("shapes_xe", "xe", **{"xe.epochs": 8})}
    for recipe in ("scst", "sll_sle"):
        losses[recipe] = image_run(f"shapes_{recipe}", recipe, init_from=xe, **{"rl.n_samples": 3})
    losses["embedding"] = image_run("shapes_embedding", "embedding", **SMALL_EMBEDDING)
    losses["ac"] = image_run("shapes_ac", "ac", init_from=xe, **{
        "rl.n_samples": 2, "ac.lookahead": "[]", "reward.paths": f"{{embedding: {folder / 'embedding' / 'best'}}}"})
    losses["pg_spider"] = image_run("shapes_pg_spider", "pg_spider", init_from=xe, **{"pg.baseline_hidden": 16})
    # algorithm retriever: the dual encoder of algorithm embedding with embedding.loss infonce, the same losses
    losses["retrieval"] = image_run("shapes_retrieval", "retrieval",
                                    **{k.replace("embedding.", "retriever.", 1): v for k, v in SMALL_EMBEDDING.items()})
    bank = folder / "bank.h5"
    build_image_bank(folder / "retrieval" / "best", DataConfig(dataset=str(dataset), features=str(feats)), k=3).save(bank)
    losses["wtf_rl"] = image_run("shapes_wtf_rl", "wtf_rl", init_from=xe, **{
        "decode.beam_size": 2, "wtf_rl.discriminator_hidden": 16, "reward.hard_negatives": 2,
        "reward.paths": f"{{retrieval: {folder / 'retrieval' / 'best'}, retrieval_bank: {bank}}}"})

    ann, clip_feats = make_tiny_clips(folder)

    def video_run(recipe: str, name: str, **extra) -> list[dict[str, float]]:
        out = folder / name
        commands[name] = (recipe, hrl_overrides(ann, clip_feats, out, **{**BUDGET, **every, "data.min_count": 1,
                                                                         **extra}))
        return _train(*commands[name], out)

    losses["critic"] = video_run("moving-shapes_critic", "critic", **{"critic.batch_size": 16})
    losses["xe_hrl"] = video_run("moving-shapes_xe_hrl_16", "xe_hrl", **{
        "model.arch": "hrl", "model.critic_from": folder / "critic" / "best", "xe.batch_size": 8})
    losses["hrl"] = video_run("moving-shapes_hrl", "hrl", init_from=folder / "xe_hrl" / "best",
                              **{"model.arch": "hrl", "hrl.switch_every": 4, "optim.lr": 0.001})
    return losses


def main(argv: list[str] | None = None) -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--write", action="store_true", help=f"record the losses in {RECORDED}")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        losses = run_recipes(Path(folder))
    text = json.dumps(losses, indent=1)
    if args.write:
        RECORDED.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
