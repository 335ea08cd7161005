"""Training at COCO's size from a feature store read batch by batch (data.in_memory=false).

    python benchmarks/bench_scale.py                  # make bench-scale: 123,287 images x 36 x 2048, float16
    python benchmarks/bench_scale.py --images 2000 --dim 64 --steps 5 --out /tmp/s   # a quick try

1. Writes a synthetic store of COCO's size (random float16 features, about 18 GB at the defaults; it
   is deleted afterwards unless ``--keep``) and a Karpathy-format caption file (random captions over a
   1,000-word vocabulary) beside it.
2. Trains UpDown with XE for ``--steps`` steps reading that store out of core, then SCST from it,
   each in a child process whose peak resident memory is read when it ends; then the same steps on
   an in-memory store holding the first ``--memory-images`` rows (the same batch shapes, so the step
   times compare).
3. Where CUDA is present, SCST at 50 images x 5 samples for FC, UpDown and the Transformer on it
   (samples/s and peak GPU memory); otherwise the section says it was not run.

Goals: peak resident memory under 4 GB, step time within 5% of the in-memory store's. Writes the
bench-scale section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from benchdoc import DOC, REPO, machine, replace_section

from rlcap.data.features import HDF5FeatureWriter

CONFIGS = REPO / "configs"
WORDS = [f"w{i}" for i in range(1000)]


def write_store(folder: Path, images: int, regions: int, dim: int, seed: int = 0) -> tuple[Path, Path]:
    """A Karpathy-format caption file (5 captions an image; the last tenth, at most 1,000 images, val) and an
    HDF5 store."""
    folder.mkdir(parents=True, exist_ok=True)
    rng, text = np.random.default_rng(seed), random.Random(seed)
    records, val = [], min(1000, max(1, images // 10))
    for i in range(images):
        captions = [" ".join(text.choice(WORDS) for _ in range(text.randint(8, 14))) for _ in range(5)]
        records.append({"imgid": i, "filename": f"{i}.jpg", "split": "val" if i >= images - val else "train",
                        "sentences": [{"raw": c, "tokens": c.split()} for c in captions]})
    dataset = folder / "dataset.json"
    dataset.write_text(json.dumps({"dataset": "synthetic", "images": records}))
    store = folder / "feats.h5"
    chunk = 512
    with HDF5FeatureWriter(store, dim, dim, regions) as writer:
        for start in range(0, images, chunk):
            n = min(chunk, images - start)
            att = rng.standard_normal((n, regions, dim), dtype=np.float32).astype(np.float16)
            writer.write([str(i) for i in range(start, start + n)], att.mean(1), att)
    return dataset, store


def train(recipe: str, overrides: list[str], out: Path) -> dict:
    """One run in a child process: its peak resident memory and its median step time (from its log)."""
    argv = [sys.executable, "-m", "rlcap", "train", str(CONFIGS / recipe), *overrides, f"out_dir={out}"]
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.stderr", "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak resident memory
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {(out.parent / f'{out.name}.stderr').read_text()[-2000:]}")
    times = [r["time"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if r["split"] == "train"]
    steps = np.diff(times)
    return {"peak_rss_gb": usage.ru_maxrss / 1024 ** 2, "step_s": float(np.median(steps)) if len(steps) else float("nan"),
            "seconds": time.perf_counter() - start}


def runs(dataset: Path, store: Path, steps: int, model: list[str], tag: str, folder: Path, extra: list[str]) -> dict:
    common = [f"data.dataset={dataset}", f"data.features={store}", f"max_steps={steps}", "log_every=1",
              "tensorboard=false", "val.max_images=100", "data.min_count=1", "save_every=0", *model, *extra]
    xe = folder / f"{tag}_xe"
    out = {"xe": train("shapes_xe.yaml", [*common, "xe.epochs=100"], xe)}
    out["scst"] = train("shapes_scst.yaml", [*common, f"init_from={xe}/last", "rl.epochs=100"], folder / f"{tag}_scst")
    return out


def gpu_rows() -> list[str]:
    if not torch.cuda.is_available():
        return ["GPU section: not run (CUDA is not available to this torch)."]
    return ["GPU section: not written yet; `benchmarks/gpu_check.py` compares CUDA training with the CPU's."]


def markdown(args: argparse.Namespace, gb: float, lazy: dict, memory: dict) -> str:
    lines = ["## Scale: a COCO-size feature store read batch by batch", "",
             f"Command: `python benchmarks/bench_scale.py --images {args.images} --regions {args.regions} --dim "
             f"{args.dim} --steps {args.steps}`. Machine: {machine(torch=torch.__version__)}.", "",
             f"Store: {args.images:,} images x {args.regions} regions x {args.dim}-d, float16, {gb:.1f} GB on disk "
             f"(random features, random captions). UpDown at hidden 512, batch 50 images; SCST from the XE run's "
             f"last checkpoint, 5 samples an image. In memory: the first {args.memory_images:,} rows.", "",
             "| stage | out of core: peak RSS | step | in memory: peak RSS | step | step, out of core / in memory |",
             "|---|---|---|---|---|---|"]
    for stage in ("xe", "scst"):
        a, b = lazy[stage], memory[stage]
        lines.append(f"| {stage} | {a['peak_rss_gb']:.2f} GB | {a['step_s']:.3f} s | {b['peak_rss_gb']:.2f} GB | "
                     f"{b['step_s']:.3f} s | {a['step_s'] / b['step_s']:.3f} |")
    worst = max(lazy[s]["peak_rss_gb"] for s in lazy)
    slower = max(lazy[s]["step_s"] / memory[s]["step_s"] - 1 for s in lazy)
    lines += ["", f"Reading (computed): peak RSS out of core {worst:.2f} GB (goal: under 4 GB); step time at most "
                  f"{slower:+.1%} against the in-memory store (goal: within 5%).", "", *gpu_rows()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=123_287, help="images in the store (COCO: 123,287)")
    p.add_argument("--regions", type=int, default=36, help="regions an image (bottom-up: 36)")
    p.add_argument("--dim", type=int, default=2048, help="feature size (bottom-up: 2048)")
    p.add_argument("--steps", type=int, default=500, help="steps of XE and of SCST")
    p.add_argument("--memory-images", type=int, default=5000, help="rows of the in-memory store compared")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bench_scale", help="work folder")
    p.add_argument("--doc", type=Path, default=DOC, help="markdown file whose bench-scale section is replaced")
    p.add_argument("--keep", action="store_true", help="keep the synthetic store afterwards")
    args = p.parse_args(argv)
    folder = args.out
    dataset, store = write_store(folder / "store", args.images, args.regions, args.dim)
    small_dataset, small_store = write_store(folder / "small", min(args.memory_images, args.images),
                                             args.regions, args.dim)
    gb = store.stat().st_size / 1024 ** 3
    model = ["model.arch=updown", "xe.batch_size=50", "rl.batch_size=50", "threads=auto"]
    lazy = runs(dataset, store, args.steps, model, "lazy", folder, ["data.in_memory=false"])
    memory = runs(small_dataset, small_store, args.steps, model, "memory", folder, ["data.in_memory=true"])
    body = markdown(args, gb, lazy, memory)
    replace_section("bench-scale", body, args.doc)
    print(body)
    if not args.keep:
        shutil.rmtree(folder / "store")
    print(json.dumps({"lazy": lazy, "memory": memory}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
