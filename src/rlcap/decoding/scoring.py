"""Scoring decoded captions in teacher-forced passes, for a policy sampled without autograd
(:class:`rlcap.models.base.ScoresSamples`: a transformers captioner).

RL libraries for language models sample under ``torch.no_grad`` with the key/value cache, then get the
log-probabilities their loss needs from one teacher-forced forward pass over the sampled sequences (TRL,
torchtune's ``generate_trajectory``). Sampling with autograd instead keeps every step's keys and values, and
the graph of every step, until the backward pass. :func:`score_rows` is that scoring pass:

* in micro-batches of ``micro_batch`` rows (``rl.micro_batch``; 0: one pass), so that the activations of one
  micro-batch are in memory at a time. The loss and gradients are those of one pass (up to float rounding:
  tests/models/test_hf_scoring.py). Where the sampling steps' own log-probabilities and entropies are at hand
  (``drawn``: the same distribution's, the passes agree to 1e-5) and no hidden state is asked for, the forward
  pass returns them and the backward pass runs each micro-batch once, with autograd, and back-propagates the
  loss's gradient through it at once (:class:`_ScoredInBackward`): one forward and one backward a row, as one
  pass takes. Otherwise each micro-batch runs under ``torch.utils.checkpoint``: computed without autograd in
  the forward pass and again with it in the backward pass;
* of each pass's (rows, T, V) scores, only the sampled words' log-probabilities and the entropies leave it
  (:func:`word_stats`), so no (R, T, V) log-probabilities are kept for the batch: a VLM's vocabulary has 50k
  to 150k words;
* a micro-batch that holds whole images gets their memory expanded as decoding expands it
  (``expand_memory(model, memory, n)``: a transformers captioner reads the image once per image and shares it
  with its n rows); one that splits an image's rows gets one memory row per caption.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch.utils.checkpoint import checkpoint

from rlcap.data.vocab import BOS, PAD
from rlcap.decoding.result import zero_pads
from rlcap.models.amp import backward_context, forward_state
from rlcap.models.base import Feats, ScoresSamples, Tensors, expand_memory, select_batch


class _WordStats(torch.autograd.Function):
    """:func:`word_stats` with a backward pass of its own, which keeps only the scores and computes the policy's
    log-softmax again there: autograd would keep the (R, T, V) log-probabilities and probabilities. Each pass
    works in place on its own copy, three (R, T, V) tensors at most at a time."""

    @staticmethod
    def forward(ctx, scores: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(scores, words)
        lp = _log_policy(scores)  # (R, T, V)
        chosen = lp.gather(-1, words[..., None]).squeeze(-1)  # (R, T)
        p = lp.exp()
        return chosen, -(p.mul_(lp.nan_to_num_(neginf=0.0))).sum(-1)  # 0 log 0 = 0

    @staticmethod
    def backward(ctx, d_chosen: torch.Tensor, d_entropy: torch.Tensor) -> tuple[torch.Tensor, None]:
        scores, words = ctx.saved_tensors
        lp = _log_policy(scores)  # (R, T, V)
        p = lp.exp()
        lp.nan_to_num_(neginf=0.0)  # banned and absent words: p = 0, and 0 log 0 = 0
        ent = -(p * lp).sum(-1, keepdim=True)  # (R, T, 1)
        # d log p_w / d s_j = [j = w] - p_j;  d H / d s_j = -p_j (log p_j + H)
        grad = lp.add_(ent).mul_(d_entropy[..., None]).add_(d_chosen[..., None]).mul_(p).neg_()  # (R, T, V)
        grad.scatter_add_(-1, words[..., None], d_chosen[..., None])
        return grad.to(scores.dtype), None


class _ScoredInBackward(torch.autograd.Function):
    """Micro-batched scoring whose forward pass returns the values the sampling steps computed (``logprobs``,
    ``entropies`` (R, T), without autograd) and whose backward pass runs each micro-batch's scoring pass
    (``run(first row, end row)`` for each of ``passes``) with autograd, under the autocast state of the forward,
    and back-propagates the loss's gradient through it into the parameters at once. ``anchor``: a trainable
    parameter, so that autograd calls the backward pass (its gradient is the passes' own, not returned)."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, logprobs: torch.Tensor, entropies: torch.Tensor, run: Callable,
                passes: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.run, ctx.passes, ctx.autocast = run, passes, forward_state(logprobs)
        return logprobs.clone(), entropies.clone()

    @staticmethod
    def backward(ctx, d_logprobs: torch.Tensor, d_entropies: torch.Tensor) -> tuple[None, ...]:
        for a, b in ctx.passes:
            with torch.enable_grad(), backward_context(ctx.autocast):
                logprobs, entropies, _ = ctx.run(a, b)
            torch.autograd.backward((logprobs, entropies), (d_logprobs[a:b], d_entropies[a:b]))
        return None, None, None, None, None


def _log_policy(scores: torch.Tensor) -> torch.Tensor:
    """(R, T, V) scores -> the log-probabilities of the policy decoding draws from
    (:func:`rlcap.decoding.word_distribution.word_logprobs`: PAD and BOS banned), in fp32 at least."""
    lp = scores.to(torch.promote_types(scores.dtype, torch.float32), copy=True)
    lp[..., PAD] = float("-inf")
    lp[..., BOS] = float("-inf")
    return torch.log_softmax(lp, dim=-1)


def word_stats(scores: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (R, T, V) (logits or log-probabilities: renormalised without PAD and BOS) and words (R, T) ->
    each word's log-probability and each position's entropy (R, T), fp32 at least, differentiable in the scores.
    A PAD or BOS word gets -inf (the caller masks it)."""
    return _WordStats.apply(scores, words.clamp(min=0))


def sampling_mode(model: object) -> AbstractContextManager[None]:
    """The mode sampling, greedy decoding and Monte-Carlo rollouts decode a policy in: a :class:`ScoresSamples`
    policy without dropout, as it scores its samples (so without autograd too: actor-critic's value pretraining,
    PG-SPIDEr's rollouts); others in the mode they are in (``rl.rollout_dropout``)."""
    return model.dropout_off() if isinstance(model, ScoresSamples) and model.scores_samples else nullcontext()


def forced_positions(prefix: torch.Tensor | None, width: int) -> torch.Tensor | None:
    """(R, width) bool: positions whose word a prefix (R, P) forced (its words, PAD-padded), None without one."""
    if prefix is None:
        return None
    cut = prefix[:, :width]
    return torch.nn.functional.pad(cut, (0, width - cut.size(1)), value=PAD) != PAD


def score_rows(model: ScoresSamples, encoded: Tensors, n: int, inputs: torch.Tensor, words: torch.Tensor,
               counts: torch.Tensor, return_hidden: bool = False, micro_batch: int = 0,
               drawn: tuple[torch.Tensor, torch.Tensor] | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The teacher-forced scoring pass over R = B*n decoded rows (module docstring).

    ``encoded``: ``model.encode(feats)`` of the B images; ``inputs`` (R, T): the word each step read (BOS, then
    the words); ``words`` (R, T): the words chosen (PAD after EOS); ``counts`` (R, T) bool: the positions whose
    log-probability and entropy count (generated words, not forced ones nor padding). Returns logprobs and
    entropy (R, T), 0 where ``counts`` is False, and with ``return_hidden`` the hidden states (R, T, H), 0 at
    padded positions. ``micro_batch``: rows a pass (0: all); ``drawn``: the sampling steps' log-probabilities
    and entropies of the same words (R, T), what micro-batches return without computing them again."""
    rows = inputs.size(0)
    size = rows if micro_batch <= 0 else min(micro_batch, rows)
    chunked = size < rows and torch.is_grad_enabled()
    passes = [(a, min(a + size, rows)) for a in range(0, rows, size)]

    def run(a: int, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        memory = _rows_memory(model, encoded, n, a, b, inputs.device)
        return _score_pass(model, memory, inputs[a:b], words[a:b], counts[a:b], return_hidden)

    if chunked and drawn is not None and not return_hidden and not any(t.requires_grad for t in encoded):
        anchor = next((p for p in model.parameters() if p.requires_grad), None)
        if anchor is not None:
            values = (torch.where(counts, v, 0.0) for v in drawn)
            logprobs, entropies = _ScoredInBackward.apply(anchor, *values, run, passes)
            return logprobs, entropies, None
    parts = [checkpoint(run, a, b, use_reentrant=False) if chunked else run(a, b) for a, b in passes]
    logprobs, entropies, hidden = zip(*parts)
    return torch.cat(logprobs), torch.cat(entropies), torch.cat(hidden) if return_hidden else None


def _rows_memory(model: ScoresSamples, encoded: Tensors, n: int, a: int, b: int, device: torch.device) -> Tensors:
    """The memory of rows a..b-1 (row r reads image r // n), expanded as decoding expands it."""
    if a % n == 0 and b % n == 0:
        return expand_memory(model, tuple(t[a // n:b // n] for t in encoded), n)
    return expand_memory(model, select_batch(encoded, torch.arange(a, b, device=device) // n), 1)


def _score_pass(model: ScoresSamples, memory: Tensors, inputs: torch.Tensor, words: torch.Tensor,
                counts: torch.Tensor, return_hidden: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One pass over a micro-batch (in :meth:`~ScoresSamples.dropout_off`: a pass recomputed in the backward
    pass runs outside the caller's context)."""
    with model.dropout_off():
        scores, hidden = model.score_samples(memory, inputs, return_hidden)  # (r, T, V), (r, T, H)
        logprobs, entropies = word_stats(scores, words)  # (r, T)
    hidden = zero_pads(hidden, words != PAD) if return_hidden else None
    return torch.where(counts, logprobs, 0.0), torch.where(counts, entropies, 0.0), hidden


def score_captions(model: ScoresSamples, feats: Feats, n: int, tokens: torch.Tensor,
                   micro_batch: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy (R, T) of given captions ``tokens`` (R, T), n per image (words, EOS, PAD
    after it; no BOS), under the policy without dropout, 0 at padded positions: :func:`score_rows` over them
    (the n-best of a beam, WTF-RL's trajectories)."""
    bos = torch.full((tokens.size(0), 1), BOS, dtype=tokens.dtype, device=tokens.device)
    inputs = torch.cat([bos, tokens[:, :-1]], 1)  # (R, T)
    logprobs, entropies, _ = score_rows(model, model.encode(feats), n, inputs, tokens, tokens != PAD,
                                        micro_batch=micro_batch)
    return logprobs, entropies
