"""Training at COCO's size from a feature store read batch by batch (data.in_memory=false).

    python benchmarks/bench_scale.py                  # make bench-scale: 123,287 images x 36 x 2048, float16
    python benchmarks/bench_scale.py --images 2000 --dim 64 --steps 5 --out /tmp/s   # a quick try

1. Writes a synthetic store of COCO's size (random float16 features, about 18 GB at the defaults; it
   is deleted afterwards unless ``--keep``) and a Karpathy-format caption file (random captions over a
   1,000-word vocabulary) beside it.
2. Trains UpDown with XE for ``--steps`` steps reading that store out of core, then SCST from it,
   each in a child process whose peak resident memory is read when it ends (part ``coco``); then the
   same two runs on the first ``--memory-images`` training images, out of core and in memory (the same
   batches, rows, vocabulary and reward statistics: only the reader differs), the two taking turns in
   ``--rounds`` chunks of steps, each chunk resuming its run, so that both see the same drift of the
   host's speed (part ``reader``).
3. XE and SCST on a small shapes set as 2 processes x 1 thread (torchrun) against 1 process x 2
   threads: samples a second.
4. Where CUDA is present, SCST at 50 images x 5 samples for FC, UpDown and the Transformer on the
   in-memory store (samples/s and peak GPU memory); otherwise the section says it was not run.

Goals: peak resident memory under 4 GB, step time within 5% of the in-memory store's. Writes the
bench-scale section of docs/BENCHMARKS.md. Each part's figures go to ``--out``/results.json with its
command, machine and date; ``--parts`` runs some parts again and takes the others from there (the
section says which were measured when). ``--store DIR`` reads a store written earlier (``--keep``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from benchdoc import DOC, REPO, machine, replace_section

from rlcap.data.features import HDF5FeatureWriter
from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes
from rlcap.encoders.extract import extract_features

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
    store.unlink(missing_ok=True)  # a store left by an interrupted run is written again
    chunk = 512
    with HDF5FeatureWriter(store, dim, dim, regions) as writer:
        for start in range(0, images, chunk):
            n = min(chunk, images - start)
            att = rng.standard_normal((n, regions, dim), dtype=np.float32).astype(np.float16)
            writer.write([str(i) for i in range(start, start + n)], att.mean(1), att)
    return dataset, store


PARTS = ("coco", "reader", "processes", "gpu")
WARM = 2  # steps of each resumed chunk left out of its step times (the first after a start allocates)


def train(recipe: str, overrides: list[str], out: Path, fresh: bool = True) -> dict:
    """One run in a child process: its peak resident memory and its median step time (from its log).
    ``fresh``: replace a run left in the folder (otherwise it resumes, with the overrides' settings)."""
    # overwrite: a run left in the folder by an earlier bench would otherwise continue, and its old log be timed
    argv = [sys.executable, "-m", "rlcap", "train", str(CONFIGS / recipe), *overrides, f"out_dir={out}",
            "overwrite=true" if fresh else "resume=true"]
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
            "seconds": time.perf_counter() - start, "settings": run_settings(json.loads((out / "config.json").read_text()))}


def run_settings(config: dict) -> dict:
    """What a run trained with, from its recorded config (the model its checkpoint holds, after any
    ``--set``): the figures a section's text names. ``captions``: captions a step (XE: images x
    seq_per_img; the sequence-level methods: images x rl.n_samples)."""
    xe = config["algorithm"] == "xe"
    images = config["xe"]["batch_size"] if xe else config["rl"]["batch_size"]
    per_image = config["data"]["seq_per_img"] if xe else config["rl"]["n_samples"]
    return {"arch": config["model"]["arch"], "hidden": config["model"]["hidden_dim"], "images": images,
            "per_image": per_image, "captions": images * per_image}


def describe_runs(xe: dict, scst: dict) -> str:
    """``UpDown at hidden 512, XE 50 images x 5 captions a step, SCST 50 images x 5 samples``."""
    return (f"{ARCH_NAMES.get(xe['arch'], xe['arch'])} at hidden {xe['hidden']}, XE {xe['images']} images x "
            f"{xe['per_image']} captions a step, SCST {scst['images']} images x {scst['per_image']} samples")


ARCH_NAMES = {"fc": "FC", "updown": "UpDown", "transformer": "Transformer", "hrl": "HRL"}


def runs(dataset: Path, store: Path, steps: int, model: list[str], tag: str, folder: Path, extra: list[str]) -> dict:
    common = [f"data.dataset={dataset}", f"data.features={store}", f"max_steps={steps}", "log_every=1",
              "track.to=[]", "val.max_images=100", "data.min_count=1", "save_every=0", *model, *extra]
    xe = folder / f"{tag}_xe"
    out = {"xe": train("shapes_xe.yaml", [*common, "xe.epochs=100"], xe)}
    out["scst"] = train("shapes_scst.yaml", [*common, f"init_from={xe}/last", "rl.epochs=100"], folder / f"{tag}_scst")
    return out


def chunk_steps(log: Path, after: int) -> list[float]:
    """The step times (differences of consecutive log times) of the training steps after step ``after``,
    those of one resumed chunk, less its first :data:`WARM`."""
    times = [r["time"] for r in map(json.loads, log.read_text().splitlines()) if r["split"] == "train"
             and r["step"] > after]
    return [float(t) for t in np.diff(times)[WARM:]]


def reader_comparison(dataset: Path, store: Path, steps: int, rounds: int, model: list[str], folder: Path,
                      first: list[str]) -> dict:
    """XE, then SCST from XE's last checkpoint, on the first images, out of core and in memory, in
    ``rounds`` turns: each turn runs the two arms for the next ``steps / rounds`` steps (each resuming
    its own run), in the order lazy, memory, then memory, lazy, and so on, so that a drift of the
    host's speed falls on both. Per stage and arm: the median step over every chunk; per turn: the
    ratio of the two arms' medians."""
    arms = {"lazy": "false", "memory": "true"}
    common = [f"data.dataset={dataset}", f"data.features={store}", "log_every=1", "track.to=[]",
              "val.max_images=100", "data.min_count=1", "save_every=0", *model, *first]
    chunk, out = math.ceil(steps / rounds), {}
    for stage, recipe, epochs in (("xe", "shapes_xe.yaml", "xe.epochs=100"), ("scst", "shapes_scst.yaml", "rl.epochs=100")):
        init = [f"init_from={folder / 'first_memory_xe'}/last"] if stage == "scst" else []  # one start for both arms
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        peak = dict.fromkeys(arms, 0.0)
        ratios = []
        for turn in range(rounds):
            medians = {}
            for arm in (list(arms) if turn % 2 == 0 else list(arms)[::-1]):
                run = folder / f"first_{arm}_{stage}"
                got = train(recipe, [*common, *init, epochs, f"data.in_memory={arms[arm]}",
                                     f"max_steps={min(steps, (turn + 1) * chunk)}"], run, fresh=turn == 0)
                step_times = chunk_steps(run / "log.jsonl", turn * chunk)
                medians[arm] = float(np.median(step_times))
                times[arm] += step_times
                peak[arm] = max(peak[arm], got["peak_rss_gb"])
            ratios.append(medians["lazy"] / medians["memory"])
        out[stage] = {"step_s": {arm: float(np.median(t)) for arm, t in times.items()}, "peak_rss_gb": peak,
                      "turn_ratios": ratios, "steps_timed": {arm: len(t) for arm, t in times.items()}}
    return out


def shapes_store(folder: Path, images: int = 1000) -> tuple[Path, Path]:
    """A small shapes set (``images`` training images, 128 px: the recipes' 4x4 grid) and its features."""
    data = folder / "shapes"
    dataset = generate_shapes(ShapesConfig(n_train=images, n_val=100, n_test=10, image_size=128, workers=1), data)
    feats = data / "feats_128.h5"
    if not feats.exists():
        records = json.loads(dataset.read_text())["images"]
        extract_features({str(r["imgid"]): data / r["filepath"] / r["filename"] for r in records}, feats,
                         image_size=128)
    return dataset, feats


def processes_against_threads(folder: Path, steps: int, extra: list[str], images: int = 1000) -> dict:
    """XE and SCST on shapes (the recipes, batch 50) as 2 processes x 1 thread (torchrun, gloo: each
    rank 25 images) and as 1 process x 2 threads: samples a second (XE: captions, SCST: sampled
    captions) from the median step."""
    dataset, feats = shapes_store(folder, images)
    common = [f"data.dataset={dataset}", f"data.features={feats}", f"max_steps={steps}", "log_every=1",
              "track.to=[]", "val.max_images=100", "device=cpu", *extra]
    out = {}
    for name, layout in (("1x2", ["threads=2"]), ("2x1", ["threads=1", "nproc=2"])):
        xe = folder / f"{name}_xe"
        out[name] = {"xe": train("shapes_xe.yaml", [*common, *layout, "xe.epochs=100"], xe),
                     "scst": train("shapes_scst.yaml", [*common, *layout, f"init_from={xe}/last", "rl.epochs=100"],
                                   folder / f"{name}_scst")}
    return out


def processes_rows(result: dict, steps: int, images: int = 1000) -> list[str]:
    ran = result["1x2"]
    lines = ["### 2 processes x 1 thread against 1 process x 2 threads (shapes)", "",
             f"XE and then SCST (configs/shapes_xe.yaml, shapes_scst.yaml: "
             f"{describe_runs(ran['xe']['settings'], ran['scst']['settings'])}) for {steps} steps each on "
             f"{images:,} shapes images (128 px), device=cpu. `2x1`: `rlcap train ... nproc=2 threads=1` (torchrun, "
             f"gloo; each rank half the images of a step); `1x2`: one process, threads=2. Samples (captions) a "
             f"second from the median step.", "",
             "| stage | 1 process x 2 threads | 2 processes x 1 thread | 2x1 / 1x2 |", "|---|---|---|---|"]
    for stage in ("xe", "scst"):
        a, b = (result[name][stage]["settings"]["captions"] / result[name][stage]["step_s"] for name in ("1x2", "2x1"))
        lines.append(f"| {stage} | {a:.0f} samples/s | {b:.0f} samples/s | {b / a:.2f} |")
    return lines


def gpu_section(dataset: Path, store: Path, steps: int, device: str, extra: list[str]) -> list[str]:
    """SCST at 50 images x 5 samples for FC, UpDown and the Transformer on ``device`` (in this process, so
    that its peak GPU memory can be read): samples a second from the median step, peak memory. On a
    machine without CUDA the section says it was not run (``--gpu-device cpu`` runs it on the CPU, to
    check the code path)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        return ["### GPU", "", f"Not run: CUDA is not available to this torch ({torch.__version__}). On a machine "
                "with CUDA the script fills this section: SCST at 50 images x 5 samples for FC, UpDown and the "
                "Transformer (samples a second, peak GPU memory)."]
    from rlcap import api
    from rlcap.train.logger import read_log

    cuda = device.startswith("cuda")
    name = torch.cuda.get_device_name(torch.device(device)) if cuda else "CPU"
    lines = ["### GPU" if cuda else "### The GPU section's code path, run on the CPU", "", "", "",  # [2]: the text
             "| model | samples/s | s/step | peak GPU memory |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("fc", "updown", "transformer"):
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            out = Path(tmp) / arch
            cfg = api.load_run_config(str(CONFIGS / "shapes_scst.yaml"), [
                f"data.dataset={dataset}", f"data.features={store}", f"max_steps={steps}", "log_every=1",
                "track.to=[]", "val.max_images=100", "data.min_count=1", f"device={device}",
                f"model.arch={arch}", "rl.batch_size=50", "rl.n_samples=5", "init_from=null", *extra,
                "data.in_memory=true", f"out_dir={out}"])
            api.train(cfg)
            times = [r["time"] for r in read_log(out / "log.jsonl") if r["split"] == "train"]
            step = float(np.median(np.diff(times))) if len(times) > 1 else float("nan")
            memory = f"{torch.cuda.max_memory_allocated(device) / 1024 ** 3:.2f} GB" if cuda else "n/a (CPU)"
            lines.append(f"| {arch} | {cfg.rl.batch_size * cfg.rl.n_samples / step:.0f} | {step:.3f} | {memory} |")
    lines[2] = (f"SCST (configs/shapes_scst.yaml, from random weights) at {cfg.rl.batch_size} images x "
                f"{cfg.rl.n_samples} samples, hidden {cfg.model.hidden_dim}, {steps} steps, device={device} ({name}), "
                "the first images of the store above, in memory.")
    return lines


def measured(part: dict) -> str:
    return f"Command: `{part['command']}`. Machine: {part['machine']}."


def coco_rows(part: dict) -> list[str]:
    f, a = part["figures"], part["args"]
    # (a results.json written before the runs' settings were recorded: the defaults it ran with)
    ran = (describe_runs(f["xe"]["settings"], f["scst"]["settings"]) if "settings" in f["xe"]
           else "UpDown at hidden 512, XE 50 images x 5 captions a step, SCST 50 images x 5 samples")
    lines = ["### Peak memory at COCO size", "", measured(part), "",
             f"Store: {a['images']:,} images x {a['regions']} regions x {a['dim']}-d, float16, {f['store_gb']:.1f} GB "
             f"on disk (random features, random captions over 1,000 words, 5 an image). {ran}: {a['steps']} steps of "
             f"XE, then {a['steps']} of SCST from the XE run's last checkpoint, every training image read out of core "
             f"(`data.in_memory=false`), each run a process "
             f"of its own (peak RSS: its own, from wait4). Step: the median over the run's steps.", "",
             "| stage | peak RSS | step |", "|---|---|---|"]
    for stage in ("xe", "scst"):
        lines.append(f"| {stage} | {f[stage]['peak_rss_gb']:.2f} GB | {f[stage]['step_s']:.3f} s |")
    worst = max(f[s]["peak_rss_gb"] for s in ("xe", "scst"))
    return [*lines, "", f"Reading (computed): peak RSS at COCO size out of core {worst:.2f} GB (goal: under 4 GB)."]


def reader_rows(part: dict) -> list[str]:
    f, a = part["figures"], part["args"]
    n = f"{a['memory_images']:,}"
    lines = ["### The reader: out of core against in memory, on the same rows", "", measured(part), "",
             f"The first {n} training images of the store (`data.max_train_images`), so that the batches, rows, "
             f"vocabulary and CIDEr-D document frequencies are the same and only the reader differs: {a['steps']} "
             f"steps of XE, then {a['steps']} of SCST from the in-memory XE run's last checkpoint, each arm a run of "
             f"its own, the two taking turns in {a['rounds']} chunks of {math.ceil(a['steps'] / a['rounds'])} "
             f"steps (each chunk a process resuming its run; lazy first in odd turns, in memory first in even ones), "
             f"so that the host's drift falls on both. Step: the median over every chunk's steps (less the first "
             f"{WARM} of a chunk); turn ratio: out of core / in memory, the two chunks of one turn.", "",
             "| stage | out of core: step | in memory: step | out of core / in memory | turn ratios (min, median, max) "
             "| peak RSS out of core / in memory |", "|---|---|---|---|---|---|"]
    for stage in ("xe", "scst"):
        g = f[stage]
        r = sorted(g["turn_ratios"])
        lines.append(f"| {stage} | {g['step_s']['lazy']:.3f} s | {g['step_s']['memory']:.3f} s | "
                     f"{g['step_s']['lazy'] / g['step_s']['memory']:.3f} | {r[0]:.3f}, {float(np.median(r)):.3f}, "
                     f"{r[-1]:.3f} | {g['peak_rss_gb']['lazy']:.2f} / {g['peak_rss_gb']['memory']:.2f} GB |")
    slower = max(f[s]["step_s"]["lazy"] / f[s]["step_s"]["memory"] - 1 for s in ("xe", "scst"))
    return [*lines, "", f"Reading (computed): on the same rows, out of core the step time is at most {slower:+.1%} "
                        f"against in memory (goal: within 5%)."]


def markdown(results: dict) -> str:
    lines = ["## Scale: a COCO-size feature store read batch by batch", "",
             "Each part below states the command and the day it was measured (`python benchmarks/bench_scale.py "
             "--parts ...` measures some again and keeps the others, runs/bench_scale/results.json)."]
    renderers: dict[str, Callable[[dict], list[str]] | None] = {"coco": coco_rows, "reader": reader_rows,
                                                                 "processes": None, "gpu": None}
    for name, render in renderers.items():
        part = results.get(name)
        if part is None:
            lines += ["", f"Part `{name}`: not measured yet."]
        elif render is None:  # already lines
            lines += ["", *part["lines"][:2], measured(part), "", *part["lines"][2:]]
        else:
            lines += ["", *render(part)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=123_287, help="images in the store (COCO: 123,287)")
    p.add_argument("--regions", type=int, default=36, help="regions an image (bottom-up: 36)")
    p.add_argument("--dim", type=int, default=2048, help="feature size (bottom-up: 2048)")
    p.add_argument("--steps", type=int, default=500, help="steps of XE and of SCST")
    p.add_argument("--memory-images", type=int, default=5000,
                   help="the first N training images, trained out of core and in memory to compare the reader")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "bench_scale", help="work folder")
    p.add_argument("--doc", type=Path, default=DOC, help="markdown file whose bench-scale section is replaced")
    p.add_argument("--keep", action="store_true", help="keep the synthetic store afterwards")
    p.add_argument("--process-steps", type=int, default=100,
                   help="steps of each run of 2 processes x 1 thread against 1 x 2 (0: not run)")
    p.add_argument("--gpu-device", default="cuda", help="device of the GPU section (cpu: check its code path)")
    p.add_argument("--gpu-steps", type=int, default=50, help="steps of SCST per model in the GPU section")
    p.add_argument("--rounds", type=int, default=5, help="turns of the reader comparison (part reader)")
    p.add_argument("--shapes-images", type=int, default=1000, help="training images of the processes part's shapes set")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="overrides of every training run, e.g. a smaller model to check the script quickly "
                        "(the command, and so the overrides, is recorded beside each table)")
    p.add_argument("--parts", default=",".join(PARTS),
                   help=f"parts measured in this run, of {','.join(PARTS)} (the others: from OUT/results.json)")
    p.add_argument("--store", type=Path, default=None,
                   help="a store folder written earlier (dataset.json, feats.h5; e.g. by --keep): read, never deleted")
    args = p.parse_args(argv)
    parts = [name for name in args.parts.split(",") if name]
    if unknown := sorted(set(parts) - set(PARTS)):
        p.error(f"--parts: unknown {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    folder = args.out
    folder.mkdir(parents=True, exist_ok=True)
    if args.store is not None:
        dataset, store = args.store / "dataset.json", args.store / "feats.h5"
    else:
        dataset, store = write_store(folder / "store", args.images, args.regions, args.dim)
    saved = folder / "results.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    command = "python benchmarks/bench_scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    stamp = {"command": command.strip(), "machine": machine(torch=torch.__version__),
             "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    model = ["model.arch=updown", "xe.batch_size=50", "rl.batch_size=50", "threads=auto", *args.set]
    first = [f"data.max_train_images={args.memory_images}"]
    for name in parts:
        if name == "coco":  # the whole store out of core: peak memory at COCO's size
            figures = runs(dataset, store, args.steps, model, "lazy", folder, ["data.in_memory=false"])
            results[name] = {**stamp, "figures": {**figures, "store_gb": store.stat().st_size / 1024 ** 3}}
        elif name == "reader":
            figures = reader_comparison(dataset, store, args.steps, args.rounds, model, folder, first)
            results[name] = {**stamp, "figures": figures}
        elif name == "processes" and args.process_steps:
            rows = processes_rows(processes_against_threads(folder / "processes", args.process_steps, args.set,
                                                            args.shapes_images), args.process_steps, args.shapes_images)
            results[name] = {**stamp, "lines": rows}
        elif name == "gpu":
            results[name] = {**stamp, "lines": gpu_section(dataset, store, args.gpu_steps, args.gpu_device,
                                                           [*first, *args.set])}
        saved.write_text(json.dumps(results, indent=1))  # after each part: a failed later part keeps it
    body = markdown(results)
    replace_section("bench-scale", body, args.doc)
    print(body)
    if args.store is None and not args.keep:
        shutil.rmtree(folder / "store")
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
