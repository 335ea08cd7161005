"""Where SCST's gain over XE goes on shapes: decoding, perception and the best captions there are.

For each checkpoint (RL runs compared with the XE run listed before them): test-split CIDEr-D by greedy decoding, beam 3,
and beam 3 with length normalisation (log-probability / length); how often the beam caption names
the salient object's colour and shape; its mean length. For the dataset: CIDEr-D of captions
written from the true scene ("a red star", "a big red star"), what perfect perception of the
salient object would score. Writes the scst-headroom section of docs/BENCHMARKS.md.

    python benchmarks/scst_headroom.py --run xe=runs/bench_shapes/xe/best --run scst=runs/bench_shapes/scst/best
    make bench-headroom   # the runs of docs/notes/2026-11-21-shapes-rl-recipes.md, trained when missing
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from benchdoc import machine, replace_section

# name -> (beam size, length penalty); beam size 1 is greedy decoding
DECODINGS = {"greedy": (1, 0.0), "beam 3": (3, 0.0), "beam 3, length-normalised": (3, 1.0)}


def describe(config: dict) -> str:
    """The settings that tell the runs apart, from a checkpoint's config.json."""
    feats = Path(config["data"]["features"]).name
    if config["algorithm"] == "xe":
        return f"XE {config['xe']['epochs']} epochs, {feats}"
    rl, optim = config["rl"], config["optim"]
    # runs written before the per-algorithm sections kept the baseline in rl and the beam in val
    baseline = config.get(config["algorithm"], rl).get("baseline", "greedy")
    beam = config.get("decode", config.get("val"))["beam_size"]
    decay = f" x{optim['lr_decay_rate']:g} every {optim['lr_decay_every']}" if optim["lr_decay_every"] else ""
    chosen = f"beam {beam}" if beam > 1 else "greedy"
    return (f"{config['algorithm']} from {config['init_from']}: {rl['epochs']} epochs at lr {optim['lr']:g}{decay}, "
            f"baseline {baseline}, {rl['sample_method']}, best epoch by {chosen} validation, {feats}")


def main(argv: list[str] | None = None) -> int:
    from rlcap.config import from_dict
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.data.synthetic.agreement import salient_object_accuracy, salient_template
    from rlcap.data.synthetic.captions import SIZE_WORDS
    from rlcap.metrics import score_captions
    from rlcap.decoding.options import Decoding
    from rlcap.decoding.split import decode_split
    from rlcap.eval.open_run import open_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, metavar="LABEL=CHECKPOINT",
                        help="a checkpoint folder; RL rows are compared with the XE row before them")
    parser.add_argument("--write", action="store_true", help="write the section of docs/BENCHMARKS.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    size_words = {w for words in SIZE_WORDS.values() for w in words}  # big, large, small, little, tiny
    start = time.perf_counter()
    runs = [r.split("=", 1) for r in args.run]
    rows, scenes, refs = [], None, None
    for label, checkpoint in runs:
        run = open_run(checkpoint, device="cpu")
        model, vocab, config = run.policy, run.vocab, run.config
        split = load_data(from_dict(DataConfig, dict(config["data"])), ("test",), vocab=vocab).splits["test"]
        if scenes is None:
            dataset = json.loads(Path(config["data"]["dataset"]).read_text(encoding="utf-8"))
            scenes = {str(im["imgid"]): im["scene"] for im in dataset["images"] if im["split"] == "test"}
            refs = dict(zip(split.ids, split.refs))
        scores = {}
        for name, (beam, lp) in DECODINGS.items():
            predictions = decode_split(model, split, vocab, Decoding.search(run.device, beam, 16, length_penalty=lp))
            scores[name] = score_captions(refs, {i: [c] for i, c in predictions.items()}, ["CIDEr"]).corpus["CIDEr"]
            if name == "beam 3":
                accuracy = salient_object_accuracy(scenes, predictions)
                length = sum(len(c.split()) for c in predictions.values()) / len(predictions)
                # the same choice of naming the size or not, with the salient object seen perfectly
                sized = {i: [salient_template(scenes[i], bool(size_words & set(c.lower().split())))]
                         for i, c in predictions.items()}
                accuracy["perfect"] = score_captions(refs, sized, ["CIDEr"]).corpus["CIDEr"]
        rows.append((label, describe(config), scores, accuracy, length, config["algorithm"] == "xe"))
        print(label, scores, accuracy, f"length {length:.1f}", flush=True)
    oracle = {size: score_captions(refs, {i: [salient_template(scenes[i], size)] for i in refs}, ["CIDEr"]).corpus["CIDEr"]
              for size in (False, True)}
    minutes = (time.perf_counter() - start) / 60
    lines = [
        "## Where SCST's gain goes on shapes", "",
        "Command: `make bench-headroom` (trains the 224-px runs the Makefile lists when missing, then "
        f"`python benchmarks/scst_headroom.py {' '.join('--run ' + r for r in args.run)} --write`, "
        f"{minutes:.1f} min for the evaluation). Machine: {machine(torch=torch.__version__)}.", "",
        "Test split, 1,000 images, CIDEr-D. Gains: over the XE row above, with the same decoding. "
        "Salient object: the beam-3 caption names its colour and its shape (any annotator's word). "
        "Perfect perception: the beam-3 captions' choice of naming the size or not, applied to the true "
        "salient object (\"a red star\" / \"a big red star\").", "",
        "| run | what | greedy | beam 3 | beam 3, length-norm. | salient object right | beam length | "
        "perfect perception |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ref: dict[str, float] = rows[0][2]
    for label, what, s, acc, length, is_xe in rows:
        ref = s if is_xe else ref
        cells = [f"{s[k]:.3f}" + ("" if is_xe else f" ({s[k] / ref[k] - 1:+.2%})") for k in DECODINGS]
        lines.append(f"| {label} | {what} | {' | '.join(cells)} | {acc['both']:.1%} | {length:.1f} | {acc['perfect']:.3f} |")
    lines += ["", f"Captions written from the true scene: \"a red star\" {oracle[False]:.3f}, "
                  f"\"a big red star\" {oracle[True]:.3f} (perfect perception of the salient object, nothing else)."]
    body = "\n".join(lines)
    print(body)
    if args.write:
        replace_section("scst-headroom", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
