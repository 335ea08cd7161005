"""Generating captions as a :class:`rlcap.decoding.settings.Decoding` says: one entry per kind of decode.

A loop takes the variant of its run's ``Decoding`` it needs (:meth:`Decoding.as_sampling` for its rollouts,
:meth:`Decoding.as_greedy` for a self-critical baseline) and calls :func:`decode`, :func:`rollouts` or
:func:`segments`.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from rlcap.decoding.beam import beam_search
from rlcap.decoding.result import DecodeResult
from rlcap.decoding.rollouts import prefix_rollouts
from rlcap.decoding.sampling import greedy, sample
from rlcap.decoding.segments import Segments, greedy_segments
from rlcap.decoding.settings import Decoding
from rlcap.devices import in_precision
from rlcap.distributed import whole_weights
from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats
from rlcap.models.hrl import HRLCaptioner

__all__ = ["Decoding", "decode", "rollouts", "segments"]


@in_precision  # a policy as the session hands it out decodes in the run's precision, one region a decode
def decode(model: Captioner, feats: Feats, decoding: Decoding, n: int = 1, *, generator: torch.Generator | None = None,
           prefix: torch.Tensor | None = None, return_hidden: bool = False, micro_batch: int = 0) -> DecodeResult:
    """Captions of ``feats`` as ``decoding`` says: n sampled per image, or a beam's n best (B*n rows, one image's
    adjacent); greedy gives one. ``generator``: sampling's; ``prefix``, ``return_hidden`` and ``micro_batch``
    (``rl.micro_batch``): as the decoders' (:mod:`rlcap.decoding`, :func:`sample`). Autograd follows the caller's
    mode when sampling; greedy and beam run without it. A policy sharded by FSDP2 decodes with its weights
    gathered (:func:`rlcap.distributed.whole_weights`; sampling with autograd gathers them for its words only, and
    scores them sharded)."""
    if decoding.method == "sample":
        with nullcontext() if torch.is_grad_enabled() else whole_weights(model):
            return sample(model, feats, n, decoding, generator=generator, prefix=prefix, return_hidden=return_hidden,
                          micro_batch=micro_batch)
    if decoding.method == "beam":
        with whole_weights(model):
            return beam_search(model, feats, decoding, n_best=n, prefix=prefix, return_hidden=return_hidden)
    if n != 1:
        raise ConfigError(f"decode: greedy decoding gives one caption per image, asked for n={n}")
    with whole_weights(model):
        return greedy(model, feats, decoding.max_len, prefix=prefix, return_hidden=return_hidden,
                      exit_every=decoding.exit_every, compile=decoding.compile)


@in_precision
def rollouts(model: Captioner, feats: Feats, tokens: torch.Tensor, k: int, decoding: Decoding,
             generator: torch.Generator | None = None, return_hidden: bool = False) -> DecodeResult:
    """K completions of every prefix of ``tokens`` (B, T) sampled with ``decoding``'s sampling settings
    (:func:`rlcap.decoding.prefix_rollouts`: its rows and their order; its steps are never compiled)."""
    with nullcontext() if torch.is_grad_enabled() else whole_weights(model, gather=True):  # (prefixes differ by rank)
        return prefix_rollouts(model, feats, tokens, k, decoding, generator=generator, return_hidden=return_hidden)


@in_precision
def segments(model: HRLCaptioner, feats: Feats, decoding: Decoding) -> Segments:
    """The HRL worker's greedy captions and their segments, at most ``decoding.max_len`` words
    (:func:`rlcap.decoding.segments.greedy_segments`)."""
    return greedy_segments(model, feats, decoding.max_len, exit_every=decoding.exit_every)
