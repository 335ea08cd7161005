"""Rewards that read the caption beside CIDEr-D on shapes, at equal numbers of sampled captions: SCST with CIDEr-D,
with [Xing26]'s QA utility, and with both summed, and GRPO with the QA utility, all from the same XE checkpoint.

Run with ``make bench-rewards`` (``QUESTIONS=every``: the set of questions about every shape, its readers, rows and
section apart): generates the shapes data (both question files beside it), trains the set's text-only readers with
``rlcap data reader`` (``data/shapes/readers/reward``, small, seed 0: the reward's; and ``data/shapes/readers/judge``
and ``judge2``, base, seeds 1 and 2: held out, they only judge, a row's QA-acc their mean; ``readers/every/...`` for
the other set) unless they are there, runs ``rlcap
bench --benchmark shapes`` with the rows ``xe,scst,scst_end,scst_qa,
scst_qa_seed2,scst_qa_len,scst_qa_cider,scst_qa_cider_spread,scst_qa_cider_mid,scst_qa_cider_16,scst_qa_cider_heavy,
grpo_qa_cider_gdpo,grpo_qa_cider_gdpo_heavy,grpo_qa,xe_box,scst_box,scst_qa_box,
scst_qa_cider_16_box`` (the last four from a captioner told where its grid cells lie, ``model.grid_boxes``, read against
``scst_box``); the QA rows with
``_every`` for the other set, which has no second seed, length, spread, mid, 16, heavy or GDPO row, and of the boxed
rows only ``scst_qa_box_every`` and ``grpo_qa_box_every``, at 224 px; ``--rl rl.epochs=N``; every RL row but
``scst`` judged at the end of its budget, as validation picks by CIDEr-D, which the QA rows do not train: ``scst_end``
is the ``scst`` run's last checkpoint, the baseline of the goals; ``--image-size 224``: the four boxed rows alone,
with ``scst_qa_box`` again with seeds 1235 and 1236 (``scst_qa_box_seed2``, ``_seed3``: the goals read from the mean
of its runs too), ``scst_qa_mask_box`` (the utility masked past 1.3x the references' length) and GRPO from
``xe_box`` with CIDEr-D and with the utility (``grpo_box``, ``grpo_qa_box``: the gain within one algorithm), with the
pictures encoded at 224 px, a 7x7 grid, in ``runs/bench_rewards_224`` and a section of their own (with
``--questions every``: ``xe_box``, ``scst_box``, ``grpo_box`` and the utility under each, ``scst_qa_box_every`` and
``grpo_qa_box_every``, in the same folder, judged by that set's reader; with ``--questions joined``, 224 px alone:
the main questions, readers trained on joined references too, ``rlcap data reader --joined 0.5``, in
``readers/joined/...``, the utility of its reward reader under SCST and GRPO, ``scst_qa_box_joined`` and
``grpo_qa_box_joined``, and both with the reader sampling at 0.6, ``scst_qa_box_joined_t06`` and
``grpo_qa_box_joined_t06``, and both at 0.6 with [Xing26]'s abstain option read by a reward reader trained to take
it (``--abstain 0.25``, ``readers/joined/abstain``), ``scst_qa_box_joined_abstain_t06`` and
``grpo_qa_box_joined_abstain_t06``, the SCST one again with seed 1235, ``..._abstain_t06_seed2``, and the SCST one
rewarded on the questions about every shape by such a reader
trained on them (``readers/joined/every_abstain``), ``scst_qa_box_joined_every_abstain_t06``, and that row with
[Yeo25]'s n-gram repetition penalty beside the utility, ``scst_qa_box_joined_every_abstain_rep_t06``, beside ``xe_box``,
``scst_box``, ``scst_qa_box``, ``grpo_box`` and ``grpo_qa_box``, all judged by its judges; the main and every sets'
readers read single references, ``--joined 0``); ``--epochs N`` other than 4: the rows at N RL epochs, in
``..._eN`` and a section of their own), then scores each row's test captions (beam 3): the held-out judges' QA-acc
and their mean, CIDEr-D, SPICE, words a caption, the template share, Div-2, and CHAIR_i, CHAIR_s and coverage where
rlcap's metrics hold them; each judge by kind of question; what the captions say (count phrases, the relation
word, unfinished ends). Writes the tables, the readers' own accuracies (from a reference caption, from an empty one,
chance, from the complete description), what the rows say against the issue's goals, and the first test images'
captions into the set's section of docs/BENCHMARKS.md. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections import Counter
import re
import subprocess
import sys
from dataclasses import dataclass, replace

from bench_shapes_hf import captions_table
from benchdoc import REPO, machine, replace_section, run_bench

BASE = "scst_end"  # CIDEr-D SCST, judged as the QA rows are (at the end of the budget)
# the rows from xe_box, the captioner told where each grid cell lies (model.grid_boxes): CIDEr-D SCST, QA-utility
# SCST, and the sum at weight 16, read against the goals as the rows above are against BASE
BOXED_BASE, BOXED_QA = "scst_box", "scst_qa_box"
BOXED_MASK = "scst_qa_mask_box"  # the utility masked past 1.3x the references' length ([Ye26])
BOXED_GRPO = ("grpo_box", "grpo_qa_box")  # GRPO with CIDEr-D, and with the utility: the gain within one algorithm
BOXED_SUMMED = ("scst_qa_cider_16_box",)
BOXED = (BOXED_BASE, BOXED_QA, *BOXED_SUMMED)  # run at both sizes
BOXED_SEEDS = ("scst_qa_box_seed2", "scst_qa_box_seed3")  # scst_qa_box's other seeds
ABSTAINED = "_abstain"  # the joined set's QA row with the abstain option and its own reader (before SAMPLED)
# the joined set's QA row rewarded on the questions about every shape by an abstaining reader trained on them (judged
# on the main questions, as every row of the set)
EVERY_ABSTAINED = "_every_abstain"
SEED2 = "_seed2"  # the joined set's abstaining SCST row again with seed 1235 (after SAMPLED)
REPEATED = "_rep"  # that row with the n-gram repetition penalty beside the utility (after EVERY_ABSTAINED)
# the joined set's QA row rewarded by the same reader on both sets' questions (questions_main_every.json), with the
# repetition penalty at 0.3 (rlcap.bench.qa_rows.QA_MAIN_EVERY_ABSTAIN_PATHS)
MAIN_EVERY_ABSTAINED = "_main_every_abstain_rep03"
PAIR_EVERY_ABSTAINED = "_pair_every_abstain_rep03"  # the same with the count asked once (questions_pair_every.json)
LONG = "_len24"  # the MAIN_EVERY_ABSTAINED row with captions of up to 24 words (rlcap.bench.qa_rows.LONG_CAPTIONS)
BF16_READER = "_bf16reader"  # the MAIN_EVERY_ABSTAINED row with its reader in bf16 (rlcap.bench.qa_rows.BF16_READER)
ABSTAIN_SHARE = 0.25  # that reader's share of examples that teach it to abstain (rlcap data reader --abstain)
SAMPLED = "_t06"  # a set's QA rows again with the reader sampling at [Xing26]'s 0.6 (rlcap.bench.qa_rows.QA_SAMPLED_06)
# run at 224 px alone, after the QA row: its other seeds, the mask, whose 1.3 was set from 224-px captions, and GRPO
BOXED_AT_224 = (*BOXED_SEEDS, BOXED_MASK, *BOXED_GRPO)
SIZES = (128, 224)  # the encoder's input side: a 4x4 grid of cells, or 7x7 (the pictures are drawn at 128 px)
EPOCHS = 4  # RL epochs of every row: equal sampled captions (50 images x 5 samples a step)
DATA = REPO / "data" / "shapes"
# the folder whose test split the rows are judged on: DATA, or a wider one of the same training data
# (bench_rewards_wide.py sets it before anything is read)
TEST_DATA = DATA
# the reward reader, and two held-out judges of one recipe and two seeds: one small judge's seed moved a row's gain
# by 4.5 points (+7.0% and +11.5% for the same captions: BENCHMARKS.md, "... readers trained on joined references"),
# so a row's QA-acc is the judges' mean, each judge's beside it
READERS = {"reward": ("small", 0), "judge": ("base", 1), "judge2": ("base", 2)}
JUDGES = ("judge", "judge2")


@dataclass(frozen=True)
class QuestionSet:
    """One set of questions ``rlcap data shapes`` writes (data/synthetic/questions.py): its file, the folder of the
    readers trained on it, its QA rows' suffix in rlcap.bench.registry, and its section of BENCHMARKS.md."""

    file: str
    readers: str
    suffix: str
    section: str
    summed: tuple[str, ...] = ("scst_qa_cider",)  # its rows of CIDEr-D + qa_utility (each read against the goals)
    variants: tuple[str, ...] = ()  # its other QA-utility SCST rows (each read against the QA row's goals)
    boxed: tuple[str, ...] = ()  # its rows from xe_box (model.grid_boxes), read against scst_box
    at_224: tuple[str, ...] = ()  # its rows at 224 px (all from xe_box)
    rows_run: tuple[str, ...] = ()  # when set, the rows run by default instead of all of the set's (at_size)
    seeds: tuple[str, ...] = ()  # of its variants, the QA row's other seeds (the goals read from their mean too)
    out: str = "runs/bench_rewards"  # the rows' folder (rlcap bench --out): its captions/ and runs are read there
    joined: float = 0.0  # its readers' share of joined references (rlcap data reader --joined)
    at_128: bool = True  # whether it has rows at 128 px (the joined set: 224 px alone)
    abstain: float = 0.0  # > 0: it has an abstaining reward reader, this share of its examples teach it to abstain

    @property
    def rows(self) -> str:
        if self.rows_run:
            return ",".join(self.rows_run)
        qa = ("scst_qa", *self.variants, *self.summed, "grpo_qa")
        return "xe,scst,scst_end," + ",".join([*(f"{r}{self.suffix}" for r in qa), *self.boxed])


def at_size(qs: QuestionSet, image_size: int) -> QuestionSet:
    """``qs`` at the encoder's input side ``image_size``: at 128 itself; at 224 (EfficientNet-Lite0's 7x7 grid,
    where a small shape spans more of a cell) its boxed rows alone, from their own XE checkpoint, run in their own
    folder and written to their own section, read against that size's scst_box."""
    if image_size == 128:
        if not qs.at_128:
            raise SystemExit(f"the set {qs.section} has no rows at 128 px: give --image-size 224")
        return qs
    if not qs.at_224:
        raise SystemExit(f"--image-size {image_size} runs the boxed rows, which the set of {qs.file} has none of")
    return replace(qs, section=f"{qs.section}-{image_size}", summed=(), variants=(), seeds=(), rows_run=qs.at_224,
                   out=f"{qs.out}_{image_size}")


def at_budget(qs: QuestionSet, epochs: int) -> QuestionSet:
    """``qs`` at ``epochs`` RL epochs a row: at EPOCHS itself; at another budget its rows run in their own folder and
    are written to their own section (every row of one table at one budget: equal sampled captions)."""
    if epochs == EPOCHS:
        return qs
    return replace(qs, section=f"{qs.section}-e{epochs}", out=f"{qs.out}_e{epochs}")


def _sets() -> dict[str, QuestionSet]:
    from rlcap.data.synthetic.questions import QUESTION_SETS  # each set's file, as rlcap data shapes names it
    from rlcap.models.hf.build_reader import JOINED

    return {"main": QuestionSet(QUESTION_SETS["main"], "readers", "", "bench-rewards",
                                ("scst_qa_cider", "scst_qa_cider_spread", "scst_qa_cider_mid", "scst_qa_cider_16",
                                 "scst_qa_cider_16_seed2", "scst_qa_cider_heavy", "grpo_qa_cider_gdpo",
                                 "grpo_qa_cider_gdpo_heavy"),
                                ("scst_qa_seed2", "scst_qa_len"), ("xe_box", *BOXED),
                                ("xe_box", BOXED_BASE, BOXED_QA, *BOXED_AT_224, *BOXED_SUMMED),
                                seeds=("scst_qa_seed2",)),
            # at 224 px the utility under SCST and GRPO, from the same xe_box and beside the same CIDEr-D rows as the
            # main set's
            "every": QuestionSet(QUESTION_SETS["every"], "readers/every", "_every", "bench-rewards-every",
                                 at_224=("xe_box", BOXED_BASE, f"{BOXED_QA}_every", BOXED_GRPO[0],
                                         f"{BOXED_GRPO[1]}_every")),
            # the main questions with readers trained on joined references too, which read a caption that states
            # more than one reference does: the utility under SCST and GRPO, and the single-reference reader's
            # scst_qa_box and grpo_qa_box, all judged by the joined judge
            "joined": QuestionSet(QUESTION_SETS["main"], "readers/joined", "_joined", "bench-rewards-joined",
                                  at_224=("xe_box", BOXED_BASE, BOXED_QA, f"{BOXED_QA}_joined", *BOXED_GRPO,
                                          f"{BOXED_GRPO[1]}_joined", f"{BOXED_QA}_joined_t06",
                                          f"{BOXED_GRPO[1]}_joined_t06", f"{BOXED_QA}_joined{ABSTAINED}{SAMPLED}",
                                          f"{BOXED_GRPO[1]}_joined{ABSTAINED}{SAMPLED}",
                                          f"{BOXED_QA}_joined{ABSTAINED}{SAMPLED}{SEED2}",
                                          f"{BOXED_QA}_joined{EVERY_ABSTAINED}{SAMPLED}",
                                          f"{BOXED_QA}_joined{EVERY_ABSTAINED}{REPEATED}{SAMPLED}",
                                          f"{BOXED_QA}_joined{MAIN_EVERY_ABSTAINED}{SAMPLED}",
                                          f"{BOXED_QA}_joined{PAIR_EVERY_ABSTAINED}{SAMPLED}",
                                          f"{BOXED_QA}_joined{MAIN_EVERY_ABSTAINED}{SAMPLED}{LONG}",
                                          f"{BOXED_QA}_joined{MAIN_EVERY_ABSTAINED}{SAMPLED}{BF16_READER}"),
                                  joined=JOINED, at_128=False, abstain=ABSTAIN_SHARE)}


SETS = _sets()
BASE_METRICS = ["CIDEr", "SPICE", "Div-2", "Template"]
HALLUCINATION = ("CHAIR_i", "CHAIR_s", "Coverage")  # (taken where rlcap.metrics names them)


def readers(qs: QuestionSet) -> dict[str, dict]:
    """Train the readers of ``qs`` that are not there yet (``rlcap data reader``); each one's reader_card.json. With
    ``qs.abstain`` also its abstaining reward readers (the reward reader's size and seed, trained for
    ``ABSTAIN_STEPS``: rlcap data reader's default with --abstain): ``abstain`` on the set's questions and
    ``every_abstain`` on the questions about every shape (``scst_qa_box_joined_every_abstain_t06``'s)."""
    from rlcap.data.synthetic.questions import QUESTION_SETS
    from rlcap.models.hf.build_reader import ABSTAIN_STEPS, STEPS

    wanted = {name: (size, seed, 0.0, STEPS, qs.file) for name, (size, seed) in READERS.items()}
    if qs.abstain:
        wanted["abstain"] = (*READERS["reward"], qs.abstain, ABSTAIN_STEPS, qs.file)
        wanted["every_abstain"] = (*READERS["reward"], qs.abstain, ABSTAIN_STEPS, QUESTION_SETS["every"])
    cards = {}
    for name, (size, seed, abstain, steps, file) in wanted.items():
        folder = DATA / qs.readers / name
        if not (folder / "reader_card.json").is_file():
            subprocess.run([sys.executable, "-m", "rlcap.cli", "data", "reader", "--dataset", str(DATA), "--qa",
                            str(DATA / file), "--out", str(folder), "--size", size, "--seed", str(seed),
                            "--steps", str(steps), "--joined", str(qs.joined), "--abstain", str(abstain)],
                           check=True, cwd=REPO)
        cards[name] = json.loads((folder / "reader_card.json").read_text())
        if cards[name].get("qa", SETS["main"].file) != file:
            raise SystemExit(f"{folder} was trained on {cards[name]['qa']}, not {file}: remove it to train again")
        # (readers before --joined read single references, before --abstain none abstained)
        for setting, value, before in (("joined", qs.joined, 0.0), ("abstain", abstain, 0.0), ("steps", steps, STEPS)):
            if cards[name].get(setting, before) != value:
                raise SystemExit(f"{folder} was trained with --{setting} {cards[name].get(setting, before)}, not "
                                 f"{value}: remove it to train again")
    return cards


def card_line(name: str, c: dict) -> str:
    """What a reader's card says: on the test pictures, from a reference and from an empty caption; for a reader that
    abstains, the same with the option offered and how often it takes it."""
    t = c["test"]
    line = (f"- {name} reader ({c['size']}, seed {c['seed']}, {c['steps']} steps on {c['train_images']} training "
            f"pictures): on {t['images']} test pictures it never trained on, QA-acc {t['from_reference']:.3f} from a "
            f"reference caption, {t['from_empty']:.3f} from an empty caption, chance {t['chance']:.3f}.")
    if "abstain" in t:
        a = t["abstain"]
        line += (f" With the abstain option offered (taught on {c['abstain']:.0%} of its non-drill examples): QA-acc "
                 f"{a['from_reference']:.3f} from a reference, {a['from_empty']:.3f} from an empty caption; it "
                 f"abstains on {a['abstains_from_reference']:.3f} of a reference's prompts, "
                 f"{a['abstains_from_empty']:.3f} of an empty caption's and {a['abstains_from_negative']:.3f} of a "
                 "caption's of the picture without the asked shapes.")
    return line


HEDGE = " with another shape"  # the phrase SCST with qa_utility alone learned to append (docs/RL.md, "QA utility")
KINDS = ("colour", "kind", "count", "position", "relation")


@functools.cache
def reader(name: str, qs: QuestionSet) -> tuple:
    """The reader ``name`` of READERS trained on ``qs`` (fp32) and its questions, loaded once a process."""
    from rlcap.eval.qa_accuracy import load_judge

    return load_judge(DATA / qs.readers / name, TEST_DATA / qs.file)


@functools.cache
def scenes_of_test() -> dict[str, object]:
    """The test pictures' scenes (id -> Scene), from the dataset JSON."""
    from rlcap.data.synthetic.scenes import Scene

    images = json.loads((TEST_DATA / "dataset_shapes.json").read_text())["images"]
    return {str(r["imgid"]): Scene.from_dict(r["scene"]) for r in images if r["split"] == "test"}


def captions_of(name: str, out: str) -> dict[str, str]:
    """The row ``name``'s test captions (id -> caption), as rlcap bench wrote them into ``out``."""
    return json.loads((REPO / out / "captions" / f"{name}.json").read_text())["captions"]


def reach(names: list[str], qs: QuestionSet) -> dict[str, dict[str, float]]:
    """Each reader's QA-acc on the test pictures from captions written to probe it: the complete description
    (every answer stated: the ceiling of any row), all of a picture's references joined into one caption (a reader
    that reads less from them than from one reads no caption that states more than a reference) and, when the XE
    row was run, XE's caption with the hedge phrase appended to every one; when a CIDEr-D SCST row was run
    (``counted_base``), its captions with the picture's true count appended (``counted``)."""
    from rlcap.data.synthetic.questions import complete_description
    from rlcap.eval.qa_accuracy import qa_accuracy
    from rlcap.models.hf.build_reader import join

    scenes = scenes_of_test()
    probes = {"complete": {i: complete_description(s) for i, s in scenes.items()},
              "joined": {i: join(refs) for i, refs in refs_of_test().items()}}
    if "xe" in names:
        probes["xe_hedged"] = {i: c + HEDGE for i, c in captions_of("xe", qs.out).items()}
    base = counted_base(names)
    if base:
        probes["base_counted"] = {i: counted(c, len(scenes[i].objects)) for i, c in captions_of(base, qs.out).items()}
    found = {}
    for name, offered in reading(qs).items():
        found[name] = {k: qa_accuracy(*reader(name, qs), captions, abstain=offered)[0]["QA-acc"]
                       for k, captions in probes.items()}
    if base:
        found["base_counted_cider"] = cider(probes["base_counted"])
    return found


def counted_base(names: list[str]) -> str | None:
    """The CIDEr-D SCST row of ``names`` the count probe reads (BASE at 128 px, else the boxed rows' scst_box)."""
    return next((n for n in (BASE, BOXED_BASE) if n in names), None)


def reading(qs: QuestionSet) -> dict[str, bool]:
    """The readers the probes read, each with whether its prompts offer the abstain option: the reward reader and
    the judge, and with ``qs.abstain`` the abstaining reward reader, read with the option as its reward reads it."""
    return {**{name: False for name in READERS}, **({"abstain": True} if qs.abstain else {})}


def reach_by_kind(qs: QuestionSet) -> dict[str, dict[str, float]]:
    """Each reader's QA-acc on each kind of question alone from the complete description; and on the count question
    of the test pictures of three or four shapes, from their two main shapes alone (``main_pair``: "a purple circle
    next to a pink star"), with the count phrase the QA rows learned (``counted``: "... with another shape") and from
    the complete description ("three shapes: ..."): what a count phrase earns from each reader."""
    from rlcap.data.synthetic.questions import complete_description, main_pair
    from rlcap.eval.qa_accuracy import of_kind, qa_accuracy

    scenes = scenes_of_test()
    complete = {i: complete_description(s) for i, s in scenes.items()}
    many = [i for i, s in scenes.items() if len(s.objects) >= 3]
    pair = {i: main_pair(scenes[i]) for i in many}
    counts = {"pair": pair, "pair_counted": {i: counted(c, len(scenes[i].objects)) for i, c in pair.items()},
              "complete_many": {i: complete[i] for i in many}}
    found = {}
    for name, offered in reading(qs).items():
        judge, qa = reader(name, qs)
        found[name] = {kind: qa_accuracy(judge, of_kind(qa, list(complete), kind), complete, abstain=offered)[0][
            "QA-acc"] for kind in KINDS}
        found[name] |= {k: qa_accuracy(judge, of_kind(qa, many, "count"), captions, abstain=offered)[0]["QA-acc"]
                        for k, captions in counts.items()}
    return found


def reach_kind_table(found: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| reader | " + " | ".join(KINDS) + " | count, 3-4 shapes: the main pair | with the count phrase | the "
             "complete description |", "|---|" + "---:|" * (len(KINDS) + 3)]
    return lines + [f"| {n} | " + " | ".join(f"{r[c]:.3f}" for c in (*KINDS, *COUNT_PROBES)) + " |"
                    for n, r in found.items()]


COUNT_PROBES = ("pair", "pair_counted", "complete_many")


@functools.cache
def refs_of_test() -> dict[str, list[str]]:
    """The test pictures' references (id -> captions), read once a process."""
    from rlcap.data.readers import read_dataset

    return {r.id: r.captions for r in read_dataset(TEST_DATA / "dataset_shapes.json") if r.split == "test"}


@functools.cache
def objects_of_test() -> dict:
    """Each scene's shapes (rlcap.data.objects' truth, for CHAIR and coverage, exact), read once a process."""
    from rlcap.data.objects import read_object_truth

    return read_object_truth(TEST_DATA / "dataset_shapes.json")


def cider(said: dict[str, str]) -> float:
    """The corpus CIDEr-D of test captions ``said`` (id -> caption) against the test references."""
    from rlcap.metrics import score_captions

    refs = refs_of_test()
    return score_captions({i: refs[i] for i in said}, {i: [c] for i, c in said.items()}, ["CIDEr"]).corpus["CIDEr"]


OTHERS = {1: " with another shape", 2: " with two other shapes", 3: " with three other shapes"}


def counted(caption: str, n_objects: int) -> str:
    """``caption`` with the count phrase the QA rows learned, stating the picture's true count: the shapes it
    names (each with its number word) plus the phrase's number make ``n_objects`` ("... with two other shapes");
    unchanged where it names them all (or more). The probe of what CIDEr-D's template plus a true count reads."""
    return caption + OTHERS.get(n_objects - _named(caption.split()), "")


def by_kind(names: list[str], qs: QuestionSet, name: str = "judge") -> dict[str, dict[str, float]]:
    """The QA-acc of the reader ``name`` (the held-out judge, or the reward reader) from each row's test captions on
    each kind of question alone."""
    from rlcap.eval.qa_accuracy import of_kind, qa_accuracy

    read, qa = reader(name, qs)
    found = {}
    for n in names:
        said = captions_of(n, qs.out)
        found[n] = {kind: qa_accuracy(read, of_kind(qa, list(said), kind), said)[0]["QA-acc"] for kind in KINDS}
    return found


def scores(names: list[str], qs: QuestionSet, per_image: dict | None = None) -> dict[str, dict[str, float]]:
    """Each row's test captions scored: the held-out judges' QA-acc (``QA-acc judge``, ``QA-acc judge2``) and their
    mean (``QA-acc``, what the goals read), and the metrics of the table. ``per_image``: filled with each judge's
    QA-acc of each picture, ``(row, judge) -> {id: value}``."""
    from rlcap.eval.qa_accuracy import qa_accuracy
    from rlcap.metrics import METRIC_NAMES, score_captions

    refs = refs_of_test()
    objects = objects_of_test()
    metrics = BASE_METRICS + [m for m in HALLUCINATION if m in METRIC_NAMES]
    found = {}
    for n in names:
        said = captions_of(n, qs.out)
        report = score_captions({i: refs[i] for i in said}, {i: [c] for i, c in said.items()}, metrics,
                                objects=objects)
        judged = {}
        for j in JUDGES:
            corpus, pictures = qa_accuracy(*reader(j, qs), said)
            judged[f"QA-acc {j}"] = corpus["QA-acc"]
            if per_image is not None:
                per_image[n, j] = {i: v["QA-acc"] for i, v in pictures.items()}
        found[n] = {"QA-acc": sum(judged.values()) / len(judged), **judged, **report.corpus,
                    "words": sum(len(c.split()) for c in said.values()) / len(said)}
    return found


def references() -> dict[str, float]:
    """One reference of each test picture (its first) read as the rows' captions are (against the other four):
    coverage and CHAIR where rlcap's metrics hold them, words, the template share; what the captions the policy
    learned from name."""
    from rlcap.metrics import METRIC_NAMES, score_captions

    refs = refs_of_test()
    metrics = ["Template"] + [m for m in HALLUCINATION if m in METRIC_NAMES]
    report = score_captions({i: r[1:] for i, r in refs.items()}, {i: r[:1] for i, r in refs.items()}, metrics,
                            objects=objects_of_test())
    return {**report.corpus, "words": sum(len(r[0].split()) for r in refs.values()) / len(refs)}


def reference_line(ref: dict[str, float]) -> str:
    return ("- One reference of each test picture (its first), read as a row's captions are: "
            + ", ".join(f"{m} {ref[m]:.3f}" for m in (*HALLUCINATION, "Template") if m in ref)
            + f", {ref['words']:.1f} words: what the captions the policy learns from cover.")


def figure(metric: str, value: float) -> str:
    """A figure as the tables print it: CHAIR at 4 decimals (at 1,000 test pictures one hallucinated mention of
    about 1,800 is 0.0006), the rest at 3."""
    return f"{value:.4f}" if metric.startswith("CHAIR") else f"{value:.3f}"


def table(found: dict[str, dict[str, float]]) -> list[str]:
    first = next(iter(found.values()))
    columns = ["QA-acc", *[f"QA-acc {j}" for j in JUDGES if f"QA-acc {j}" in first],
               *[m for m in HALLUCINATION if m in first], "CIDEr", "SPICE", "words", "Template", "Div-2"]
    lines = ["| row | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {n} | " + " | ".join(figure(c, f[c]) for c in columns) + " |" for n, f in found.items()]
    return lines


def goals(f: dict[str, dict[str, float]], qs: QuestionSet) -> list[str]:
    """The issue's goals, each read from the figures (those of rows not run left out, said so); then the same from
    the captioner that sees where its grid cells lie (BOXED), where its rows were run."""
    boxed_qa, grpo_qa = (f"{r}{qs.suffix}" for r in (BOXED_QA, BOXED_GRPO[1]))  # the set's QA rows from xe_box
    main = qs.suffix == ""  # the seeds, the mask and the summed rows from xe_box are the main set's alone
    # the QA row's variants, read against its goals: its seeds, the mask, and the utility under GRPO ([Xing26]'s
    # algorithm; the goals name SCST)
    sampled = [f"{boxed_qa}{SAMPLED}", f"{grpo_qa}{SAMPLED}"]  # (the joined set's)
    abstained = [f"{boxed_qa}{ABSTAINED}{SAMPLED}", f"{grpo_qa}{ABSTAINED}{SAMPLED}",
                 f"{boxed_qa}{ABSTAINED}{SAMPLED}{SEED2}", f"{boxed_qa}{EVERY_ABSTAINED}{SAMPLED}",
                 f"{boxed_qa}{EVERY_ABSTAINED}{REPEATED}{SAMPLED}", f"{boxed_qa}{MAIN_EVERY_ABSTAINED}{SAMPLED}",
                 f"{boxed_qa}{PAIR_EVERY_ABSTAINED}{SAMPLED}", f"{boxed_qa}{MAIN_EVERY_ABSTAINED}{SAMPLED}{LONG}",
                 f"{boxed_qa}{MAIN_EVERY_ABSTAINED}{SAMPLED}{BF16_READER}"]
    boxed_variants = [*BOXED_SEEDS, BOXED_MASK, grpo_qa] if main else [grpo_qa, *sampled, *abstained]
    boxed_summed = list(BOXED_SUMMED) if main else []
    boxed = BOXED_BASE in f and any(n in f for n in (boxed_qa, *boxed_variants, *boxed_summed))
    lines = []
    if BASE in f or not boxed:
        lines = pair_goals(f, BASE, f"scst_qa{qs.suffix}", [f"{r}{qs.suffix}" for r in qs.variants],
                           [f"{r}{qs.suffix}" for r in qs.summed], [f"{r}{qs.suffix}" for r in qs.seeds])
    if boxed:
        lines += ["", "The same goals from `xe_box` (model.grid_boxes), against its own CIDEr-D SCST (`scst_box`):", ""]
        lines += pair_goals(f, BOXED_BASE, boxed_qa, boxed_variants, boxed_summed, list(BOXED_SEEDS))
        for grpo in (grpo_qa, sampled[1], abstained[1]):
            if all(n in f for n in (BOXED_GRPO[0], grpo)):
                lines += row_goal_lines(grpo, f[grpo], f[BOXED_GRPO[0]], "CIDEr-D GRPO")
    return lines


def pair_goals(f: dict[str, dict[str, float]], base_name: str, qa_name: str, variant_names: list[str],
               summed_names: list[str], seed_names: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The goals of the QA row ``qa_name`` and its variants and summed rows against CIDEr-D SCST ``base_name``;
    where some of ``seed_names`` (the QA row again with other seeds, among the variants) were run, the same read
    from the mean of the QA row's runs. Where the QA row was not run (``--rows``), its variants are read alone."""
    variants = {n: f[n] for n in variant_names if n in f}
    if qa_name not in f and not variants and not any(n in f for n in summed_names):
        return ["- No QA-utility row was run: no goal is read."]
    qa, base = f.get(qa_name), f[base_name]
    seeds = {n: row for n, row in variants.items() if n in seed_names} if qa else {}
    label = "QA-utility SCST" if qa_name.startswith("scst_qa") else qa_name
    ran = {label: qa, **seeds} if qa else {}
    lines = [line for n, row in ran.items() for line in row_goal_lines(n, row, base)]
    if qa is None:
        lines.append(f"- The QA row {qa_name} was not run: its variants are read alone.")
    if seeds:  # the mean of the QA row's runs, after its last seed and before the other variants
        lines.append(seeds_line([qa, *seeds.values()], base))
    lines += [line for n, row in variants.items() if n not in seeds for line in row_goal_lines(n, row, base)]
    summed = {n: f[n] for n in summed_names if n in f}
    if summed_names and not summed:
        lines.append(f"- No summed reward ({', '.join(summed_names)}) was run: its goals (95% of CIDEr-D SCST's "
                     "CIDEr-D, half of the QA gain) are not read.")
    for n, row in summed.items():
        kept = (f"{(row['QA-acc'] - base['QA-acc']) / max(qa['QA-acc'] - base['QA-acc'], 1e-9):.0%} of the QA gain"
                if qa else "a share of the QA gain not read, no QA row run")
        lines.append(f"- The summed reward {n} keeps {row['CIDEr'] / base['CIDEr']:.1%} of CIDEr-D SCST's CIDEr-D "
                     f"(goal: at least 95%) and {kept} (goal: at least half).")
    lines.append(f"- Template share: CIDEr-D SCST {base['Template']:.3f}"
                 + (f", QA-utility SCST {qa['Template']:.3f}" if qa else "")
                 + "".join(f", {n} {row['Template']:.3f}" for n, row in {**variants, **summed}.items())
                 + " (goal: the QA-utility and summed rows below CIDEr-D SCST's).")
    return lines


ROW_GOALS = (("Coverage", "higher"), ("CHAIR_i", "no higher"))  # a QA-utility row's goals beside its QA-acc


def row_goal_lines(name: str, row: dict[str, float], base: dict[str, float], against: str = "CIDEr-D SCST"
                   ) -> list[str]:
    """The QA-utility row ``name``'s goals against ``base``, the row ``against`` names (CIDEr-D SCST; those base has
    a figure for)."""
    each = [j for j in JUDGES if f"QA-acc {j}" in row and f"QA-acc {j}" in base]
    apart = "; " + ", ".join(f"{j} {row[f'QA-acc {j}'] / base[f'QA-acc {j}'] - 1:+.1%}" for j in each) if each else ""
    mean = " (the judges' mean)" if each else ""
    return [f"- {name} against {against}: held-out QA-acc{mean} {row['QA-acc']:.3f} "
            f"against {base['QA-acc']:.3f} ({row['QA-acc'] / base['QA-acc'] - 1:+.1%} relative{apart}; goal: at "
            "least +10%).",
            *(f"- {m}: {name} {figure(m, row[m])} against {against} {figure(m, base[m])} (goal: {goal})."
              for m, goal in ROW_GOALS if m in base)]


def seeds_line(runs: list[dict[str, float]], base: dict[str, float]) -> str:
    """The QA row's goals read from the mean of its ``runs`` (one seed each) against CIDEr-D SCST's one run."""
    def mean(m):
        return sum(r[m] for r in runs) / len(runs)

    gains = [r["QA-acc"] / base["QA-acc"] - 1 for r in runs]
    line = (f"- QA-utility SCST over its {len(runs)} runs (seeds): mean held-out QA-acc {mean('QA-acc'):.3f} "
            f"({mean('QA-acc') / base['QA-acc'] - 1:+.1%} relative; the runs {min(gains):+.1%} to {max(gains):+.1%}; "
            "goal: at least +10%)")
    line += "".join(f"; mean {m} {figure(m, mean(m))} against {figure(m, base[m])} (goal: {goal})"
                    for m, goal in ROW_GOALS if m in base)
    return line + "."


def _by_reader(reached: dict[str, dict[str, float]], probe: str) -> str:
    """``probe``'s QA-acc from each reader read (the abstaining one with its option offered)."""
    return ", ".join(f"{r[probe]:.3f} ({name} reader{', the option offered' if name == 'abstain' else ''})"
                     for name, r in reached.items() if isinstance(r, dict))


def reach_lines(reached: dict[str, dict[str, float]], found: dict[str, dict[str, float]]) -> list[str]:
    lines = ["- From the complete description of each test picture (`complete_description`: every answer stated, "
             f"in the references' usual words), the most a caption can reach: QA-acc {_by_reader(reached, 'complete')}"
             ".",
             "- From all of each test picture's references joined into one caption (`join`; the reader lines above: "
             f"from the first alone): QA-acc {_by_reader(reached, 'joined')}."]
    if "xe" in found:
        lines.append(f"- From XE's captions with \"{HEDGE.strip()}\" appended to every one: QA-acc "
                     f"{_by_reader(reached, 'xe_hedged')}; XE's own captions: {found['xe']['QA-acc']:.3f} "
                     "(the judges' mean).")
    if "base_counted_cider" in reached:
        base = counted_base(list(found))
        own = found[base]["QA-acc"]
        judged = [reached[j]["base_counted"] for j in JUDGES if j in reached]
        judges = "the judges'" if len(judged) > 1 else "the judge's"
        lines.append(f"- From CIDEr-D SCST's captions ({base}) with the picture's true count appended as the QA rows "
                     f"word it (\"with two other shapes\", `counted()`): QA-acc {_by_reader(reached, 'base_counted')}"
                     f" ({judges} {sum(judged) / len(judged) / own - 1:+.1%} relative over its own "
                     f"{own:.3f}), CIDEr-D {reached['base_counted_cider']:.3f} against its own "
                     f"{found[base]['CIDEr']:.3f}: what the summed reward could reach by keeping CIDEr-D's template "
                     "and adding the count, and the most the count phrase adds to that template.")
    return lines


def single_lines(cards: dict[str, dict], reached: dict[str, dict[str, float]]) -> list[str]:
    """The main set's readers (trained on single references, ``--joined 0``) read as the joined set's are: from a
    reference (their cards), from all references joined, from the complete description."""
    return ["- The main set's readers, trained on single references (`--joined 0`), on the same test pictures: QA-acc "
            + ", ".join(f"{cards[name]['test']['from_reference']:.3f} from a reference, {reached[name]['joined']:.3f} "
                        f"from all references joined and {reached[name]['complete']:.3f} from the complete "
                        f"description ({name} reader)" for name in READERS) + "."]


COUNT_PHRASE = re.compile(r"\b(another|one other|two other|three other|some other) (?:shape|object)s?\b")
NUMBERS = {"another": 1, "one other": 1, "two other": 2, "three other": 3}  # ("some other": no number)
UNFINISHED = {"a", "an", "the", "on", "of", "with", "and", "to", "in"}  # a caption that stops on one of these
COUNTED = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4}  # a mention's number word


@functools.cache
def _words() -> tuple:
    """The shapes' object vocabulary, their adjectives (colour, size, texture words) and the relation phrases
    (longest first) with their relations."""
    from rlcap.data.synthetic.captions import COLOUR_WORDS, RELATION_WORDS, SIZE_WORDS, TEXTURE_WORDS
    from rlcap.data.synthetic.objects import shapes_vocabulary

    adjectives = {w for words in (*COLOUR_WORDS.values(), *SIZE_WORDS.values(), *TEXTURE_WORDS.values())
                  for phrase in words for w in phrase.split()}
    relations = sorted(((w, r) for r, ws in RELATION_WORDS.items() for w in ws), key=lambda p: -len(p[0]))
    return shapes_vocabulary(), adjectives, relations


def read_caption(caption: str, n_objects: int, held: Counter | None = None) -> dict:
    """What one test caption of a picture of ``n_objects`` shapes says: ``count`` None (no count phrase such as
    "with two other shapes"), "unread" ("some other shapes") or whether the count it states (the shapes named
    before the phrase, each with its number word, plus the phrase's number) is ``n_objects``; the first relation
    it uses (by the relation words of docs/SHAPES.md) or None; whether it ends unfinished (on "a", "on",
    "with"...); ``twice``: None when it names no (colour, kind) twice ("a brown heart below a brown heart"),
    else whether the picture holds fewer than two such shapes (``held``: the picture's (colour, kind) counts;
    unread, None, without them)."""
    from rlcap.metrics.hallucination import find_objects

    vocabulary, _, relations = _words()
    tokens = caption.split()
    count: bool | str | None = None
    phrase = COUNT_PHRASE.search(caption)
    if phrase and phrase.group(1) not in NUMBERS:
        count = "unread"
    elif phrase:
        count = _named(caption[:phrase.start()].split()) + NUMBERS[phrase.group(1)] == n_objects
    relation = next((r for w, r in relations if f" {w} " in f" {caption} "), None)
    named = Counter((m.attribute, m.object) for m in find_objects(tokens, vocabulary) if m.attribute)
    repeated = [pair for pair, k in named.items() if k > 1]
    twice = None if not repeated or held is None else any(held[pair] < 2 for pair in repeated)
    return {"count": count, "relation": relation, "unfinished": bool(tokens) and tokens[-1] in UNFINISHED,
            "twice": twice}


def _named(tokens: list[str]) -> int:
    """How many shapes ``tokens`` name, each mention with its number word ("two red circles and a star": 3)."""
    from rlcap.metrics.hallucination import find_objects

    vocabulary, adjectives, _ = _words()
    return sum(_number(tokens, m.start, adjectives) for m in find_objects(tokens, vocabulary))


def _number(tokens: list[str], start: int, adjectives: set[str]) -> int:
    """How many shapes the mention at ``start`` names: the number word before its adjectives ("two red circles":
    2), else 1."""
    j = start - 1
    while j >= 0 and tokens[j] in adjectives:
        j -= 1
    return COUNTED.get(tokens[j], 1) if j >= 0 else 1


def phrases(names: list[str], out: str, runs: str | None = None) -> dict[str, dict]:
    """Each row's test captions (in ``out``) read against the scenes (:func:`read_caption`): the share with a count
    phrase and, of those with a number, the share whose count is right; the most frequent relation and the share of
    captions that use it; the share cut at the length cap (its run's, in ``runs``, default ``out``); the share that
    ends unfinished."""
    from rlcap.bench.registry import BENCH_ROWS

    scenes = scenes_of_test()
    found = {}
    for n in names:
        said = captions_of(n, out)
        run = REPO / (runs or out) / BENCH_ROWS[n].stages[-1].name  # (scst_end: the scst run's folder)
        cap = json.loads((run / "config.json").read_text())["decode"]["max_len"]
        read = [read_caption(c, len(scenes[i].objects), Counter((o.colour, o.shape) for o in scenes[i].objects))
                for i, c in said.items()]
        counted = [r["count"] for r in read if isinstance(r["count"], bool)]
        used: dict[str, int] = {}
        for r in read:
            if r["relation"]:
                used[r["relation"]] = used.get(r["relation"], 0) + 1
        top = max(used, key=used.get) if used else "none"
        found[n] = {"count_phrase": sum(r["count"] is not None for r in read) / len(read),
                    "count_right": sum(counted) / len(counted) if counted else float("nan"),
                    "relation": top, "relation_share": used.get(top, 0) / len(read),
                    "at_cap": sum(len(c.split()) >= cap for c in said.values()) / len(said),
                    "unfinished": sum(r["unfinished"] for r in read) / len(read),
                    "twice_one": sum(r["twice"] is True for r in read) / len(read)}
    return found


def coverage_by_kinds(rows: dict[str, dict[str, str]]) -> dict[str, dict]:
    """Where coverage is lost: each row's (name -> id -> caption) coverage on the test pictures holding 1, 2, 3 and
    4 kinds of shape apart (``kinds``), and over the shapes of pictures of two kinds or more whose kind the caption
    leaves unnamed, the share that are small (``missed_small``) beside the small shapes' share of all shapes of
    those pictures (``small``): whether the shapes left out are the ones the features show least."""
    from rlcap.metrics.hallucination import find_objects

    vocabulary = _words()[0]
    scenes, truth = scenes_of_test(), objects_of_test()
    found = {}
    for n, said in rows.items():
        by: dict[int, list[float]] = {}
        missed, shapes = [], []
        for i, caption in said.items():
            kinds = truth.objects[i]
            named = {m.object for m in find_objects(re.findall(r"[a-z]+", caption.lower()), vocabulary)}
            by.setdefault(len(kinds), []).append(len(kinds & named) / len(kinds))
            if len(kinds) > 1:
                shapes += [o.size == "small" for o in scenes[i].objects]
                missed += [o.size == "small" for o in scenes[i].objects if o.shape not in named]
        found[n] = {"kinds": {k: (len(v), sum(v) / len(v)) for k, v in sorted(by.items())},
                    "missed_small": sum(missed) / len(missed) if missed else float("nan"),
                    "small": sum(shapes) / len(shapes) if shapes else float("nan")}
    return found


def coverage_table(found: dict[str, dict]) -> list[str]:
    kinds = sorted({k for f in found.values() for k in f["kinds"]})
    pictures = next(iter(found.values()))["kinds"]
    lines = ["| row | " + " | ".join(f"{k} kind{'s' * (k > 1)} ({pictures[k][0]} pictures)" for k in kinds)
             + " | small, of the shapes left unnamed |", "|---|" + "---:|" * (len(kinds) + 1)]
    return lines + [f"| {n} | " + " | ".join(f"{f['kinds'][k][1]:.3f}" for k in kinds)
                    + f" | {_share(f['missed_small'])} |" for n, f in found.items()]


def _share(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"  # (nan: no caption to count)


def phrase_table(found: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| row | count phrase | its count right | most frequent relation | its share | at the length cap | "
             "ends unfinished | one shape named twice |", "|---|---:|---:|---|---:|---:|---:|---:|"]
    return lines + [f"| {n} | {f['count_phrase']:.3f} | {_share(f['count_right'])} | {f['relation']} | "
                    f"{f['relation_share']:.3f} | {f['at_cap']:.3f} | {f['unfinished']:.3f} | {f['twice_one']:.3f} |"
                    for n, f in found.items()]


def kind_table(kinds: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| row | " + " | ".join(KINDS) + " |", "|---|" + "---:|" * len(KINDS)]
    return lines + [f"| {n} | " + " | ".join(f"{k[c]:.3f}" for c in KINDS) + " |" for n, k in kinds.items()]


def heading(args: argparse.Namespace) -> str:
    """The section's title: the question set, the encoder's input side and the budget where not the defaults."""
    return ("## Rewards that read the caption: QA utility beside CIDEr-D on shapes"
            + {"main": "", "every": ", questions about every shape",
               "joined": ", readers trained on joined references"}[args.questions]
            + ("" if args.image_size == 128 else f", the pictures encoded at {args.image_size} px")
            + ("" if args.epochs == EPOCHS else f", {args.epochs} RL epochs"))


def command_line(args: argparse.Namespace) -> str:
    """The make target and the script's command that wrote the section (its rows where given)."""
    make = {"QUESTIONS": args.questions if args.questions != "main" else None,
            "IMAGE_SIZE": args.image_size if args.image_size != 128 else None,
            "EPOCHS": args.epochs if args.epochs != EPOCHS else None}
    script = f"--questions {args.questions}"
    script += "" if args.image_size == 128 else f" --image-size {args.image_size}"
    script += "" if args.epochs == EPOCHS else f" --epochs {args.epochs}"
    script += f" --rows {args.rows}" if args.rows else ""
    return (f"`make bench-rewards{''.join(f' {k}={v}' for k, v in make.items() if v is not None)}` "
            f"(`python benchmarks/bench_rewards.py {script}`)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="RL epochs of every row")
    parser.add_argument("--questions", choices=sorted(SETS), default="main",
                        help="the question set the QA rows are rewarded and judged with: main (the two main "
                             "shapes, questions.json), every (every shape, questions_every.json) or joined (the "
                             "main questions, readers trained on joined references too; 224 px alone)")
    parser.add_argument("--rows", help="the rows run (comma-separated; default: the set's; stages already trained "
                                       "in runs/bench_rewards, or runs/bench_rewards_224 at 224 px, with the same "
                                       "settings are reused)")
    parser.add_argument("--image-size", type=int, choices=SIZES, default=128,
                        help="the encoder's input side: 128 (a 4x4 grid, every row) or 224 (7x7: the rows from xe_box "
                             "alone, in runs/bench_rewards_224 and a section of their own)")
    args = parser.parse_args(argv)
    qs = at_budget(at_size(SETS[args.questions], args.image_size), args.epochs)
    rows = args.rows or qs.rows
    import torch
    import transformers

    subprocess.run([sys.executable, "-m", "rlcap.cli", "data", "shapes", "--out", str(DATA)], check=True, cwd=REPO)
    cards = readers(qs)
    command, seconds = run_bench("shapes", rows, qs.out, rl=[f"rl.epochs={args.epochs}"], image_size=args.image_size)
    names = rows.split(",")
    found = scores(names, qs)
    reached, said = reach(names, qs), phrases(names, qs.out)
    kinds = {j: by_kind(names, qs, j) for j in JUDGES}
    rewarded = by_kind(names, qs, "reward")
    read_by_kind = reach_by_kind(qs)
    cover = coverage_by_kinds({**{n: captions_of(n, qs.out) for n in names},
                               "a reference": {i: r[0] for i, r in refs_of_test().items()}})
    single = single_lines(readers(SETS["main"]), reach([], SETS["main"])) if qs.joined else []
    card_lines = [card_line(name, c) for name, c in cards.items()]
    body = [heading(args), "", f"Command: {command_line(args)}. Questions: `{qs.file}`. Machine: "
            f"{machine(torch=torch.__version__, transformers=transformers.__version__)}.", "",
            f"`{' '.join(command)}`, {seconds / 60:.0f} min. Every RL row: {args.epochs} epochs of 50 images x 5 "
            "samples from the same XE checkpoint, judged at the end of its budget (its last checkpoint; `scst` alone: "
            "the best epoch by validation CIDEr-D, as the other tables); test captions by beam 3. QA-acc is the "
            "mean of two held-out readers' (`judge` and `judge2`: one recipe, seeds 1 and 2), each one's beside it, "
            "never the reward reader's (docs/RL.md, \"QA utility\").", "",
            *card_lines, *reach_lines(reached, found), *single, reference_line(references()), "", *table(found), "",
            *[line for j, k in kinds.items() for line in
              (f"The held-out {j}'s QA-acc on each kind of question alone:", "", *kind_table(k), "")],
            "The same read by the reward reader (the one without the abstain option, for every row): where it reads a "
            "row's answers much better than the judge does, the row's captions took a form that one reader reads and "
            "the other misreads (docs/RL.md, \"Where the goals stand\"):", "", *kind_table(rewarded), "",
            "What each reader reads from captions written to probe it (QA-acc; the abstaining reader with its option "
            "offered): from the complete description, on each kind of question alone; and on the count question of "
            "the test pictures of three or four shapes, from their two main shapes alone (`main_pair`: \"a purple "
            "circle next to a pink star\"), with the count phrase the QA rows learned (`counted()`: \"... with "
            "another shape\") and from the complete description (\"three shapes: ...\"):", "",
            *reach_kind_table(read_by_kind), "",
            "What the captions say (`phrases()`): the share with a count phrase (\"with two other shapes\") and of "
            "those the share whose count (the shapes named before it plus the phrase's number) is the picture's; the "
            "most frequent relation, by its usual words, and the share of captions using it; the share cut off at the "
            "length cap; the share that ends on \"a\", \"on\", \"with\"... (stopped mid-phrase by its own end of "
            "sentence); the share that names one (colour, kind) twice where the picture holds only one such shape "
            "(\"a brown heart below a brown heart\": a hallucination CHAIR does not count, as the heart is there):",
            "", *phrase_table(said), "",
            "Coverage on the test pictures holding one to four kinds of shape apart (a reference: each picture's "
            "first, as in the reference line), and of the shapes a caption leaves unnamed on pictures of two kinds or "
            f"more, the share that are small (small shapes are {cover['a reference']['small']:.0%} of those pictures' "
            "shapes):", "", *coverage_table(cover), "",
            *goals(found, qs), "", "The first test images' captions (beam 3):", "",
            *captions_table(qs.out, names)]
    replace_section(qs.section, "\n".join(body))
    print("\n".join(body))
    print(json.dumps({"scores": found, "readers": cards, "reach": reached, "reach_by_kind": read_by_kind,
                      "by_kind": kinds, "by_kind_reward": rewarded, "phrases": said, "coverage_by_kinds": cover}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
