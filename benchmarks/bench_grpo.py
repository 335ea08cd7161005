"""GRPO beside SCST on shapes, at equal numbers of sampled captions: the native UpDown and a small transformers
captioner (GIT), TRL's defaults and the variants that change one thing each.

Run with ``make bench-grpo``: calls ``rlcap bench --benchmark shapes`` (UpDown on EfficientNet features) and
``rlcap bench --benchmark shapes-hf`` (a small GIT built offline) with the rows ``scst`` (the leave-one-out
baseline), ``grpo`` (TRL's GRPOConfig defaults: group-normalised advantages, one update per batch, DAPO's word
average, beta 0), ``grpo_clip`` (two updates per sampled batch, the ratio clipped to [0.8, 1.28]), ``dr_grpo``
(no std scaling, a constant normaliser) and ``grpo_kl`` (beta 0.04 to the XE policy), every RL row from the same
XE checkpoint with the same images, G, optimizer and epochs (``--rl rl.epochs=N``: equal sampled captions). Writes
the test table (CIDEr-D, SPICE, diversity), each row's validation CIDEr-D after every epoch (what the sampled
captions bought), what the clipping held back, and the first test images' captions into the bench-grpo section
of docs/BENCHMARKS.md. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench_shapes_hf import captions_table
from benchdoc import REPO, machine, replace_section, run_bench

# (benchmark, rows, output folder, overrides of the XE stage, RL epochs): on 2 cores with nothing else running,
# UpDown's RL epoch takes about 70 s and the small GIT's about 40 s, so the 5 RL rows take about 25 and 20 min
ROWS = "xe,scst,grpo,grpo_clip,dr_grpo,grpo_kl"
SIDES = (
    ("shapes", ROWS, "runs/bench_grpo", [], 4),
    ("shapes-hf", ROWS, "runs/bench_grpo-hf", ["xe.epochs=3"], 6),
)
POLICY = {"shapes": "UpDown (the native attention model, EfficientNet-Lite0 features at 128 px)",
          "shapes-hf": "a small GIT built by `rlcap hf-captioner` (random weights, a 128-wide 2-layer decoder; "
                       "configs/shapes-hf_xe.yaml)"}


def curves(out: str, methods: list[str]) -> dict[str, dict]:
    """Each RL row's validation CIDEr-D after every epoch, its sampled captions (its last step x images x G), and
    the means of what it logs (``clipped``, ``kl``, the reward) over its logged steps, from ``out``/METHOD/log.jsonl
    and config.json."""
    from rlcap.train.logger import read_log

    found = {}
    for m in methods:
        rows = read_log(REPO / out / m / "log.jsonl")
        cfg = json.loads((REPO / out / m / "config.json").read_text())
        train = [r for r in rows if r["split"] == "train"]
        mean = {k: sum(r[k] for r in train) / len(train) for k in ("clipped", "kl", "reward", "entropy")
                if k in train[0]}
        steps = max(r["step"] for r in train)  # (the log holds every log_every-th step)
        found[m] = {"val": [r["CIDEr"] for r in rows if r["split"] == "val"], "steps": steps,
                    "captions": steps * cfg["rl"]["batch_size"] * cfg["rl"]["n_samples"], **mean}
    return found


def curve_table(found: dict[str, dict], xe_val: float) -> list[str]:
    epochs = max(len(c["val"]) for c in found.values())
    lines = ["| method | sampled captions | " + " | ".join(f"val CIDEr-D, epoch {e + 1}" for e in range(epochs))
             + " | best | mean train reward | entropy | words clipped | mean KL (k3) |",
             "|---|---|" + "---|" * (epochs + 5)]
    for m, c in found.items():
        vals = " | ".join(f"{v:.3f}" for v in c["val"])
        clipped = f"{c['clipped']:.2%}" if "clipped" in c else "-"
        lines.append(f"| {m} | {c['captions']:,} | {vals} | {max(c['val']):.3f} ({max(c['val']) / xe_val - 1:+.1%}) | "
                     f"{c['reward']:.3f} | {c.get('entropy', float('nan')):.3f} | {clipped} | "
                     f"{c.get('kl', float('nan')):.4f} |".replace("nan", "-"))
    return lines


def xe_val(out: str) -> float:
    from rlcap.train.logger import read_log

    return max(r["CIDEr"] for r in read_log(REPO / out / "xe" / "log.jsonl") if r["split"] == "val")


def verdicts(m: dict, found: dict[str, dict]) -> list[str]:
    """What the rows say, each against the row it changes one thing of: GRPO (TRL's defaults) against SCST, and
    two clipped updates, Dr. GRPO and the KL term against GRPO (the last two where the benchmark runs them)."""
    best = {n: max(c["val"]) for n, c in found.items()}

    def test(row: str, against: str) -> str:
        beam, rs = (m[row]["beam"], m[against]["beam"]), (m[row]["rs"], m[against]["rs"])
        return (f"test beam CIDEr-D {beam[0]['CIDEr']:.3f} against {beam[1]['CIDEr']:.3f}, SPICE "
                f"{beam[0]['SPICE']:.3f} against {beam[1]['SPICE']:.3f}, Div-2 of 5 random samples "
                f"{rs[0]['Div-2']:.3f} against {rs[1]['Div-2']:.3f}")

    lines = [f"- GRPO with TRL's defaults against SCST: best validation CIDEr-D **{best['grpo']:.3f} against "
             f"{best['scst']:.3f}** ({best['grpo'] / best['scst'] - 1:+.1%}); {test('grpo', 'scst')}.",
             f"- Two clipped updates per sampled batch against one: best validation CIDEr-D **{best['grpo_clip']:.3f} "
             f"against {best['grpo']:.3f}** ({best['grpo_clip'] / best['grpo'] - 1:+.1%}) from the same sampled "
             f"captions, at {found['grpo_clip']['clipped']:.2%} of the second update's words clipped; "
             f"{test('grpo_clip', 'grpo')}."]
    if "dr_grpo" in found:
        lines.append(f"- Dr. GRPO (no std scaling, a constant normaliser) against GRPO: best validation CIDEr-D "
                     f"**{best['dr_grpo']:.3f} against {best['grpo']:.3f}**; {test('dr_grpo', 'grpo')}.")
    if "grpo_kl" in found:
        lines.append(f"- The KL term (beta 0.04, mean k3 {found['grpo_kl']['kl']:.3f} a word) against none: best "
                     f"validation CIDEr-D **{best['grpo_kl']:.3f} against {best['grpo']:.3f}**, sampling entropy "
                     f"{found['grpo_kl']['entropy']:.3f} against {found['grpo']['entropy']:.3f}; "
                     f"{test('grpo_kl', 'grpo')}.")
    return lines


def template_line(out: str, names: list[str]) -> str:
    """The most frequent word 4-gram of the test captions (beam 3) of every row together, and the share of each
    row's captions that hold it: how far a method's captions fold into one template."""
    from collections import Counter

    said = {n: list(json.loads((REPO / out / "captions" / f"{n}.json").read_text())["captions"].values())
            for n in names}
    grams = Counter(g for caps in said.values() for c in caps
                    for g in {tuple(c.split()[i:i + 4]) for i in range(len(c.split()) - 3)})
    top = max(grams, key=lambda g: (grams[g], g))  # (ties: the last in word order, so that a rerun agrees)
    shares = {n: sum(" ".join(top) in c for c in caps) / len(caps) for n, caps in said.items()}
    return (f"- The captions read: the test captions' most frequent 4-gram is \"{' '.join(top)}\"; it is in "
            + ", ".join(f"{n} {v:.0%}" for n, v in shares.items()) + " of each row's captions.")


def side(benchmark: str, methods: str, out: str, xe: list[str], epochs: int) -> tuple[list[str], dict]:
    """One benchmark's part of the section, and its figures."""
    command, seconds = run_bench(benchmark, methods, out, rl=[f"rl.epochs={epochs}"], xe=xe)
    names = methods.split(",")
    m = json.loads((REPO / out / "results.json").read_text())["methods"]
    found = curves(out, [n for n in names if n != "xe"])
    base = xe_val(out)
    figures = {"beam_cider": {n: m[n]["beam"]["CIDEr"] for n in names},
               "beam_spice": {n: m[n]["beam"]["SPICE"] for n in names},
               "best_val": {n: max(c["val"]) for n, c in found.items()}}
    lines = [
        f"### {benchmark}: {POLICY[benchmark]}", "",
        f"Command: `{' '.join(command)}`, {seconds / 60:.0f} min in this run (stages trained by an earlier run of "
        f"the same folder are reused). Every RL row: {epochs} epochs of 50 images x 5 samples from the XE "
        f"checkpoint (validation CIDEr-D {base:.3f}{'; XE ' + ', '.join(xe) if xe else ''}), lr 0.0001, CIDEr-D reward without the end token, the best "
        "epoch by beam-3 validation CIDEr-D kept for the test table.", "",
        (REPO / out / "results.md").read_text().strip(), "",
        "Validation CIDEr-D (500 images, beam 3) after each epoch, at equal numbers of sampled captions (the means "
        "are over the logged steps, every 20th):", "",
        *curve_table(found, base), "",
        *verdicts(m, found), template_line(out, names), "",
        "The first test images' captions (beam 3):", "",
        *captions_table(out, names),
    ]
    return lines, figures


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    import torch
    import transformers

    body, figures = ["## GRPO beside SCST on shapes, at equal numbers of sampled captions", "",
                     "Command: `make bench-grpo` (`python benchmarks/bench_grpo.py`). Machine: "
                     f"{machine(torch=torch.__version__, transformers=transformers.__version__)}.", ""], {}
    for benchmark, methods, out, xe, epochs in SIDES:
        lines, figures[benchmark] = side(benchmark, methods, out, xe, epochs)
        body += [*lines, ""]
    replace_section("bench-grpo", "\n".join(body))
    print("\n".join(body))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
