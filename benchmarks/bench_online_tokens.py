"""Image tokens online against the store: steps/s of the shapes VLM's XE and SCST runs reading a float16 store of
its image tokens, and computing them from the pictures at each step (no ``data.features``).

Run with ``make bench-scale-vlm`` (this is its online section): prepares the shapes-vlm benchmark's data (the shapes
pictures, the mini SmolVLM built offline, the store of its tokens; reused when there), then, in each of ``--rounds``
rounds, runs the same short XE run three times (store; online, the processor on the loader's read-ahead thread;
online, the processor in a worker process) and the same short SCST run from each XE checkpoint, the routes' order
rotated from one round to the next (a machine that speeds up or slows down during the bench favours none), and times
the training steps from each run's log (each step's record carries its Unix time; the first step, which builds and
warms up, is left out). On 2 cores a single round's XE ratio ranged from 0.80x to 1.08x over five rounds of 16 steps
at one build (docs/BENCHMARKS.md), so the goal is read on every round's steps together: the steps timed over their
seconds, per route. Writes the bench-scale-vlm-online section of docs/BENCHMARKS.md and prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchdoc import REPO, machine, replace_section

XE_STEPS, RL_STEPS = 48, 16  # steps timed a run (batch 25: 1,225 and 425 training images)
# online: the default (data.workers=0: the pictures decoded and processed on the loader's read-ahead thread);
# process: in a worker process (data.workers=1)
ROUTES = ("store", "online", "process")
METHODS = ("xe", "scst")


def timed_steps(run: Path) -> tuple[int, float]:
    """How many training steps of a run were timed (all after its first) and their seconds (their log records')."""
    times = [json.loads(line)["time"] for line in (run / "log.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "train"]
    return len(times) - 1, times[-1] - times[0]


def train(config: str, out: Path, overrides: list[str]) -> None:
    command = [sys.executable, "-m", "rlcap", "train", config, f"out_dir={out}", "overwrite=true", "log_every=1",
               "track.to=[]", "threads=2", *overrides]
    subprocess.run(command, cwd=REPO, check=True)


def pooled(timed: list[tuple[int, float]]) -> float:
    """Steps/s of several runs' timed steps together: their steps over their seconds."""
    return sum(n for n, _ in timed) / sum(s for _, s in timed)


def table(found: dict[str, dict[str, list[tuple[int, float]]]]) -> tuple[list[str], dict[str, float]]:
    """The rows of each round and of all rounds together, and each online route's ratio to the store over all
    rounds (``ratio[method]``: the default route's, ``ratio[f"{method}_{route}"]``: each other's)."""
    online = [r for r in ROUTES[1:] if r in found]
    head = "| run | round | store steps/s | " + " | ".join(f"{r} steps/s | {r} / store" for r in online) + " |"
    lines = [head, "|---|---|---|" + "---|---|" * len(online)]
    ratio = {}
    for m in METHODS:
        store = found["store"][m]
        for k, s in enumerate(store):
            cells = [f"{o[k][0] / o[k][1]:.2f} | {o[k][0] / o[k][1] / (s[0] / s[1]):.2f}x"
                     for o in (found[r][m] for r in online)]
            lines.append(f"| {m.upper()} | {k + 1} | {s[0] / s[1]:.2f} | " + " | ".join(cells) + " |")
        for r in online:
            ratio[m if r == "online" else f"{m}_{r}"] = pooled(found[r][m]) / pooled(store)
        cells = [f"{pooled(found[r][m]):.2f} | **{ratio[m if r == 'online' else f'{m}_{r}']:.2f}x**" for r in online]
        lines.append(f"| {m.upper()} | all {len(store)} ({sum(n for n, _ in store)} steps a route) | "
                     f"{pooled(store):.2f} | " + " | ".join(cells) + " |")
    return lines, ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="data/shapes-vlm", help="the shapes-vlm benchmark's data folder")
    parser.add_argument("--out", default="runs/bench_online_tokens")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the six runs, the routes' order rotated")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from rlcap.bench.registry import BENCHMARKS

    data = REPO / args.data
    dataset, store = BENCHMARKS["shapes-vlm"].prepare(data, 224, print)
    online = ["data.features=", f"data.images={data}"]
    given = {"store": [f"data.features={store}"], "online": [*online, "data.workers=0"],
             "process": [*online, "data.workers=1"]}
    common = [f"data.dataset={dataset}", f"model.path={data / 'captioner'}", "val.max_images=25"]
    found: dict[str, dict[str, list[tuple[int, float]]]] = {r: {m: [] for m in METHODS} for r in ROUTES}
    for k in range(args.rounds):
        for route in ROUTES[k % len(ROUTES):] + ROUTES[:k % len(ROUTES)]:  # (each route first in turn)
            xe = REPO / args.out / f"round{k + 1}" / f"xe_{route}"
            train("configs/shapes-vlm_xe.yaml", xe, [*common, *given[route], "xe.epochs=1", "xe.batch_size=25",
                                                     f"data.max_train_images={25 * (XE_STEPS + 1)}"])
            scst = xe.parent / f"scst_{route}"
            train("configs/shapes-vlm_scst.yaml", scst, [*common, *given[route], f"init_from={xe / 'best'}",
                                                         "rl.epochs=1", "rl.batch_size=25",
                                                         f"data.max_train_images={25 * (RL_STEPS + 1)}"])
            found[route]["xe"].append(timed_steps(xe))
            found[route]["scst"].append(timed_steps(scst))
    import torch
    import transformers

    rows, ratio = table(found)
    body = "\n".join([
        "## Image tokens online against the store (the shapes VLM)", "",
        f"Command: `make bench-scale-vlm` (`python benchmarks/bench_online_tokens.py --rounds {args.rounds}`). "
        f"Machine: {machine(torch=torch.__version__, transformers=transformers.__version__)}; 2 threads, alone.", "",
        "The shapes-vlm benchmark's mini SmolVLM (a 64-wide SigLIP tower on 64-px pictures, pixel shuffle, 4 image "
        "tokens a picture; a 128-wide 2-layer Llama). *store*: its tokens read from the float16 store `rlcap "
        "features --encoder hf:DIR` wrote; *online*: no `data.features`, each batch's pictures decoded and put "
        "through the model's own processor on the loader's read-ahead thread a batch ahead (`data.workers=0`, the "
        "default), the frozen image side run on the training thread once a picture (SCST's 5 samples share "
        "them); *process*: the same with the pictures decoded and processed in a worker process "
        "(`data.workers=1`). Batch 25; each run's steps after its first timed from its log "
        f"({XE_STEPS} XE, {RL_STEPS} SCST); each round runs every route, each first in turn; *all*: every "
        "round's steps over their seconds.", "",
        *rows, "",
        f"Goal: online at least 0.8x the store's steps/s, over all rounds: XE {ratio['xe']:.2f}x, "
        f"SCST {ratio['scst']:.2f}x (in a worker process: {ratio['xe_process']:.2f}x, "
        f"{ratio['scst_process']:.2f}x).",
    ])
    replace_section("bench-scale-vlm-online", body)
    print(body)
    print(json.dumps({k: round(v, 3) for k, v in ratio.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
