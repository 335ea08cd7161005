"""What watching a run costs: the shapes SCST recipe's steps/s with all four trackers (TensorBoard, W&B offline,
MLflow on a local database, Trackio local) against none.

Run with ``make bench-trackers``, alone on the machine. Needs the shapes data and an XE checkpoint (``make demo``:
data/shapes and runs/demo/xe/best; --data and --xe name others). Each run is ``rlcap train configs/shapes_scst.yaml``
for one epoch (the recipe's 50 images x 5 samples a step, log line every 20 steps, validation on 500 images with
the caption table of 8 pictures), in its own process, the two settings alternating, --repeats times each. steps/s
is read from the run's own log (the ``time`` of its first and last training lines: the steps between, the
trackers' start-up left out); the wall time of the whole command is shown beside it (start-up, validation and the
caption table included). Writes the bench-trackers section of docs/BENCHMARKS.md and prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section

SETTINGS = {"none": "[]", "all four": "[tensorboard,wandb,mlflow,trackio]"}
GOAL = 0.03  # at most 3% slower with all four


def one_run(out: Path, trackers: str, xe: Path, data: Path) -> dict:
    """One SCST epoch in a child process: steps/s between its first and last training lines, and its wall time."""
    command = [sys.executable, "-m", "rlcap.cli", "train", "configs/shapes_scst.yaml", f"out_dir={out}",
               f"init_from={xe}", f"data.dataset={data / 'dataset_shapes.json'}",
               f"data.features={data / 'feats_128.h5'}", "rl.epochs=1", f"track.to={trackers}", "overwrite=true"]
    env = {**os.environ, "TRACKIO_DIR": str(out.parent / "trackio")}  # (Trackio's own store: the bench's folder)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    train = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "train"]
    steps_per_s = (train[-1]["step"] - train[0]["step"]) / (train[-1]["time"] - train[0]["time"])
    return {"steps_per_s": steps_per_s, "wall_s": wall, "steps": train[-1]["step"]}


def markdown(runs: dict[str, list[dict]], command: str) -> tuple[str, dict]:
    import torch

    median = {name: statistics.median(r["steps_per_s"] for r in rs) for name, rs in runs.items()}
    slower = 1 - median["all four"] / median["none"]
    lines = ["## Trackers: the cost of watching a run", "",
             f"Command: `{command}`. Machine: {machine(torch=torch.__version__)}.", "",
             "The shapes SCST recipe (configs/shapes_scst.yaml) for one epoch from the demo's XE checkpoint, "
             "`track.to: []` against TensorBoard, W&B (offline), MLflow (local database) and Trackio (local) at once, "
             "the two alternating, each run in its own process. steps/s between the run's first and last training "
             "log lines (the median run, the range beside it); wall: the whole command (start-up, validation, "
             "the caption table).", "",
             "| trackers | steps/s | range | wall s (median) |", "|---|---:|---|---:|"]
    for name, rs in runs.items():
        rates = [r["steps_per_s"] for r in rs]
        lines.append(f"| {name} | {median[name]:.3f} | {min(rates):.3f}-{max(rates):.3f} | "
                     f"{statistics.median(r['wall_s'] for r in rs):.0f} |")
    verdict = "met" if slower <= GOAL else "**not met**"
    lines += ["", f"- All four trackers against none: {slower:+.1%} slower in steps/s (goal: at most {GOAL:.0%}): "
                  f"{verdict}."]
    return "\n".join(lines), {"median_steps_per_s": median, "slower": slower}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data" / "shapes", help="the shapes data (make demo's)")
    parser.add_argument("--xe", type=Path, default=REPO / "runs" / "demo" / "xe" / "best",
                        help="the XE checkpoint SCST starts from (make demo's)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench_trackers", help="the runs' folder")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting, alternating")
    args = parser.parse_args(argv)
    for needed in (args.data / "feats_128.h5", args.xe):
        if not needed.exists():
            parser.error(f"{needed} not found: run make demo first (or give --data and --xe)")
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for repeat in range(args.repeats):
        for name, trackers in SETTINGS.items():
            runs[name].append(one_run(args.out / name.replace(" ", "_"), trackers, args.xe.resolve(),
                                      args.data.resolve()))
    body, summary = markdown(runs, "make bench-trackers")
    replace_section("bench-trackers", body)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
