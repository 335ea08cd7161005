"""How long one call of the ``qa_utility`` reward takes with its frozen reader in fp32 and in bf16
(``reward.qa_precision``), and how far the bf16 reader's rewards and the advantages SCST takes from them lie from
fp32's.

    python benchmarks/bench_qa_reader.py [--reader DIR] [--qa FILE] [--images 50] [--repeats 3] [--threads 2]

One call is what a step of the shapes bench's QA rows scores (``make bench-rewards QUESTIONS=joined
IMAGE_SIZE=224``): 50 training pictures x 5 captions, each asked its picture's questions under 4 orders of their
options, the answer read at temperature 0.6 with the abstain option offered. The captions are each picture's 5
references (all distinct: an RL step's samples repeat, and a repeated prompt is read once, so a step reads fewer).
By default the reader is ``data/shapes/readers/joined/every_abstain`` and the questions
``data/shapes/questions_main_every.json``, the count-twice row's, both written by ``make bench-rewards
QUESTIONS=joined``. Timed: the median of ``--repeats`` calls of :func:`rlcap.models.qa_scoring.qa_scores` after
one warm-up call. Compared with fp32: each caption's reward, and its leave-one-out advantage among its picture's
5 captions (what SCST with ``scst.baseline: leave_one_out`` follows; :mod:`rlcap.rl.baselines`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchdoc import DOC, REPO, load_note, machine, median_seconds, replace_section

SECTION = "qa-reader-precision"
READER = REPO / "data" / "shapes" / "readers" / "joined" / "every_abstain"
QA = REPO / "data" / "shapes" / "questions_main_every.json"
DATASET = REPO / "data" / "shapes" / "dataset_shapes.json"
SAMPLES = 5  # captions a picture, as the bench's rows sample
SHUFFLES, TEMPERATURE = 4, 0.6  # the rows' reward.qa_shuffles (default) and reward.qa_temperature


def references(dataset: Path, images: int) -> tuple[list[str], list[str]]:
    """The first ``images`` training pictures' first SAMPLES references and, for each, its picture's id."""
    found = json.loads(dataset.read_text())["images"]
    train = [im for im in found if im["split"] == "train" and len(im["sentences"]) >= SAMPLES][:images]
    captions = [s["raw"] for im in train for s in im["sentences"][:SAMPLES]]
    return captions, [str(im["imgid"]) for im in train for _ in range(SAMPLES)]


def agreement(base: Any, other: Any, samples: int) -> dict[str, float]:
    """How far ``other``'s rewards (N,) lie from ``base``'s, and their leave-one-out advantages among each
    picture's ``samples`` captions: the largest differences, and the advantages' spread under ``base``."""
    from rlcap.rl.baselines import leave_one_out_baseline

    adv_base = base - leave_one_out_baseline(base, samples)
    adv_other = other - leave_one_out_baseline(other, samples)
    return {"reward_max": (base - other).abs().max().item(), "reward_mean": (base - other).abs().mean().item(),
            "advantage_max": (adv_base - adv_other).abs().max().item(), "advantage_std": adv_base.std().item(),
            "same_sign": ((adv_base > 0) == (adv_other > 0)).float().mean().item()}


def measure(reader_dir: Path, qa_file: Path, dataset: Path, images: int, repeats: int) -> dict[str, Any]:
    from rlcap.data.qa import load_qa
    from rlcap.models.hf.qa_reader import QAReader
    from rlcap.models.qa_scoring import ask, qa_scores

    qa = load_qa(qa_file)
    captions, ids = references(dataset, images)
    got: dict[str, Any] = {"captions": len(captions)}
    for precision in ("fp32", "bf16"):
        reader = QAReader.load(reader_dir, precision=precision)

        def call() -> None:  # each timed call keeps its rewards: the last one's are compared, no extra call
            got[f"{precision}_rewards"] = qa_scores(reader, qa, captions, ids, SHUFFLES, "probability", 0,
                                                    TEMPERATURE, True)[0].float().cpu()

        got[precision] = median_seconds(call, repeats)
    asked = ask(reader, qa, captions, ids, SHUFFLES, 0, True)
    got["prompts"] = len(set(asked.prompts))
    got["tokens"] = sum(len(reader.tokenizer.encode(p, add_special_tokens=False)) for p in set(asked.prompts))
    got["agreement"] = agreement(got["fp32_rewards"], got["bf16_rewards"], SAMPLES)
    return got


def report(got: dict[str, Any], args: argparse.Namespace, load: tuple[float, float]) -> str:
    import torch
    import transformers

    a = got["agreement"]
    rel = lambda p: os.path.relpath(p, REPO)  # noqa: E731
    return "\n".join([
        "## The QA reader in bf16 beside an fp32 policy (`reward.qa_precision`)", "",
        f"`python benchmarks/bench_qa_reader.py --reader {rel(args.reader)} --qa {rel(args.qa)} --images "
        f"{args.images} --repeats {args.repeats} --threads {args.threads}`: "
        f"{machine(torch=torch.__version__, transformers=transformers.__version__)}. "
        f"{load_note(load, args.threads)}", "",
        f"One `qa_utility` call as one step of the shapes QA rows scores: {got['captions']} captions (each of "
        f"{args.images} training pictures' first {SAMPLES} references), {got['prompts']:,} distinct prompts "
        f"({got['tokens']:,} tokens; {SHUFFLES} orders a question, the abstain option offered, temperature "
        f"{TEMPERATURE}); the median of {args.repeats} calls.", "",
        "| reader | seconds a call | prompts a second |", "|---|---:|---:|",
        *(f"| {p} | {got[p]:.2f} | {got['prompts'] / got[p]:,.0f} |" for p in ("fp32", "bf16")), "",
        f"bf16 takes {got['bf16'] / got['fp32']:.2f}x fp32's time ({got['fp32'] / got['bf16']:.2f}x as fast). "
        f"Its rewards lie within {a['reward_max']:.4f} of fp32's (mean {a['reward_mean']:.5f}); the leave-one-out "
        f"advantages among a picture's {SAMPLES} captions within {a['advantage_max']:.4f} (their spread under fp32: "
        f"standard deviation {a['advantage_std']:.3f}), with the same sign for {a['same_sign']:.1%} of the "
        f"captions.",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", type=Path, default=READER, help="the reader's folder (default: the count-twice row's)")
    p.add_argument("--qa", type=Path, default=QA, help="the questions (default: questions_main_every.json)")
    p.add_argument("--dataset", type=Path, default=DATASET, help="the shapes dataset file the captions come from")
    p.add_argument("--images", type=int, default=50, help="pictures a call (default 50, a bench row's batch)")
    p.add_argument("--repeats", type=int, default=3, help="calls timed for each median (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    args = p.parse_args(argv)
    for path, what in ((args.reader / "config.json", "reader"), (args.qa, "questions"), (args.dataset, "dataset")):
        if not path.is_file():
            raise SystemExit(f"{path}: no {what} there; `make bench-rewards QUESTIONS=joined IMAGE_SIZE=224` writes "
                             "the shapes data, its questions and readers (or give --reader, --qa, --dataset)")
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    load = [os.getloadavg()[0]]
    got = measure(args.reader, args.qa, args.dataset, args.images, args.repeats)
    load.append(os.getloadavg()[0])
    body = report(got, args, (load[0], load[1]))
    replace_section(SECTION, body, args.out)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
