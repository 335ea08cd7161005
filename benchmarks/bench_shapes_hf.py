"""A transformers captioner trained by rlcap on shapes: XE, SCST from it, and WTF-RL against TF (its XE model).

Run with ``make bench-shapes-hf``: calls ``rlcap bench --benchmark shapes-hf --methods xe,scst,tf,wtf_rl``
(the shapes data, a small GIT with random weights and a wordpiece tokenizer trained on the training captions,
the store of its tower's tokens, then the stages; a folder trained before is reused) and writes its table, the
two checks its goals name (SCST at least +3% CIDEr-D over XE; WTF-RL's T2I R@1 above TF's) and the first
test images' captions of each method into the bench-shapes-hf section of docs/BENCHMARKS.md. Prints a last
line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchdoc import REPO, machine, replace_section, run_bench

METHODS = "xe,scst,tf,wtf_rl"
SHOWN = 6  # test images whose captions the section shows


def captions_table(out: str, methods: list[str]) -> list[str]:
    """The first test images' captions of every method beside a reference (captions/METHOD.json)."""
    from rlcap.data.readers import read_dataset

    said = {m: json.loads((REPO / out / "captions" / f"{m}.json").read_text())["captions"] for m in methods}
    # the dataset of the XE stage's run, or of any stage's where no stage is named xe (runs/bench_rewards_224: xe_box)
    config = next(p for p in (REPO / out / "xe" / "config.json", *sorted((REPO / out).glob("*/config.json")))
                  if p.is_file())
    dataset = REPO / json.loads(config.read_text())["data"]["dataset"]
    references = {r.id: r.captions[0] for r in read_dataset(dataset) if r.split == "test"}
    lines = ["| image | " + " | ".join(methods) + " | a reference |", "|---|" + "---|" * (len(methods) + 1)]
    for image in list(said[methods[0]])[:SHOWN]:
        lines.append(f"| {image} | " + " | ".join(said[m][image] for m in methods) + f" | {references[image]} |")
    return lines


def words(out: str, methods: str = METHODS) -> dict[str, float]:
    """Mean words of each method's beam captions on the test split (captions/METHOD.json)."""
    said = {m: json.loads((REPO / out / "captions" / f"{m}.json").read_text())["captions"] for m in methods.split(",")}
    return {m: sum(len(c.split()) for c in caps.values()) / len(caps) for m, caps in said.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_shapes-hf", help="output folder of rlcap bench")
    parser.add_argument("--max-train-images", type=int, default=0, help="train on the first N training images (0: all)")
    args = parser.parse_args(argv)
    command, seconds = run_bench("shapes-hf", METHODS, args.out, args.max_train_images)
    results = json.loads((REPO / args.out / "results.json").read_text())
    m = results["methods"]
    scst_gain = m["scst"]["beam"]["CIDEr"] / m["xe"]["beam"]["CIDEr"] - 1
    t2i = {who: (m["tf"]["distinct"][f"{who}T2I R@1"], m["wtf_rl"]["distinct"][f"{who}T2I R@1"])
           for who in ("", "judge ")}
    scst_cfg = json.loads((REPO / args.out / "scst" / "config.json").read_text())
    wtf_cfg = json.loads((REPO / args.out / "wtf_rl" / "config.json").read_text())
    import torch
    import transformers

    body = "\n".join([
        "## A transformers captioner on shapes (`model.arch: hf`): XE, SCST, WTF-RL", "",
        f"Command: `make bench-shapes-hf` (`{' '.join(command)}`), {seconds / 60:.0f} min in this run (stages trained "
        f"by an earlier run of the same folder are reused). Machine: "
        f"{machine(torch=torch.__version__, transformers=transformers.__version__)}.", "",
        "The policy is a small GIT built by `rlcap hf-captioner` (random weights; a 64-wide ViT tower on 64-px "
        "pictures, frozen, its 17 tokens stored by `rlcap features --encoder hf:DIR`; a 128-wide 2-layer text "
        "decoder; a wordpiece tokenizer trained on the training captions), trained by `configs/shapes-hf_xe.yaml`, "
        f"then SCST ({scst_cfg['rl']['epochs']} epochs, lr {scst_cfg['optim']['lr']}, best by validation) and WTF-RL "
        f"({wtf_cfg['rl']['epochs']} epochs, lr {wtf_cfg['optim']['lr']}, alpha {wtf_cfg['wtf_rl']['alpha']}, "
        f"bs_baseline {wtf_cfg['wtf_rl']['bs_baseline']}, judged at its end) from it; TF is the XE model, judged by "
        "the retrievers (docs/DISTINCT.md). The retrievers read the same store (the tower's pooled token), so they "
        "are weaker than on shapes' EfficientNet features.", "",
        (REPO / args.out / "results.md").read_text().strip(), "",
        f"- SCST over XE, beam CIDEr-D: **{scst_gain:+.1%}** (goal: at least +3%).",
        f"- WTF-RL over TF, T2I R@1: **{t2i[''][0]:.1f} -> {t2i[''][1]:.1f}** (training retriever), "
        f"**{t2i['judge '][0]:.1f} -> {t2i['judge '][1]:.1f}** (judge) (goal: up); its beam CIDEr-D over TF: "
        f"**{m['wtf_rl']['beam']['CIDEr'] / m['tf']['beam']['CIDEr'] - 1:+.0%}**.",
        "- Words a test caption (beam 3): " + ", ".join(f"{k} {v:.1f}" for k, v in words(args.out).items()) + ".", "",
        "The first test images' captions (beam 3):", "",
        *captions_table(args.out, METHODS.split(",")),
    ])
    replace_section("bench-shapes-hf", body)
    print(body)
    print(json.dumps({"scst_cider_gain": round(scst_gain, 4), "wtf_rl_t2i_r1": t2i[""], "judge_t2i_r1": t2i["judge "]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
