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
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section

COCO = REPO / ".." / "shared" / "data" / "coco" / "human_agreement_5k.json"
REFERENCE = {  # self-critical.pytorch on this machine, samples/s (from the issues)
    ("fc", 10): 129, ("updown", 10): 57, ("fc", 50): 151, ("updown", 50): 80, ("transformer", 10): 3.8,
}
# self-critical.pytorch's Transformer size: 6 encoder and 6 decoder layers, 512-d, 8 heads, 2048 feed-forward
TRANSFORMER = ["model.num_layers=6", "model.num_enc_layers=6", "model.num_heads=8", "model.ff_dim=2048"]
CONFIGS = [("fc", 10, []), ("fc", 50, []), ("updown", 10, []), ("updown", 50, []), ("transformer", 10, TRANSFORMER)]


def measure(arch: str, images: int, samples: int, steps: int, model: list[str] | None = None) -> dict:
    """Run in a child process: build everything, warm up, then time ``steps`` SCST steps."""
    import torch

    from rlcap.data.loader import Batch, CaptionData
    from rlcap.data.vocab import Vocab
    from rlcap.metrics import tokenize
    from rlcap.models import build_model
    from rlcap.data.feats import Feats
    from rlcap.rewards import build_reward
    from rlcap.methods import load_run_config
    from rlcap.methods.scst import scst_step
    from rlcap.train.session import Progress, Session, add_part

    torch.set_num_threads(2)
    torch.manual_seed(0)
    items = json.loads(COCO.read_text())
    refs = {str(x["image_id"]): x["references"] for x in items}
    words = [w for r in refs.values() for c in r for w in tokenize(c)]
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", *sorted(counts, key=lambda w: -counts[w])[:2103]])
    cfg = load_run_config(None, ["algorithm=scst", f"model.arch={arch}", "model.dropout=0.5", f"rl.n_samples={samples}",
                                        f"rl.batch_size={images}", "decode.max_len=16", "track.to=[]",
                                        *(model or [])])
    session = Session(cfg, CaptionData(vocab, {}), {}, Progress(), Path("."))
    add_part(session, "policy", build_model(cfg.model, len(vocab), 2048, 2048), cfg.optim)
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
        stats = scst_step(session, batch, reward)
        elapsed = time.perf_counter() - start
        if step == 0:
            continue  # warm-up
        totals["step_s"] += elapsed
        for key in ("sample_s", "reward_s", "backward_s"):
            totals[key] += stats[key]
    per_step = {k: v / steps for k, v in totals.items()}
    return {"arch": arch, "images": images, "samples": samples, "model": model or [], **per_step,
            "samples_per_s": images * samples / per_step["step_s"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_before_mb": rss_before / 1024}


def markdown(rows: list[dict], command: str, previous: dict[tuple[str, int], float]) -> str:
    import torch

    lines = ["## SCST step: time split and peak memory", "",
             f"Command: `{command}`. Machine: {machine(torch=torch.__version__)}, 2 torch threads.", "",
             "Models at the usual sizes (hidden 512, 2048-d features, 36 regions for UpDown and the Transformer, "
             "2,107-word vocabulary from COCO captions), random weights and features, CIDEr-D reward against real "
             "COCO references, greedy (self-critical) baseline. Reward time includes decoding the greedy baseline. "
             "The Transformer is self-critical.pytorch's size: 6 encoder and 6 decoder layers, 8 heads, 2,048 "
             "feed-forward. Reference: self-critical.pytorch on this machine. Each configuration runs in "
             f"{len(rows[0].get('all_samples_per_s', [0]))} processes (alternating with the previous release "
             "when given); the row is the run with the median samples/s, and the range of all runs is shown "
             "beside it, since this shared machine's speed varies by 10-15% from run to run."
             + (" Previous release: the same benchmark run from a checkout of the previous release, in the "
                "same session, configurations alternating; its script's child is given the same model-size "
                "overrides (`--model`, which the previous release's script predates: it needs a three-line change "
                "to its argument parsing, none to the library it measures)." if previous else ""), "",
             "| model | images x samples | samples/s | self-critical.pytorch | ratio |"
             + (" previous release | vs previous |" if previous else "")
             + " sampling | reward + baseline | backward + step | peak RSS |",
             "|---|---|---|---|---|" + ("---|---|" if previous else "") + "---|---|---|---|"]
    for r in rows:
        ref = REFERENCE[(r["arch"], r["images"])]
        split = {k: r[k] / r["step_s"] for k in ("sample_s", "reward_s", "backward_s")}
        before = previous.get((r["arch"], r["images"]))
        prev = ((f" {before:.0f} | {r['samples_per_s'] / before - 1:+.1%} |" if before else " - | - |")
                if previous else "")
        runs = r.get("all_samples_per_s", [r["samples_per_s"]])
        spread = f" ({min(runs):.1f}-{max(runs):.1f})" if len(runs) > 1 else ""
        lines.append(f"| {r['arch']} | {r['images']} x {r['samples']} | {r['samples_per_s']:.1f}{spread} | {ref} | "
                     f"{r['samples_per_s'] / ref:.2f}x |{prev} {split['sample_s']:.0%} | {split['reward_s']:.0%} | "
                     f"{split['backward_s']:.0%} | {r['peak_rss_mb']:.0f} MB |")
    return "\n".join(lines)


def child(script: Path, cwd: Path, steps: int, arch: str, images: int, model: list[str]) -> dict:
    argv = [sys.executable, str(script), "--steps", str(steps), "--child", arch, str(images), "5"]
    env = {**os.environ, "PYTHONPATH": str(cwd / "src")}
    out = subprocess.run(argv + [a for m in model for a in ("--model", m)], check=True, capture_output=True,
                         text=True, cwd=cwd, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_run(runs: list[dict]) -> dict:
    """The run with the median samples/s (the lower middle one of an even count), with the spread."""
    ordered = sorted(runs, key=lambda r: r["samples_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "all_samples_per_s": [r["samples_per_s"] for r in runs]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per configuration (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="processes per configuration; the run with the median samples/s is reported")
    parser.add_argument("--previous", default=None,
                        help="a checkout of the previous release: every row is also measured with it, alternately")
    parser.add_argument("--model", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=3, metavar=("ARCH", "IMAGES", "SAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        arch, images, samples = args.child
        print(json.dumps(measure(arch, int(images), int(samples), args.steps, args.model)))
        return 0
    rows, previous = [], {}
    for arch, images, model in CONFIGS:
        ours, theirs = [], []
        for _ in range(args.repeats):  # alternating, so that a slow spell of the machine hits both
            ours.append(child(Path(__file__), REPO, args.steps, arch, images, model))
            if args.previous:
                old = Path(args.previous).resolve()
                theirs.append(child(old / "benchmarks" / "bench_scst.py", old, args.steps, arch, images,
                                    model)["samples_per_s"])  # the same model size (the transformer's)
        rows.append(median_run(ours))
        if theirs:
            previous[(arch, images)] = statistics.median(theirs)
    command = "make bench-scst" + (f" PREVIOUS={args.previous}" if args.previous else "") + \
        (f" REPEATS={args.repeats}" if args.repeats != 3 else "")
    replace_section("bench-scst", markdown(rows, command, previous))
    print(markdown(rows, command, previous))
    print(json.dumps({f"{r['arch']}_{r['images']}x{r['samples']}_samples_per_s": round(r["samples_per_s"], 1)
                      for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
