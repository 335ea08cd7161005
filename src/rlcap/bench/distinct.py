"""The columns of [Chaffin24]'s Table 1 for a method's beam-search captions.

- Retrieval with the generated captions, one per test image: T2I (each caption ranks the test
  images) and I2T (each image ranks the generated captions), R@1/5/10, by the *training*
  retriever (the reward's) and by a second judge trained independently (other seed, the other
  half of the training captions), never a reward: reward hacking of the training retriever shows
  as a gap between the two (``rlcap.data.loader.DataConfig.train_captions``).
- Self-BLEU of the generated captions (each against all the others, Zhu et al. 2018): lower is
  more diverse.

The writing-quality columns (BLEU-4, ROUGE-L, CIDEr-D, METEOR, SPICE) are the beam column of
:func:`rlcap.bench.rows.method_row`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlcap.data.loader import SplitData

JUDGES = ("retrieval", "judge")  # the stages whose retrievers score the captions


def image_embeddings(retriever: Any, split: SplitData, bank_path: Path | None, batch_size: int = 256) -> torch.Tensor:
    """(I, D) the split's images as the retriever sees them: a dual encoder from the features,
    CLIP from an image bank that holds them."""
    from rlcap.models.retriever import DualEncoderRetriever
    from rlcap.rewards.image_bank import load_image_bank

    if isinstance(retriever, DualEncoderRetriever):
        return torch.cat([retriever.embed_feats(split.feats(torch.arange(i, min(i + batch_size, len(split)))))
                          for i in range(0, len(split), batch_size)])
    if bank_path is None:
        raise ValueError("a CLIP judge needs an image bank of the test images")
    bank = load_image_bank(bank_path)
    return bank.embeddings[bank.rows(split.ids)]


def retrieval_columns(retriever: Any, images: torch.Tensor, captions: list[str],
                      ranks: dict[str, np.ndarray] | None = None) -> dict[str, float]:
    """R@1/5/10 both ways with one generated caption per image (row k of ``images``, caption k); with
    ``ranks``, also each caption's expected ranks there ("T2I", "I2T")."""
    from rlcap.metrics.retrieval import expected_ranks, retrieval_metrics

    texts = retriever.embed_captions(captions)  # (I, D)
    similarity = (images @ texts.T).numpy()
    scores = retrieval_metrics(similarity, np.arange(len(captions)))
    if ranks is not None:
        ranks.update({d.upper(): r for d, r in expected_ranks(similarity).items()})
    return {f"{d.upper()} R@{k}": scores[f"{d}_R@{k}"] for d in ("t2i", "i2t") for k in (1, 5, 10)}


def distinct_row(predictions: dict[str, str], split: SplitData, judges: dict[str, tuple[Any, torch.Tensor]],
                 ranks: dict[str, dict[str, float]] | None = None) -> dict[str, float]:
    """Retrieval columns under each judge (prefixed by its name unless it is the training retriever) and Self-BLEU.
    ``ranks``: filled with image id -> {"T2I", "I2T"} expected ranks under the training retriever."""
    from rlcap.metrics import tokenize
    from rlcap.metrics.diversity import self_bleu

    captions = [predictions[i] for i in split.ids]
    row: dict[str, float] = {}
    for name, (retriever, images) in judges.items():
        prefix = "" if name == "retrieval" else f"{name} "
        found: dict[str, np.ndarray] | None = {} if ranks is not None and name == "retrieval" else None
        row.update({prefix + k: v for k, v in retrieval_columns(retriever, images, captions, found).items()})
        if found:
            ranks.update({i: {d: float(r[k]) for d, r in found.items()} for k, i in enumerate(split.ids)})
    row["Self-BLEU"] = 100.0 * self_bleu([tokenize(c) for c in captions])
    return row


def load_judges(best: dict[str, Path], split: SplitData) -> dict[str, tuple[Any, torch.Tensor]]:
    """The trained retrievers among the benchmark's stages, each with the test images' embeddings."""
    from rlcap.models.retriever import load_retriever

    out = {}
    for name in JUDGES:
        if name in best:
            retriever = load_retriever(best[name])
            out[name] = (retriever, image_embeddings(retriever, split, None))
    return out


DISTINCT_COLUMNS = ["T2I R@1", "T2I R@5", "T2I R@10", "I2T R@1", "I2T R@5", "I2T R@10", "judge T2I R@1",
                    "judge I2T R@1"]
QUALITY_COLUMNS = ["Bleu_4", "ROUGE_L", "CIDEr", "METEOR", "SPICE"]


def distinct_markdown(results: dict[str, Any]) -> str:
    """Table 1 of [Chaffin24]: retrieval (training retriever, then the judge's R@1), writing quality, Self-BLEU."""
    methods = {m: r for m, r in results["methods"].items() if "distinct" in r}
    if not methods:
        return ""
    quality = [c for c in QUALITY_COLUMNS if all(c in r["beam"] for r in methods.values())]
    retrieval = [c for c in DISTINCT_COLUMNS if all(c in r["distinct"] for r in methods.values())]
    head = ["method", *retrieval, *quality, "Self-BLEU"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in methods.items():
        cells = [name, *(f"{row['distinct'][c]:.1f}" for c in retrieval),
                 *(f"{100 * row['beam'][c]:.1f}" for c in quality), f"{row['distinct']['Self-BLEU']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
