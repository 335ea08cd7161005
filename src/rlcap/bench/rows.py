"""The columns of the method table (Table 4 of [Chen20]).

- ``beam``: one caption per image by beam search (size 3): the pycocoevalcap metrics.
- ``rs``: 5 random samples per image (temperature 1): CIDEr-D averaged over the 5 (each sample
  scored as its own candidate set, document frequencies from the test references), and the
  diversity of the 5: Div-1, Div-2, mBLEU-4. ``rs@T``: the same, drawn at temperature T (a
  benchmark whose RL recipes sample at T, :attr:`rlcap.bench.registry.Benchmark.sample_temperature`).
- ``bs``: the 5 best beams of a size-5 beam search: the same four figures.
"""

from __future__ import annotations

from typing import Any

import torch

from rlcap.data.loader import SplitData
from rlcap.data.vocab import Vocab
from rlcap.decoding import DecodeResult, Decoding, beam_search, sample
from rlcap.devices import model_device

DIVERSITY = ["Div-1", "Div-2", "mBLEU-4"]


@torch.no_grad()
def caption_sets(model: torch.nn.Module, split: SplitData, vocab: Vocab, how: str, n: int, max_len: int,
                 seed: int, batch_size: int = 100, temperature: float = 1.0, limit: int = 0) -> dict[str, list[str]]:
    """n captions per image: ``how`` is "rs" (random samples at ``temperature``) or "bs" (n-best of a
    size-n beam); ``limit``: the first N images only (0: all)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, list[str]] = {}
    for batch in split.eval_batches(batch_size, limit):
        if how == "rs":
            decoding = Decoding.on(model_device(model), "sample", max_len, compile=False, temperature=temperature)
            result: DecodeResult = sample(model, batch.feats, n, decoding, generator=generator)
        else:
            decoding = Decoding.on(model_device(model), "beam", max_len, compile=False, beam_size=n)
            result = beam_search(model, batch.feats, decoding, n_best=n)
        rows = [vocab.decode(r.tolist()) for r in result.tokens]
        for i, image_id in enumerate(batch.ids):
            out[image_id] = rows[i * n:(i + 1) * n]
    return out


def set_scores(split: SplitData, captions: dict[str, list[str]]) -> dict[str, float]:
    """CIDEr-D averaged over the n captions of each image, and their diversity."""
    from rlcap.metrics import score_captions

    refs = dict(zip(split.ids, split.refs))
    n = len(next(iter(captions.values())))
    cider = [score_captions(refs, {i: [c[k]] for i, c in captions.items()}, ["CIDEr"]).corpus["CIDEr"]
             for k in range(n)]
    diversity = score_captions(refs, captions, DIVERSITY).corpus
    return {"CIDEr": sum(cider) / n, **{m: diversity[m] for m in DIVERSITY}}


def method_row(model: torch.nn.Module, split: SplitData, vocab: Vocab, metrics: list[str], max_len: int = 16,
               seed: int = 0, judges: dict[str, Any] | None = None,
               predictions: dict[str, str] | None = None, sample_temperature: float = 1.0,
               captions: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"beam": {...}, "rs": {...}, "bs": {...}}`` for one trained model, and ``"rs@T"`` for a
    ``sample_temperature`` T other than 1; with ``judges`` (trained
    retrievers, :func:`rlcap.bench.distinct.load_judges`) also ``"distinct"``: [Chaffin24]'s retrieval columns
    and Self-BLEU of the beam captions. ``predictions``: the beam column's captions decoded otherwise
    ([Shi18]'s lookahead inference) instead of beam search of size 3. ``captions``: filled with the beam
    captions (``"captions"``), their per-image scores (``"per_image"``) and, with judges, their retrieval ranks
    (``"ranks"``), for ``rlcap report``'s gallery."""
    from rlcap.bench.distinct import distinct_row
    from rlcap.decoding.split import decode_split
    from rlcap.train.validation import score_predictions

    if predictions is None:
        predictions = decode_split(model, split, vocab, Decoding.search(model_device(model), 3, max_len))
    scored = score_predictions(split, predictions, metrics)
    beam = scored.corpus
    rs = set_scores(split, caption_sets(model, split, vocab, "rs", 5, max_len, seed))
    bs = set_scores(split, caption_sets(model, split, vocab, "bs", 5, max_len, seed))
    row = {"beam": beam, "rs": rs, "bs": bs}
    if sample_temperature != 1.0:
        row[f"rs@{sample_temperature:g}"] = set_scores(
            split, caption_sets(model, split, vocab, "rs", 5, max_len, seed, temperature=sample_temperature))
    ranks: dict[str, dict[str, float]] = {}
    if judges:
        row["distinct"] = distinct_row(predictions, split, judges, ranks)
    if captions is not None:
        captions.update({"captions": predictions, "per_image": scored.per_image, "ranks": ranks})
    return row
