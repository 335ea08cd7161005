"""Image tokens online against the store: steps/s of the shapes VLM's XE and SCST runs reading a float16 store of
its image tokens, and computing them from the pictures at each step (no ``data.features``).

Run with ``make bench-scale-vlm`` (this is its online section): prepares the shapes-vlm benchmark's data (the shapes
pictures, the mini SmolVLM built offline, the store of its tokens; reused when there), then runs the same short XE
run twice (store, online) and the same short SCST run from its checkpoint twice, and times the training steps from
each run's log (each step's record carries its Unix time; the first step, which builds and warms up, is left out).
Writes the bench-scale-vlm-online section of docs/BENCHMARKS.md and prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section

XE_STEPS, RL_STEPS = 16, 8  # steps timed (batch 25: 400 and 200 training images)


def steps_per_second(run: Path) -> tuple[float, int]:
    """Steps/s of a run's training steps after its first (their log records' times), and how many were timed."""
    times = [json.loads(line)["time"] for line in (run / "log.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "train"]
    return (len(times) - 1) / (times[-1] - times[0]), len(times) - 1


def train(config: str, out: Path, overrides: list[str]) -> float:
    command = [sys.executable, "-m", "rlcap", "train", config, f"out_dir={out}", "overwrite=true", "log_every=1",
               "tensorboard=false", "threads=2", *overrides]
    start = time.time()
    subprocess.run(command, cwd=REPO, check=True)
    return time.time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/shapes-vlm", help="the shapes-vlm benchmark's data folder")
    parser.add_argument("--out", default="runs/bench_online_tokens")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from rlcap.bench.registry import BENCHMARKS

    data = REPO / args.data
    dataset, store = BENCHMARKS["shapes-vlm"].prepare(data, 224, print)
    routes = {"store": [f"data.features={store}"], "online": ["data.features=", f"data.images={data}"]}
    common = [f"data.dataset={dataset}", f"model.path={data / 'captioner'}", "val.max_images=25"]
    rows = {}
    for route, given in routes.items():
        xe = REPO / args.out / f"xe_{route}"
        train("configs/shapes-vlm_xe.yaml", xe, [*common, *given, "xe.epochs=1", "xe.batch_size=25",
                                                 f"data.max_train_images={25 * (XE_STEPS + 1)}"])
        scst = REPO / args.out / f"scst_{route}"
        train("configs/shapes-vlm_scst.yaml", scst, [*common, *given, f"init_from={xe / 'best'}", "rl.epochs=1",
                                                     "rl.batch_size=25", f"data.max_train_images={25 * (RL_STEPS + 1)}"])
        rows[route] = {"xe": steps_per_second(xe), "scst": steps_per_second(scst)}
    import torch
    import transformers

    ratio = {m: rows["online"][m][0] / rows["store"][m][0] for m in ("xe", "scst")}
    table = ["| run | store steps/s | online steps/s | online / store |", "|---|---|---|---|"]
    for m in ("xe", "scst"):
        table.append(f"| {m.upper()} (batch 25, {rows['store'][m][1]} steps timed) | {rows['store'][m][0]:.2f} | "
                     f"{rows['online'][m][0]:.2f} | {ratio[m]:.2f}x |")
    body = "\n".join([
        "## Image tokens online against the store (the shapes VLM)", "",
        f"Command: `make bench-scale-vlm` (`python benchmarks/bench_online_tokens.py`). Machine: "
        f"{machine(torch=torch.__version__, transformers=transformers.__version__)}; 2 threads, alone.", "",
        "The shapes-vlm benchmark's mini SmolVLM (a 64-wide SigLIP tower on 64-px pictures, pixel shuffle, 4 image "
        "tokens a picture; a 128-wide 2-layer Llama). *store*: its tokens read from the float16 store `rlcap "
        "features --encoder hf:DIR` wrote; *online*: no `data.features`, each batch's pictures decoded on the "
        "loader's read-ahead thread and put through the model's own processor and frozen image side on the "
        "training thread, once a picture (SCST's 5 samples share them). Steps timed from each run's log after its "
        "first step.", "",
        *table, "",
        f"Goal: online at least 0.8x the store's steps/s: XE {ratio['xe']:.2f}x, SCST {ratio['scst']:.2f}x.",
    ])
    replace_section("bench-scale-vlm-online", body)
    print(body)
    print(json.dumps({k: round(v, 3) for k, v in ratio.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
