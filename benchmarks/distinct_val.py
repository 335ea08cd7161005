"""[Chaffin24]'s retrieval and quality columns for given checkpoints on one split: how docs/DISTINCT.md
compares options on the validation split before a recipe changes.

    python benchmarks/distinct_val.py --bench runs/distinct_shapes --split val \\
        --run tf=runs/distinct_shapes/xe/best --run mined=runs/exp/mined5/last

``--bench`` is a ``rlcap bench`` folder of the benchmark: its ``retrieval`` and ``judge`` stages are
the two retrievers. Each run's beam-search captions of the whole split (beam 3, the table's) are scored with
:func:`rlcap.bench.distinct.distinct_row` and CIDEr-D against the split's references; prints a
Markdown table (R@1 both ways under both retrievers, Self-BLEU, CIDEr-D, words) and a last line of JSON.
``--beam N`` and ``--no-repeat-ngram N`` decode otherwise (docs/DISTINCT.md compares [Chaffin24]'s released
code's decoding, beam 5 with trigram blocking, this way).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BEAM, MAX_LEN = 3, 16


def score_runs(bench: Path, runs: dict[str, Path], split_name: str, beam: int = BEAM,
               no_repeat_ngram: int = 0) -> dict[str, dict[str, float]]:
    import torch

    from rlcap.bench.distinct import distinct_row, load_judges
    from rlcap.data.loader import load_data
    from rlcap.metrics import score_captions
    from rlcap.methods import load_run_config
    from rlcap.decoding.options import Decoding
    from rlcap.decoding.split import decode_split
    from rlcap.eval.open_run import open_run

    rows: dict[str, dict[str, float]] = {}
    split = judges = None
    for name, path in runs.items():
        run = open_run(path, device="cpu")
        model, vocab = run.policy, run.vocab
        if split is None:  # every run of a benchmark shares the dataset and features
            cfg = json.loads((path.parent / "config.json").read_text())
            data = load_run_config(None, [f"data.{k}={cfg['data'][k]}" for k in ("dataset", "features")]).data
            split = load_data(data, (split_name,), vocab=vocab).splits[split_name]
            judges = load_judges({j: bench / j / "best" for j in ("retrieval", "judge")}, split)
        with torch.no_grad():
            decoding = Decoding.search(run.device, beam, MAX_LEN, no_repeat_ngram=no_repeat_ngram)
            predictions = decode_split(model, split, vocab, decoding)
        row = distinct_row(predictions, split, judges)
        refs, cands = dict(zip(split.ids, split.refs)), {i: [predictions[i]] for i in split.ids}
        row["CIDEr-D"] = score_captions(refs, cands, metrics=("CIDEr",)).corpus["CIDEr"]
        row["words"] = sum(len(predictions[i].split()) for i in split.ids) / len(split.ids)
        rows[name] = row
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, required=True, help="the rlcap bench folder (its retrieval and judge)")
    parser.add_argument("--run", action="append", required=True, metavar="NAME=CHECKPOINT")
    parser.add_argument("--split", default="val")
    parser.add_argument("--beam", type=int, default=BEAM, help="beam size (the table's: 3)")
    parser.add_argument("--no-repeat-ngram", type=int, default=0, help="beam search never repeats an n-gram (0: off)")
    args = parser.parse_args(argv)
    runs = {n: Path(p) for n, _, p in (r.partition("=") for r in args.run)}
    rows = score_runs(args.bench, runs, args.split, args.beam, args.no_repeat_ngram)
    cols = ["T2I R@1", "I2T R@1", "judge T2I R@1", "judge I2T R@1", "Self-BLEU", "CIDEr-D", "words"]
    print("| run | " + " | ".join(cols) + " |\n|---|" + "---:|" * len(cols))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.3f}" if c == "CIDEr-D" else f"{row[c]:.1f}" for c in cols) + " |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
