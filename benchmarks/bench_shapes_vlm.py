"""A small instruction vision-language model trained by rlcap on shapes: XE, then SCST from it.

Run with ``make bench-shapes-vlm``: calls ``rlcap bench --benchmark shapes-vlm --methods xe,scst`` (the shapes data,
a SmolVLM (Idefics3) built offline at size mini with random weights, a wordpiece tokenizer trained on the training
captions and its chat template, the store of its image tokens, then the stages of configs/shapes-vlm_*.yaml; a
folder trained before is reused) and writes its table, the check its goal names (SCST at least +3% CIDEr-D over XE)
and the first test images' captions into the bench-shapes-vlm section of docs/BENCHMARKS.md. Prints a last line of
JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench_shapes_hf import captions_table, words
from benchdoc import REPO, machine, replace_section, run_bench

METHODS = "xe,scst"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_shapes-vlm", help="output folder of rlcap bench")
    args = parser.parse_args(argv)
    command, seconds = run_bench("shapes-vlm", METHODS, args.out)
    m = json.loads((REPO / args.out / "results.json").read_text())["methods"]
    gain = m["scst"]["beam"]["CIDEr"] / m["xe"]["beam"]["CIDEr"] - 1
    xe_cfg = json.loads((REPO / args.out / "xe" / "config.json").read_text())
    scst_cfg = json.loads((REPO / args.out / "scst" / "config.json").read_text())
    import torch
    import transformers

    body = "\n".join([
        "## An instruction vision-language model on shapes (SmolVLM built offline): XE, then SCST", "",
        f"Command: `make bench-shapes-vlm` (`{' '.join(command)}`), {seconds / 60:.0f} min in this run (stages "
        f"trained by an earlier run of the same folder are reused). Machine: "
        f"{machine(torch=torch.__version__, transformers=transformers.__version__)}.", "",
        "The policy is a SmolVLM (`Idefics3ForConditionalGeneration` with its processor and chat template) built by "
        "`rlcap hf-captioner --family smolvlm --size mini` (random weights; a 64-wide 2-layer SigLIP tower on 64-px "
        "pictures and its pixel shuffle, frozen, its 4 image tokens stored by `rlcap features --encoder hf:DIR`; a "
        "128-wide 2-layer Llama; a wordpiece tokenizer trained on the training captions). The prompt is rlcap's "
        "default instruction through the chat template; it is context, never part of a caption. XE "
        f"({xe_cfg['xe']['epochs']} epochs, lr {xe_cfg['optim']['lr']}), then SCST ({scst_cfg['rl']['epochs']} "
        f"epochs, lr {scst_cfg['optim']['lr']}, baseline {scst_cfg['scst']['baseline']}, sampled without autograd "
        "and scored in one teacher-forced pass, best by validation).", "",
        (REPO / args.out / "results.md").read_text().strip(), "",
        f"- SCST over XE, beam CIDEr-D: **{gain:+.1%}** (goal: at least +3%).",
        "- Words a test caption (beam 3): " + ", ".join(f"{k} {v:.1f}" for k, v in words(args.out, METHODS).items())
        + ".", "",
        "The first test images' captions (beam 3):", "",
        *captions_table(args.out, METHODS.split(",")),
    ])
    replace_section("bench-shapes-vlm", body)
    print(body)
    print(json.dumps({"scst_cider_gain": round(gain, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
