"""One SCST step, timed and split: sampling, reward (with the greedy baseline), backward pass.

Run with ``make bench-scst``. The models are at the field's usual sizes (hidden 512, embedding
512, 2048-d features, 36 regions for UpDown) with a 2,107-word vocabulary built from real COCO
captions (../shared/data/coco), random weights and random features; the reward is the fast
CIDEr-D scorer against the real references of those COCO images. Each configuration runs in its
own process so that its peak memory (max RSS) is its own. Writes the bench-scst section of
docs/BENCHMARKS.md and prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section

COCO = REPO / ".." / "shared" / "data" / "coco" / "human_agreement_5k.json"
REFERENCE = {  # self-critical.pytorch on this machine, samples/s (from the issue)
    ("fc", 10): 129, ("updown", 10): 57, ("fc", 50): 151, ("updown", 50): 80,
}


def measure(arch: str, images: int, samples: int, steps: int) -> dict:
    """Run in a child process: build everything, warm up, then time ``steps`` SCST steps."""
    import torch

    from rlcap.data.loader import Batch, CaptionData
    from rlcap.data.vocab import Vocab
    from rlcap.metrics import tokenize
    from rlcap.models import build_model
    from rlcap.models.base import Feats
    from rlcap.rewards import build_reward
    from rlcap.rl.baselines import RunningMean
    from rlcap.train.config import RunConfig
    from rlcap.config import load_config
    from rlcap.train.scst import scst_step
    from rlcap.train.session import Progress, Session, build_optimizer

    torch.set_num_threads(2)
    torch.manual_seed(0)
    items = json.loads(COCO.read_text())
    refs = {str(x["image_id"]): x["references"] for x in items}
    words = [w for r in refs.values() for c in r for w in tokenize(c)]
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", *sorted(counts, key=lambda w: -counts[w])[:2103]])
    cfg = load_config(RunConfig, None, [f"model.arch={arch}", "model.dropout=0.5", f"rl.n_samples={samples}",
                                        f"rl.batch_size={images}", "rl.max_len=16", "tensorboard=false"])
    model = build_model(cfg.model, len(vocab), 2048, 2048)
    optimizer, scheduler = build_optimizer(model.parameters(), cfg.optim)
    session = Session(cfg, CaptionData(vocab, {}), model, optimizer, scheduler, None, Progress(), Path("."))
    reward = build_reward(cfg.reward, refs)
    ids = list(refs)
    regions = 36 if arch != "fc" else 1
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    totals = {"sample_s": 0.0, "reward_s": 0.0, "backward_s": 0.0, "step_s": 0.0}
    for step in range(steps + 1):
        pick = ids[step * images:(step + 1) * images]
        feats = Feats(torch.randn(images, 2048), torch.randn(images, regions, 2048).relu(),
                      torch.ones(images, regions, dtype=torch.bool))
        batch = Batch(torch.arange(images), pick, feats, torch.empty(0, 0), [refs[i] for i in pick])
        start = time.perf_counter()
        stats, _ = scst_step(session, batch, reward, RunningMean.init())
        elapsed = time.perf_counter() - start
        if step == 0:
            continue  # warm-up
        totals["step_s"] += elapsed
        for key in ("sample_s", "reward_s", "backward_s"):
            totals[key] += getattr(stats, key)
    per_step = {k: v / steps for k, v in totals.items()}
    return {"arch": arch, "images": images, "samples": samples, **per_step,
            "samples_per_s": images * samples / per_step["step_s"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_mb": rss_before / 1024}


def markdown(rows: list[dict], command: str) -> str:
    import torch

    lines = ["## SCST step: time split and peak memory", "",
             f"Command: `{command}`. Machine: {machine(torch=torch.__version__)}, 2 torch threads.", "",
             "Models at the usual sizes (hidden 512, 2048-d features, 36 regions for UpDown, 2,107-word vocabulary "
             "from COCO captions), random weights and features, CIDEr-D reward against real COCO references, "
             "greedy (self-critical) baseline. Reward time includes decoding the greedy baseline. "
             "Reference: self-critical.pytorch on this machine.", "",
             "| model | images x samples | samples/s | self-critical.pytorch | ratio | sampling | reward + baseline "
             "| backward + step | peak RSS |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = REFERENCE[(r["arch"], r["images"])]
        split = {k: r[k] / r["step_s"] for k in ("sample_s", "reward_s", "backward_s")}
        lines.append(f"| {r['arch']} | {r['images']} x {r['samples']} | {r['samples_per_s']:.0f} | {ref} | "
                     f"{r['samples_per_s'] / ref:.2f}x | {split['sample_s']:.0%} | {split['reward_s']:.0%} | "
                     f"{split['backward_s']:.0%} | {r['peak_rss_mb']:.0f} MB |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per configuration (after one warm-up)")
    parser.add_argument("--child", nargs=3, metavar=("ARCH", "IMAGES", "SAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        arch, images, samples = args.child
        print(json.dumps(measure(arch, int(images), int(samples), args.steps)))
        return 0
    rows = []
    for arch in ("fc", "updown"):
        for images in (10, 50):
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child", arch,
                                  str(images), "5"], check=True, capture_output=True, text=True, cwd=REPO)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    replace_section("bench-scst", markdown(rows, "make bench-scst"))
    print(markdown(rows, "make bench-scst"))
    print(json.dumps({f"{r['arch']}_{r['images']}x{r['samples']}_samples_per_s": round(r["samples_per_s"], 1)
                      for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
