"""The method table of a benchmark: XE, SLL (SCST), SLL-ME and SLL-SLE from one XE checkpoint.

Run with ``make bench-methods`` (shapes) or ``make bench-concepts`` (COCO concepts, with a
training-image budget): calls ``rlcap bench --benchmark NAME --methods xe,scst,sll_me,sll_sle``
and copies its table, with the checks the issues ask for, into the benchmark's section of
docs/BENCHMARKS.md. On COCO concepts the reference captioners (nearest neighbour, template) are
scored beside it, built from the same training images. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchdoc import REPO, machine, replace_section, run_bench


# benchmark -> (BENCHMARKS.md section, title, make target, test images)
SECTIONS = {"shapes": ("bench-methods", "shapes", "make bench-methods", "1,000"),
            "coco-concepts": ("bench-concepts-methods", "COCO concepts", "make bench-concepts", "5,000")}


def reference_rows(out: str, xe_cider: float) -> list[str]:
    """The reference captioners on the test split, trained on what the methods trained on (CIDEr-D)."""
    from rlcap.data.loader import load_data
    from rlcap.metrics import score_captions
    from rlcap.reference_captioners import nearest_neighbour_predictions, template_predictions
    from rlcap.methods import load_run_config

    cfg = json.loads((REPO / out / "xe" / "config.json").read_text())["data"]
    cfg.update({k: str(REPO / cfg[k]) for k in ("dataset", "features")})  # recipes' paths are from the repository
    data_cfg = load_run_config(None, [f"data.{k}={v}" for k, v in cfg.items() if v is not None]).data
    splits = load_data(data_cfg, ("train", "test")).splits
    train, test = splits["train"], splits["test"]
    refs = dict(zip(test.ids, test.refs))
    scores = {}
    for name, fn in (("nearest neighbour", nearest_neighbour_predictions), ("template", template_predictions)):
        preds = fn(train, test)
        scores[name] = score_captions(refs, {i: [c] for i, c in preds.items()}, ["CIDEr"]).corpus["CIDEr"]
    nn = scores["nearest neighbour"]
    return [f"Reference captioners, from the same {len(train.ids):,} training scenes, test CIDEr-D: nearest "
            f"neighbour {nn:.3f}, template {scores['template']:.3f}.", "",
            f"- XE over the nearest neighbour, beam CIDEr-D: **{xe_cider / nn:.2f}x** (goal: at least 1.2x).", ""]


def data_note(out: str) -> str:
    """Which generated data the table is on: the shapes captions version from the dataset's manifest."""
    dataset = REPO / json.loads((REPO / out / "xe" / "config.json").read_text())["data"]["dataset"]
    manifest = dataset.parent / "manifest.json"
    if not manifest.exists():
        return ""
    version = json.loads(manifest.read_text()).get("config", {}).get("captions")
    return f" Data: shapes captions version {version} ({manifest.relative_to(REPO)})." if version else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="shapes", choices=sorted(SECTIONS), help="which benchmark")
    parser.add_argument("--out", default=None, help="output folder of rlcap bench (default runs/bench_BENCHMARK)")
    parser.add_argument("--max-train-images", type=int, default=0, help="train on the first N training images (0: all)")
    args = parser.parse_args(argv)
    args.out = args.out or f"runs/bench_{args.benchmark.split('-')[-1]}"
    command, seconds = run_bench(args.benchmark, "xe,scst,sll_me,sll_sle", args.out, args.max_train_images)
    results = json.loads((REPO / args.out / "results.json").read_text())
    table = (REPO / args.out / "results.md").read_text()
    m = results["methods"]
    scst_gain = m["scst"]["beam"]["CIDEr"] / m["xe"]["beam"]["CIDEr"] - 1
    div2_gain = m["sll_sle"]["rs"]["Div-2"] / m["scst"]["rs"]["Div-2"] - 1
    tempered = next((k for k in m["sll_sle"] if k.startswith("rs@")), None)  # samples at the RL recipes' temperature
    tempered_lines = [] if tempered is None else [
        f"- SLL-SLE over SCST, {tempered} Div-2 (samples at the temperature the RL methods train): "
        f"**{m['sll_sle'][tempered]['Div-2'] / m['scst'][tempered]['Div-2'] - 1:+.1%}**; "
        f"SCST over XE there: **{m['scst'][tempered]['Div-2'] / m['xe'][tempered]['Div-2'] - 1:+.1%}**."]
    sle_cider = m["sll_sle"]["beam"]["CIDEr"] / m["scst"]["beam"]["CIDEr"] - 1
    rl_settings = []
    for method in ("scst", "sll_me", "sll_sle"):
        cfg = json.loads((REPO / args.out / method / "config.json").read_text())
        baseline = cfg[cfg["algorithm"]].get("baseline", "greedy")  # for SLL-SLE, its precision term's baseline
        rl_settings.append(f"{method}: {baseline} baseline, samples at temperature {cfg['decode']['temperature']:g}, "
                           f"{cfg['rl']['epochs']} epochs, best by validation beam {cfg['decode']['beam_size']}")
    import torch

    section, title, make, test_images = SECTIONS[args.benchmark]
    references = reference_rows(args.out, m["xe"]["beam"]["CIDEr"]) if args.benchmark == "coco-concepts" else []
    budget = (f" Training images: the first {args.max_train_images:,} of the training split (every stage, and the "
              "reference captioners)." if args.max_train_images else "")
    body = "\n".join([
        f"## Methods on {title} (Table 4 layout of [Chen20])", "",
        f"Command: `{make}` (`{' '.join(command)}`), {seconds / 60:.0f} min. "
        f"Machine: {machine(torch=torch.__version__)}.{budget}{data_note(args.out)}", "",
        f"Test split, {test_images} images. `beam`: beam size 3. `rs`: 5 random samples per image, CIDEr-D averaged over "
        "the 5" + (f"; `{tempered}`: the same drawn at temperature {tempered[3:]}, as the RL recipes sample"
                   if tempered else "") + ". `bs`: the 5-best of a size-5 beam. Div-1/Div-2: distinct unigrams/bigrams over words among the 5 "
        "captions of an image; mBLEU-4: each caption against the other 4 (lower is more diverse). Recipes: "
        f"configs/{args.benchmark}_*.yaml; every RL method starts from the same XE checkpoint with the same budget.", "",
        table.strip(), "", *references,
        f"RL runs: {'; '.join(rl_settings)}.", "",
        f"- SCST over XE, beam CIDEr-D: **{scst_gain:+.1%}** (goal: at least +5%).",
        f"- SLL-SLE over SCST, rs Div-2: **{div2_gain:+.1%}** (goal: at least +10%); "
        f"beam CIDEr-D: **{sle_cider:+.1%}** (goal: no more than 2% below).", *tempered_lines,
        f"- Curves: `{args.out}/curves.png` (validation CIDEr-D and mean reward against steps).",
    ])
    replace_section(section, body)
    print(body)
    print(json.dumps({"scst_over_xe": round(scst_gain, 4), "sle_div2_over_scst": round(div2_gain, 4),
                      "sle_beam_cider_vs_scst": round(sle_cider, 4), "minutes": round(seconds / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
