"""Rewards that read the caption beside CIDEr-D on shapes, at equal numbers of sampled captions: SCST with CIDEr-D,
with [Xing26]'s QA utility, and with both summed, and GRPO with the QA utility, all from the same XE checkpoint.

Run with ``make bench-rewards``: generates the shapes data (``questions.json`` beside it), trains the two text-only
readers with ``rlcap data reader`` (``data/shapes/readers/reward``, small, seed 0: the reward's; and
``data/shapes/readers/judge``, base, seed 1: held out, it only judges) unless they are there, runs ``rlcap bench
--benchmark shapes`` with the rows ``xe,scst,scst_end,scst_qa,scst_qa_cider,grpo_qa`` (``--rl rl.epochs=N``; every RL
row but ``scst`` judged at the end of its budget, as validation picks by CIDEr-D, which the QA rows do not train:
``scst_end`` is the ``scst`` run's last checkpoint, the baseline of the goals), then scores
each row's test captions (beam 3): the held-out reader's QA-acc, CIDEr-D, SPICE, words a caption, the template
share, Div-2, and CHAIR_i, CHAIR_s and coverage where rlcap's metrics hold them. Writes the table, the readers' own
accuracies (from a reference caption, from an empty one, chance), what the rows say against the issue's goals, and
the first test images' captions into the bench-rewards section of docs/BENCHMARKS.md. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys

from bench_shapes_hf import captions_table
from benchdoc import REPO, machine, replace_section, run_bench

ROWS = "xe,scst,scst_end,scst_qa,scst_qa_cider,grpo_qa"
BASE = "scst_end"  # CIDEr-D SCST, judged as the QA rows are (at the end of the budget)
OUT = "runs/bench_rewards"
EPOCHS = 4  # RL epochs of every row: equal sampled captions (50 images x 5 samples a step)
DATA = REPO / "data" / "shapes"
READERS = {"reward": ("small", 0), "judge": ("base", 1)}
BASE_METRICS = ["CIDEr", "SPICE", "Div-2", "Template"]
HALLUCINATION = ("CHAIR_i", "CHAIR_s", "Coverage")  # (taken where rlcap.metrics names them)


def readers() -> dict[str, dict]:
    """Train the readers that are not there yet (``rlcap data reader``); each one's reader_card.json."""
    cards = {}
    for name, (size, seed) in READERS.items():
        folder = DATA / "readers" / name
        if not (folder / "reader_card.json").is_file():
            subprocess.run([sys.executable, "-m", "rlcap.cli", "data", "reader", "--dataset", str(DATA), "--out",
                            str(folder), "--size", size, "--seed", str(seed)], check=True, cwd=REPO)
        cards[name] = json.loads((folder / "reader_card.json").read_text())
    return cards


HEDGE = " with another shape"  # the phrase SCST with qa_utility alone learned to append (docs/RL.md, "QA utility")
KINDS = ("colour", "kind", "count", "position", "relation")


@functools.cache
def reader(name: str) -> tuple:
    """The reader ``name`` of READERS (fp32) and the questions, loaded once a process."""
    from rlcap.eval.qa_accuracy import load_judge

    return load_judge(DATA / "readers" / name, DATA / "questions.json")


def test_scenes() -> dict[str, object]:
    """The test pictures' scenes (id -> Scene), from the dataset JSON."""
    from rlcap.data.synthetic.scenes import Scene

    images = json.loads((DATA / "dataset_shapes.json").read_text())["images"]
    return {str(r["imgid"]): Scene.from_dict(r["scene"]) for r in images if r["split"] == "test"}


def reach(names: list[str]) -> dict[str, dict[str, float]]:
    """Each reader's QA-acc on the test pictures from captions written to probe it: the complete description
    (every answer stated: the ceiling of any row) and, when the XE row was run, XE's caption with the hedge
    phrase appended to every one."""
    from rlcap.data.synthetic.questions import complete_description
    from rlcap.eval.qa_accuracy import qa_accuracy

    scenes = test_scenes()
    probes = {"complete": {i: complete_description(s) for i, s in scenes.items()}}
    if "xe" in names:
        xe = json.loads((REPO / OUT / "captions" / "xe.json").read_text())["captions"]
        probes["xe_hedged"] = {i: c + HEDGE for i, c in xe.items()}
    found = {}
    for name in READERS:
        found[name] = {k: qa_accuracy(*reader(name), captions)[0]["QA-acc"] for k, captions in probes.items()}
    return found


def by_kind(names: list[str]) -> dict[str, dict[str, float]]:
    """The held-out judge's QA-acc from each row's test captions on each kind of question alone."""
    from rlcap.eval.qa_accuracy import of_kind, qa_accuracy

    judge, qa = reader("judge")
    found = {}
    for n in names:
        said = json.loads((REPO / OUT / "captions" / f"{n}.json").read_text())["captions"]
        found[n] = {kind: qa_accuracy(judge, of_kind(qa, list(said), kind), said)[0]["QA-acc"] for kind in KINDS}
    return found


def scores(names: list[str]) -> dict[str, dict[str, float]]:
    """Each row's test captions scored: the held-out reader's QA-acc and the metrics of the table."""
    from rlcap.data.objects import read_object_truth
    from rlcap.data.readers import read_dataset
    from rlcap.eval.qa_accuracy import qa_accuracy
    from rlcap.metrics import METRIC_NAMES, score_captions

    judge = reader("judge")
    refs = {r.id: r.captions for r in read_dataset(DATA / "dataset_shapes.json") if r.split == "test"}
    objects = read_object_truth(DATA / "dataset_shapes.json")  # each scene's shapes: CHAIR and coverage, exact
    metrics = BASE_METRICS + [m for m in HALLUCINATION if m in METRIC_NAMES]
    found = {}
    for n in names:
        said = json.loads((REPO / OUT / "captions" / f"{n}.json").read_text())["captions"]
        report = score_captions({i: refs[i] for i in said}, {i: [c] for i, c in said.items()}, metrics,
                                objects=objects)
        qa, _ = qa_accuracy(*judge, said)
        found[n] = {**qa, **report.corpus, "words": sum(len(c.split()) for c in said.values()) / len(said)}
    return found


def table(found: dict[str, dict[str, float]]) -> list[str]:
    columns = ["QA-acc", *[m for m in HALLUCINATION if m in next(iter(found.values()))], "CIDEr", "SPICE", "words",
               "Template", "Div-2"]
    lines = ["| row | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {n} | " + " | ".join(f"{f[c]:.3f}" for c in columns) + " |" for n, f in found.items()]
    return lines


def goals(f: dict[str, dict[str, float]]) -> list[str]:
    """The issue's goals, each read from the figures (those of rows not run left out, said so)."""
    if "scst_qa" not in f:
        return ["- No QA-utility row was run: no goal is read."]
    qa, base = f["scst_qa"], f[BASE]
    qa_gain = qa["QA-acc"] / base["QA-acc"] - 1
    lines = [f"- QA-utility SCST against CIDEr-D SCST: held-out QA-acc {qa['QA-acc']:.3f} against "
             f"{base['QA-acc']:.3f} ({qa_gain:+.1%} relative; goal: at least +10%)."]
    for m, goal in (("Coverage", "higher"), ("CHAIR_i", "no higher")):
        if m in base:
            lines.append(f"- {m}: QA-utility SCST {qa[m]:.3f} against CIDEr-D SCST {base[m]:.3f} (goal: {goal}).")
    summed = f.get("scst_qa_cider")
    if summed is None:
        lines.append("- The summed reward (scst_qa_cider) was not run: its goals (95% of CIDEr-D SCST's CIDEr-D, half "
                     "of the QA gain) are not read.")
        lines.append(f"- Template share: CIDEr-D SCST {base['Template']:.3f}, QA-utility SCST {qa['Template']:.3f} "
                     "(goal: below CIDEr-D SCST's).")
        return lines
    sum_gain = (summed["QA-acc"] - base["QA-acc"]) / max(qa["QA-acc"] - base["QA-acc"], 1e-9)
    lines += [f"- The summed reward keeps {summed['CIDEr'] / base['CIDEr']:.1%} of CIDEr-D SCST's "
              f"CIDEr-D (goal: at least 95%) and {sum_gain:.0%} of the QA gain (goal: at least half).",
              f"- Template share: CIDEr-D SCST {base['Template']:.3f}, QA-utility SCST "
              f"{qa['Template']:.3f}, summed {summed['Template']:.3f} (goal: both below CIDEr-D SCST's)."]
    return lines


def reach_lines(reached: dict[str, dict[str, float]], found: dict[str, dict[str, float]]) -> list[str]:
    lines = ["- From the complete description of each test picture (`complete_description`: every answer stated, "
             "in the references' usual words), the most a caption can reach: QA-acc "
             + ", ".join(f"{r['complete']:.3f} ({name} reader)" for name, r in reached.items()) + "."]
    if "xe" in found:
        lines.append(f"- From XE's captions with \"{HEDGE.strip()}\" appended to every one: QA-acc "
                     + ", ".join(f"{r['xe_hedged']:.3f} ({name} reader)" for name, r in reached.items())
                     + f"; XE's own captions: {found['xe']['QA-acc']:.3f} (judge).")
    return lines


def kind_table(kinds: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| row | " + " | ".join(KINDS) + " |", "|---|" + "---:|" * len(KINDS)]
    return lines + [f"| {n} | " + " | ".join(f"{k[c]:.3f}" for c in KINDS) + " |" for n, k in kinds.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="RL epochs of every row")
    parser.add_argument("--rows", default=ROWS, help="the rows run (comma-separated; stages already trained in "
                                                     f"{OUT} with the same settings are reused)")
    args = parser.parse_args(argv)
    import torch
    import transformers

    subprocess.run([sys.executable, "-m", "rlcap.cli", "data", "shapes", "--out", str(DATA)], check=True, cwd=REPO)
    cards = readers()
    command, seconds = run_bench("shapes", args.rows, OUT, rl=[f"rl.epochs={args.epochs}"])
    names = args.rows.split(",")
    found = scores(names)
    reached, kinds = reach(names), by_kind(names)
    card_lines = [f"- {name} reader ({c['size']}, seed {c['seed']}, {c['steps']} steps on {c['train_images']} "
                  f"training pictures): on {c['test']['images']} test pictures it never trained on, QA-acc "
                  f"{c['test']['from_reference']:.3f} from a reference caption, {c['test']['from_empty']:.3f} from an "
                  f"empty caption, chance {c['test']['chance']:.3f}." for name, c in cards.items()]
    body = ["## Rewards that read the caption: QA utility beside CIDEr-D on shapes", "",
            "Command: `make bench-rewards` (`python benchmarks/bench_rewards.py`). Machine: "
            f"{machine(torch=torch.__version__, transformers=transformers.__version__)}.", "",
            f"`{' '.join(command)}`, {seconds / 60:.0f} min. Every RL row: {args.epochs} epochs of 50 images x 5 "
            "samples from the same XE checkpoint, judged at the end of its budget (its last checkpoint; `scst` alone: the "
            "best epoch by validation CIDEr-D, as the other tables); test captions by beam "
            "3. QA-acc is the held-out reader's, never the reward's (docs/RL.md, \"QA utility\").", "",
            *card_lines, *reach_lines(reached, found), "", *table(found), "",
            "The held-out judge's QA-acc on each kind of question alone:", "", *kind_table(kinds), "",
            *goals(found), "", "The first test images' captions (beam 3):", "",
            *captions_table(OUT, names)]
    replace_section("bench-rewards", "\n".join(body))
    print("\n".join(body))
    print(json.dumps({"scores": found, "readers": cards, "reach": reached, "by_kind": kinds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
