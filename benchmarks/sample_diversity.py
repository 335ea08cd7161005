"""Random samples' CIDEr-D and diversity at given temperatures, for trained checkpoints on one split.

The ``rs`` columns of the method tables (:mod:`rlcap.bench.rows`), on the first ``--images``
images of a split and at each ``--temperatures`` value: 5 samples per image, seed 0, CIDEr-D
averaged over the 5 (document frequencies from those images' references), Div-1, Div-2 and
mBLEU-4 of the 5. docs/CONCEPTS.md ("SLL-SLE's diversity where the RL methods sample") was measured
with it. Prints a Markdown table.

    python benchmarks/sample_diversity.py --split val --images 1000 --temperatures 0.5 RUN/best ...
"""

from __future__ import annotations

import argparse
import sys

DATASET, FEATURES = "data/coco-concepts/dataset_concepts.json", "data/coco-concepts/feats.h5"


def scores(checkpoint: str, split_name: str, images: int, temperature: float, dataset: str, features: str) -> dict:
    from rlcap.bench.rows import DIVERSITY, caption_sets
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.metrics import score_captions
    from rlcap.eval.open_run import open_run

    run = open_run(checkpoint, device="cpu")
    model, vocab = run.policy, run.vocab
    split = load_data(DataConfig(dataset=dataset, features=features), (split_name,), vocab=vocab).splits[split_name]
    captions = caption_sets(model, split, vocab, "rs", 5, 16, seed=0, temperature=temperature, limit=images)
    refs = {i: r for i, r in zip(split.ids, split.refs) if i in captions}
    cider = [score_captions(refs, {i: [c[k]] for i, c in captions.items()}, ["CIDEr"]).corpus["CIDEr"] for k in range(5)]
    return {"CIDEr": sum(cider) / 5, **score_captions(refs, captions, DIVERSITY).corpus}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--split", default="test")
    parser.add_argument("--images", type=int, default=1000, help="the first N images of the split (0: all)")
    parser.add_argument("--temperatures", default="1,0.5")
    parser.add_argument("--dataset", default=DATASET)
    parser.add_argument("--features", default=FEATURES)
    args = parser.parse_args(argv)
    print("| checkpoint | temperature | CIDEr-D | Div-1 | Div-2 | mBLEU-4 |\n|---|---:|---:|---:|---:|---:|")
    for checkpoint in args.checkpoints:
        for t in (float(x) for x in args.temperatures.split(",")):
            s = scores(checkpoint, args.split, args.images, t, args.dataset, args.features)
            print(f"| {checkpoint} | {t:g} | {s['CIDEr']:.3f} | {s['Div-1']:.3f} | {s['Div-2']:.3f} | {s['mBLEU-4']:.3f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
