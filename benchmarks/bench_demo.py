"""The demo as a benchmark: runs `rlcap demo` end to end, timed, and records its scores.

Run with ``make bench-demo``. Records in docs/BENCHMARKS.md (section bench-demo): the wall time of
each stage of the run, the test-split scores (beam size 3) of the XE and SCST models, and the
nearest-neighbour reference captioner, with the ratio the foundation issue asks for (XE CIDEr-D / NN CIDEr-D).
Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchdoc import REPO, machine, replace_section

METRICS = ["Bleu_4", "METEOR", "ROUGE_L", "CIDEr"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_demo", help="run folder (replaced)")
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "rlcap.cli", "demo", "--out", args.out]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    seconds = time.perf_counter() - start
    scores = json.loads((REPO / args.out / "scores.json").read_text())
    rows = {"XE": scores["stages"]["xe"], "SCST": scores["stages"]["scst"],
            "nearest neighbour": scores["references"]["nearest_neighbour"]}
    ratio = rows["XE"]["CIDEr"] / rows["nearest neighbour"]["CIDEr"]
    gain = rows["SCST"]["CIDEr"] / rows["XE"]["CIDEr"] - 1
    import torch

    lines = ["## Demo: shapes test split (XE, SCST, nearest neighbour)", "",
             f"Command: `make bench-demo` (runs `rlcap demo --out {args.out}`; data and features are reused when "
             f"already built). Machine: {machine(torch=torch.__version__)}. Wall time of the run: {seconds:.0f} s.", "",
             "Test split (1,000 images), beam size 3, pycocoevalcap metrics. The nearest-neighbour reference captioner copies "
             "the highest-consensus caption of the closest training image in EfficientNet-Lite0 feature space.", "",
             "| system | " + " | ".join(METRICS) + " |", "|---|" + "---:|" * len(METRICS)]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[m]:.4f}" if m in row else "-" for m in METRICS) + " |")
    lines += ["", f"XE CIDEr-D / nearest-neighbour CIDEr-D = **{ratio:.2f}x** (goal: at least 1.5x). "
                  f"SCST over XE: **{gain:+.1%}** CIDEr-D."]
    replace_section("bench-demo", "\n".join(lines))
    print("\n".join(lines))
    print(json.dumps({"seconds": round(seconds, 1), "xe_cider": rows["XE"]["CIDEr"],
                      "nn_cider": rows["nearest neighbour"]["CIDEr"], "xe_over_nn": round(ratio, 3),
                      "scst_cider": rows["SCST"]["CIDEr"], "scst_gain": round(gain, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
