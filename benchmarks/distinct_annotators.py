"""Which of shapes' simulated annotators eq. 2 of [Chaffin24] rewards: docs/notes/2026-11-25-distinct-shapes-runs.md, "Why WTF costs CIDEr-D on shapes".

    python benchmarks/distinct_annotators.py --bench runs/distinct_shapes [--tau 0.01]

On training batches of 50 images (``--batches``), the text pool of WTF-RL's loop (the XE model's
beam and greedy captions) with all five human captions of each image, the image pool of the batch
and its mined neighbours; r_sim (eq. 2, ``bicont``) of each human caption, grouped by the
``annotator`` field of the dataset (docs/SHAPES.md). p_D is left out. Prints a Markdown table and a
last line of JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

THRESHOLD = -0.2  # r_sim above which alpha 0.69 * r_sim + 0.31 * p_D (p_D ~ 0.45) is positive


def annotator_rewards(bench: Path, dataset: Path, features: Path, tau: float, batches: int) -> dict[str, dict[str, float]]:
    import torch

    from rlcap.data.loader import load_data
    from rlcap.decoding import Decoding, beam_search, greedy
    from rlcap.models.retriever import load_retriever
    from rlcap.rewards.image_bank import build_image_bank
    from rlcap.rewards.retrieval import RetrievalReward
    from rlcap.methods import load_run_config
    from rlcap.eval.open_run import open_run

    run = open_run(bench / "xe" / "best", device="cpu")
    model, vocab = run.policy, run.vocab
    model.eval()
    data = load_run_config(None, [f"data.dataset={dataset}", f"data.features={features}"]).data
    train = load_data(data, ("train",), vocab=vocab).splits["train"]
    annotator = {(str(im.get("cocoid", im["imgid"])), s["raw"]): s["annotator"]
                 for im in json.loads(dataset.read_text())["images"] for s in im["sentences"]}
    retriever = bench / "retrieval" / "best"
    reward = RetrievalReward(load_retriever(retriever), build_image_bank(retriever, data, k=10), "bicont", tau=tau,
                             hard_negatives=5)
    values: dict[str, list[float]] = collections.defaultdict(list)
    words: dict[str, list[int]] = collections.defaultdict(list)
    for k, batch in enumerate(train.batches(50, 1, seed=7, epoch=0)):
        if k == batches:
            break
        with torch.no_grad():
            beam = Decoding.on(batch.feats.fc.device, "beam", 16, compile=False, beam_size=3)
            generated = [*beam_search(model, batch.feats, beam).tokens, *greedy(model, batch.feats, 16).tokens]
        human = [(i, c) for i, refs in zip(batch.ids, batch.refs) for c in refs]
        captions = [vocab.decode(row.tolist()) for row in generated] + [c for _, c in human]
        texts = reward.retriever.embed_captions(captions)
        sim = reward.pool_scores(texts, list(batch.ids) * 2 + [i for i, _ in human])[len(generated):]
        for (image_id, caption), value in zip(human, sim.tolist()):
            who = annotator[(image_id, caption)]
            values[who].append(value)
            words[who].append(len(caption.split()))
    return {who: {"captions": len(v), "mean r_sim": sum(v) / len(v),
                  "share above -0.2": sum(x > THRESHOLD for x in v) / len(v),
                  "words": sum(words[who]) / len(words[who])} for who, v in sorted(values.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=Path("runs/distinct_shapes"), help="its xe and retrieval stages")
    parser.add_argument("--dataset", type=Path, default=Path("data/shapes/dataset_shapes.json"))
    parser.add_argument("--features", type=Path, default=Path("data/shapes/feats_128.h5"))
    parser.add_argument("--tau", type=float, default=0.0, help="eq. 2's tau (0: the retriever's own, the recipes')")
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args(argv)
    rows = annotator_rewards(args.bench, args.dataset, args.features, args.tau, args.batches)
    print("| annotator | captions | words | mean r_sim | share above -0.2 |\n|---|---:|---:|---:|---:|")
    for who, row in rows.items():
        print(f"| {who} | {row['captions']} | {row['words']:.1f} | {row['mean r_sim']:.3f} | {row['share above -0.2']:.2f} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
