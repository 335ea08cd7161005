"""Fault injection: SIGKILL XE and SCST runs at random moments, many inside checkpoint saves.

Run with ``make bench-faults``. The routine is the one ``tests/train/test_faults.py`` asserts
(tests/train/killing.py: each kill at a random moment after the run's first logged step, saves
slowed by a test hook so that kills land inside them, each time resumed): this script runs it on
the tiny test dataset and writes the figures to the bench-faults section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section

sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills per loop (XE and SCST)")
    args = parser.parse_args(argv)
    import torch

    from rlcap import api
    from tests.tiny import make_tiny_dataset, tiny_overrides
    from tests.train.killing import run_with_faults

    rows, start = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dataset, feats = make_tiny_dataset(folder)
        api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe", **{"xe.epochs": 2})))
        loops = {
            "xe": [*tiny_overrides(dataset, feats, folder / "u"), "xe.epochs=30", "save_every=1"],
            "scst (running-mean baseline)": tiny_overrides(dataset, feats, folder / "u", **{
                "algorithm": "scst", "init_from": folder / "xe" / "best", "rl.epochs": 20, "rl.batch_size": 8,
                "rl.n_samples": 3, "decode.max_len": 6, "save_every": 1, "scst.baseline": "running_mean"}),
        }
        for seed, (name, overrides) in enumerate(loops.items(), start=1):
            report = run_with_faults(overrides, folder / f"ref{seed}", folder / f"killed{seed}", args.kills, seed=seed,
                                     window=(0.0, 2.0))
            rows.append((name, report))
    lines = ["## Fault injection: kills, resumes, checkpoints lost", "",
             f"Command: `make bench-faults` ({(time.perf_counter() - start) / 60:.1f} min). "
             f"Machine: {machine(torch=torch.__version__)}.", "",
             "Each run is killed with SIGKILL at a random moment (uniform in 0-2 s after its first logged step), "
             "then resumed with `resume=true`, until the kills are spent; then it runs to the end. Every step "
             "writes a checkpoint and every save is slowed by 0.3 s before its manifest and between its two renames "
             "(a test hook), so many kills land inside saves. Tiny dataset of the test suite "
             "(`tests/tiny.py`); the same routine is asserted by `tests/train/test_faults.py`.", "",
             "| loop | kills | inside a save | resumed runs' losses equal the uninterrupted run's | checkpoints lost | "
             "files left after the next start |", "|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r.kills} | {r.in_save} | {'yes, every step' if r.resumes_exact else 'NO'} | "
                     f"{r.checkpoints_lost} | {r.orphans} |")
    body = "\n".join(lines)
    replace_section("bench-faults", body)
    print(body)
    print(json.dumps({name: r._asdict() for name, r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
