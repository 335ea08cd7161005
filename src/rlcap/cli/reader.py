"""``rlcap data reader``: train a text-only QA reader offline on a dataset's training references and their
pictures' questions, and say how well it reads on the test pictures, which it never trained on (from a reference
caption, from an empty one, and chance). What the ``qa_utility`` reward and QA-acc read ([Xing26]); train two, of
different seeds and sizes: one the reward reads, the other held out to judge."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlcap.cli.options import float_range, int_range


def add_parser(datasets: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from rlcap.models.hf.build_reader import ABSTAIN_STEPS, JOINED, SIZES, STEPS

    p = datasets.add_parser(
        "reader", help="train a text-only QA reader on a dataset's references and questions (qa_utility, QA-acc)",
        description="Train a small causal LM (a transformers folder with its tokenizer and chat template) to "
                    "answer the training pictures' multiple-choice questions from their reference captions; then "
                    "print its accuracy on the test pictures from a reference caption and from an empty one, "
                    "also written to reader_card.json in the folder.")
    p.add_argument("--dataset", required=True, type=Path,
                   help="a Karpathy split file (a shapes folder's dataset_shapes.json), or the shapes folder")
    p.add_argument("--qa", type=Path, help="the questions (default: questions.json beside the dataset)")
    p.add_argument("--out", required=True, type=Path, help="the reader's folder")
    p.add_argument("--size", choices=sorted(SIZES), default="small", help="small: 128 wide, 3 layers; base: 128, 4")
    p.add_argument("--seed", type=int_range(0), default=0, help="weights and the examples' draws")
    p.add_argument("--steps", type=int_range(1),
                   help=f"optimizer steps (default {STEPS}, {ABSTAIN_STEPS} with --abstain: a reader taught to "
                        "abstain leaves chance later, and at 5000 steps read the count of a shapes picture of three or "
                        "four shapes from its complete description at 0.50, at 10000 at 1.00; docs/RL.md)")
    p.add_argument("--batch-size", type=int_range(1), default=16, help="examples a step")
    p.add_argument("--joined", type=float_range(0.0, 1.0, include_high=True), default=JOINED,
                   help="the share of the non-drill examples whose caption is two or three of the picture's "
                        f"references joined, so that the reader reads a caption that states more than one "
                        f"reference (default {JOINED}; 0: single references, the readers before 12-06)")
    p.add_argument("--abstain", type=float_range(0.0, 1.0, include_high=True), default=0.0,
                   help="the share of the non-drill examples whose caption does not state the answer (a shapes "
                        "reference of the scene with the asked objects taken out) and whose answer is the option "
                        "'Can not answer based on the caption', offered in every prompt: a reader for "
                        "reward.qa_abstain (default 0: no such option)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from rlcap.data.qa import load_qa
    from rlcap.data.readers import read_karpathy
    from rlcap.eval.qa_accuracy import reader_card
    from rlcap.files import write_json
    from rlcap.models.hf.build_reader import default_steps, train_reader
    from rlcap.models.hf.qa_reader import QAReader

    dataset = args.dataset / "dataset_shapes.json" if args.dataset.is_dir() else args.dataset
    qa_path = args.qa or dataset.parent / "questions.json"
    qa = load_qa(qa_path)
    records = read_karpathy(dataset)
    train = {r.id: r.captions for r in records if r.split == "train"}
    test = {r.id: r.captions for r in records if r.split == "test"}
    if args.steps is None:
        args.steps = default_steps(args.abstain)
    start = time.perf_counter()
    negative, negatives = _negatives(dataset, qa, test) if args.abstain else (None, None)
    train_reader(args.out, train, qa, args.size, args.seed, args.steps, args.batch_size, joined=args.joined,
                 abstain=args.abstain, negative=negative)
    card = {"qa": qa_path.name, "size": args.size, "seed": args.seed, "steps": args.steps,
            "batch_size": args.batch_size, "joined": args.joined, "abstain": args.abstain,
            "train_images": len(train),
            "seconds": round(time.perf_counter() - start, 1),
            "test": reader_card(QAReader.load(args.out), qa, test, negatives)}
    write_json(args.out / "reader_card.json", card)
    print(json.dumps(card, indent=1))
    print(f"wrote the reader to {args.out}")
    return 0


def _negatives(dataset: Path, qa, test: dict[str, list[str]]):
    """The shapes dataset's negative (:func:`rlcap.data.synthetic.questions.scene_negatives`) and, for the reader's
    card, one negative caption for each question of each test image (drawn with a generator of the image's id)."""
    import random

    from rlcap.data.synthetic.questions import scene_negatives
    from rlcap.errors import DataError
    images = json.loads(dataset.read_text(encoding="utf-8")).get("images", [])
    if not all(isinstance(r, dict) and "scene" in r and "imgid" in r for r in images):
        raise DataError(f"{dataset}: --abstain writes its negatives from each image's scene: a shapes dataset "
                        "(rlcap data shapes) has them, this file does not")
    negative = scene_negatives(images)
    negatives = {i: [negative(random.Random(f"abstain-card/{i}/{k}"), i, q) for k, q in enumerate(qa.of(i))]
                 for i in test if qa.of(i)}
    return negative, negatives
