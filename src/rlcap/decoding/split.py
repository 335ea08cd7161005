"""Caption every image of a split, in batches (greedy or beam search: a :class:`Decoding`), on one process or
torchrun's."""

from __future__ import annotations

from typing import Any

import torch

from rlcap.data.loader import SplitData
from rlcap.data.vocab import Vocab
from rlcap.decoding.options import Decoding, decode
from rlcap.decoding.result import DecodeResult, decode_captions
from rlcap.devices import Precision, model_device
from rlcap.distributed import Ranks, decodes_in_step, gathered
from rlcap.progress import track


@torch.inference_mode()
def decode_split(model: torch.nn.Module, split: SplitData, vocab: Vocab, decoding: Decoding,
                 batch_size: int = 100, limit: int = 0, progress: bool = False, ranks: Ranks = Ranks(),
                 precision: Precision = Precision()) -> dict[str, str]:
    """Caption every image of ``split`` one caption each, as ``decoding`` says (a run's: greedy when its beam size
    is 1, else beam search ranked by log-probability / length ** ``length_penalty``, never repeating an n-gram of
    ``no_repeat_ngram`` words when that is above 0; :meth:`Decoding.of_run`). ``progress``: a bar on a terminal,
    else log lines; ``precision``: the forward passes' (a run's validation and ``rlcap eval`` of its checkpoints
    decode alike).

    ``ranks`` (under torchrun): each rank decodes every ``world``-th batch and every rank gets all the
    captions, in the split's order; the batches are those of one process, so are the captions."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    predictions: dict[str, str] = {}
    batches = split.eval_batches(batch_size, limit)
    total = (min(limit, len(split)) if limit > 0 else len(split) + batch_size - 1) // batch_size
    first, decoded, k = None, 0, -1
    for k, batch in enumerate(track(batches, total, "decode", "batch", leave=False) if progress else batches):
        first = batch if first is None else first
        if k % ranks.world != ranks.rank:
            continue  # another rank's batch
        out = _decode_batch(model, batch, decoding, device, precision)
        predictions.update(zip(batch.ids, decode_captions(vocab, out.tokens)))  # one transfer a batch, not a caption
        decoded += 1
    if decodes_in_step(model) and first is not None:  # (from shards: every rank makes the same decode calls)
        for _ in range(-(-(k + 1) // ranks.world) - decoded):
            _decode_batch(model, first, decoding, device, precision)  # a stand-in, its captions dropped
    model.train(was_training)
    if ranks.world > 1:
        merged = {i: c for part in gathered(predictions, ranks) for i, c in part.items()}
        predictions = {i: merged[i] for i in split.ids if i in merged}
    return predictions


def _decode_batch(model: torch.nn.Module, batch: Any, decoding: Decoding, device: torch.device,
                  precision: Precision) -> DecodeResult:
    with precision.forward():
        return decode(model, batch.feats.to(device), decoding)
