"""Caption every image of a split, in batches (greedy or beam search), on one process or torchrun's."""

from __future__ import annotations

import torch

from rlcap.data.loader import SplitData
from rlcap.data.vocab import Vocab
from rlcap.decoding.beam import beam_search
from rlcap.decoding.result import decode_captions
from rlcap.decoding.sampling import greedy
from rlcap.decoding.stepping import resolve_compile, resolve_exit_every
from rlcap.devices import Precision, model_device
from rlcap.distributed import Ranks, gathered
from rlcap.progress import track


@torch.inference_mode()
def decode_split(model: torch.nn.Module, split: SplitData, vocab: Vocab, beam_size: int, max_len: int,
                 batch_size: int = 100, limit: int = 0, progress: bool = False,
                 length_penalty: float = 0.0, no_repeat_ngram: int = 0, ranks: Ranks = Ranks(),
                 compile: bool | str = "auto", exit_every: int | None = None,
                 precision: Precision = Precision()) -> dict[str, str]:
    """Caption every image of ``split`` (greedy when beam_size is 1, else beam search ranked by
    log-probability / length ** ``length_penalty``, never repeating an n-gram of ``no_repeat_ngram``
    words when that is above 0). ``progress``: a bar on a terminal, else log lines. ``compile``: the
    decoders' compiled steps (auto, true or false; auto compiles on CUDA only);
    ``exit_every``: how often a decode checks that every caption has ended (None: auto, 0: never);
    ``precision``: the forward passes' (a run's validation and ``rlcap eval`` of its checkpoints decode alike).

    ``ranks`` (under torchrun): each rank decodes every ``world``-th batch and every rank gets all the
    captions, in the split's order; the batches are those of one process, so are the captions."""
    was_training = model.training
    model.eval()
    device = model_device(model)
    compiled, exit_every = resolve_compile(compile, device), resolve_exit_every(exit_every, device)
    predictions: dict[str, str] = {}
    batches = split.eval_batches(batch_size, limit)
    total = (min(limit, len(split)) if limit > 0 else len(split) + batch_size - 1) // batch_size
    for k, batch in enumerate(track(batches, total, "decode", "batch", leave=False) if progress else batches):
        if k % ranks.world != ranks.rank:
            continue  # another rank's batch
        feats = batch.feats.to(device)
        with precision.forward():
            if beam_size <= 1:
                out = greedy(model, feats, max_len=max_len, compile=compiled, exit_every=exit_every)
            else:
                out = beam_search(model, feats, beam_size=beam_size, max_len=max_len, length_penalty=length_penalty,
                                  no_repeat_ngram=no_repeat_ngram, compile=compiled, exit_every=exit_every)
        predictions.update(zip(batch.ids, decode_captions(vocab, out.tokens)))  # one transfer a batch, not a caption
    model.train(was_training)
    if ranks.world > 1:
        merged = {i: c for part in gathered(predictions, ranks) for i, c in part.items()}
        predictions = {i: merged[i] for i in split.ids if i in merged}
    return predictions
