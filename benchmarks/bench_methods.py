"""The method table on the shapes benchmark: XE, SLL (SCST), SLL-ME and SLL-SLE from one XE checkpoint.

Run with ``make bench-methods``: calls ``rlcap bench --benchmark shapes --methods
xe,scst,sll_me,sll_sle --out runs/bench_shapes`` and copies its table, with the checks the RL
issue asks for, into the bench-methods section of docs/BENCHMARKS.md. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchdoc import REPO, machine, replace_section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_shapes", help="output folder of rlcap bench")
    args = parser.parse_args(argv)
    command = ["rlcap", "bench", "--benchmark", "shapes", "--methods", "xe,scst,sll_me,sll_sle", "--out", args.out]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rlcap.cli", *command[1:]], check=True, cwd=REPO)
    seconds = time.perf_counter() - start
    results = json.loads((REPO / args.out / "results.json").read_text())
    table = (REPO / args.out / "results.md").read_text()
    m = results["methods"]
    scst_gain = m["scst"]["beam"]["CIDEr"] / m["xe"]["beam"]["CIDEr"] - 1
    div2_gain = m["sll_sle"]["rs"]["Div-2"] / m["scst"]["rs"]["Div-2"] - 1
    sle_cider = m["sll_sle"]["beam"]["CIDEr"] / m["scst"]["beam"]["CIDEr"] - 1
    rl_settings = []
    for method in ("scst", "sll_me", "sll_sle"):
        cfg = json.loads((REPO / args.out / method / "config.json").read_text())
        baseline = cfg[cfg["algorithm"]].get("baseline", "greedy")  # SLL-SLE's precision term: always greedy
        rl_settings.append(f"{method}: {baseline} baseline, {cfg['rl']['epochs']} epochs, "
                           f"best by validation beam {cfg['decode']['beam_size']}")
    import torch

    body = "\n".join([
        "## Methods on shapes (Table 4 layout of 003_5a024678a14e9bf6.txt)", "",
        f"Command: `make bench-methods` (`{' '.join(command)}`), {seconds / 60:.0f} min. "
        f"Machine: {machine(torch=torch.__version__)}.", "",
        "Test split, 1,000 images. `beam`: beam size 3. `rs`: 5 random samples per image, CIDEr-D averaged over "
        "the 5. `bs`: the 5-best of a size-5 beam. Div-1/Div-2: distinct unigrams/bigrams over words among the 5 "
        "captions of an image; mBLEU-4: each caption against the other 4 (lower is more diverse). Recipes: "
        "configs/shapes_*.yaml; every RL method starts from the same XE checkpoint with the same budget.", "",
        table.strip(), "",
        f"RL runs: {'; '.join(rl_settings)}.", "",
        f"- SCST over XE, beam CIDEr-D: **{scst_gain:+.1%}** (goal: at least +5%).",
        f"- SLL-SLE over SCST, rs Div-2: **{div2_gain:+.1%}** (goal: at least +10%); "
        f"beam CIDEr-D: **{sle_cider:+.1%}** (goal: no more than 2% below).",
        f"- Curves: `{args.out}/curves.png` (validation CIDEr-D and mean reward against steps).",
    ])
    replace_section("bench-methods", body)
    print(body)
    print(json.dumps({"scst_over_xe": round(scst_gain, 4), "sle_div2_over_scst": round(div2_gain, 4),
                      "sle_beam_cider_vs_scst": round(sle_cider, 4), "minutes": round(seconds / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
