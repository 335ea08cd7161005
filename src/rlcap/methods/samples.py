"""The captions a sequence-level step learns from: n sampled (or the beam's n-best) per image, with their
log-probabilities; the greedy captions of the self-critical baseline. Shared by the RL loops."""

from __future__ import annotations

import time
from typing import NamedTuple

import torch

from rlcap.data.loader import Batch
from rlcap.data.vocab import BOS, EOS, PAD, Vocab
from rlcap.decoding import DecodeResult, banned_words, entropy, word_logprobs
from rlcap.decoding.options import Decoding, decode
from rlcap.decoding.result import decode_captions
from rlcap.decoding.scoring import score_captions
from rlcap.devices import in_precision
from rlcap.models.base import ScoresSamples
from rlcap.rewards.batch import RewardBatch, reward_batch
from rlcap.run_config import RLConfig


class Rollout(NamedTuple):
    """n captions for each of B images, rows of one image adjacent.

    tokens, logprobs, mask, entropy: (B*n, T); logprobs and entropy carry gradient.
    captions: B*n strings (None when not asked for: a reward that scores the tokens needs none);
    reward_batch: their context; seconds: time spent generating;
    hidden: (B*n, T, H) the decoder state each word is chosen from, when asked (sampling only).
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor
    captions: list[str] | None
    reward_batch: RewardBatch
    seconds: float
    hidden: torch.Tensor | None = None


@in_precision  # a policy the session hands out (InPrecision) scores in the run's precision
def teacher_forced_logprobs(model: torch.nn.Module, batch: Batch, tokens: torch.Tensor,
                            n: int, micro_batch: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy of given captions (B*n, T) under the policy, with gradient;
    0 at padded positions, as in a :class:`DecodeResult`.

    The policy is the one decoding samples from: the model's softmax renormalised without PAD and
    BOS (:func:`rlcap.decoding.word_logprobs`). A padded position's log-probability is -inf under
    it (PAD is banned), so it is zeroed with ``where``: a product with the mask would give NaN.
    A policy scored in one pass (:class:`ScoresSamples`, model.arch=hf) is scored as its samples are
    (:func:`rlcap.decoding.scoring.score_captions`: without dropout, ``micro_batch`` captions a pass)."""
    if isinstance(model, ScoresSamples) and model.scores_samples:
        return score_captions(model, batch.feats, n, tokens, micro_batch)
    bos = torch.full((tokens.shape[0], 1), BOS, dtype=tokens.dtype, device=tokens.device)
    inputs = torch.cat([bos, tokens[:, :-1]], dim=1)                 # (B*n, T)
    logits = model(batch.feats, inputs, seq_per_img=n)                      # (B*n, T, V)
    logp = word_logprobs(logits, banned_words(logits.size(-1), logits))      # (B*n, T, V)
    chosen = logp.gather(2, tokens.clamp(min=0)[:, :, None]).squeeze(2)    # (B*n, T)
    ent = entropy(logp.flatten(0, 1)).view(logp.shape[:2])                  # (B*n, T)
    mask = tokens != PAD
    return torch.where(mask, chosen, 0.0), torch.where(mask, ent, 0.0)


@in_precision  # one autocast region for the whole decode and its scoring
def rollout(model: torch.nn.Module, batch: Batch, vocab: Vocab, cfg: RLConfig, decoding: Decoding,
            hidden: bool = False, text: bool = True) -> Rollout:
    """Generate ``cfg.n_samples`` captions per image (sampled with ``decoding``'s settings, or as the beam's n-best:
    :meth:`Decoding.as_n_best`); ``hidden``: keep the decoder state of each step (sampling only); ``text``: decode
    the captions' words (one transfer of the tokens to the host: :func:`decode_captions`)."""
    start = time.perf_counter()
    n = cfg.n_samples
    if cfg.sample_method == "sample":
        out: DecodeResult = decode(model, batch.feats, decoding.as_sampling(), n, return_hidden=hidden,
                                   micro_batch=cfg.micro_batch)
        logprobs, ent = out.logprobs, out.entropy
    else:
        with torch.no_grad():
            out = decode(model, batch.feats, decoding.as_n_best(n), n)
        logprobs, ent = teacher_forced_logprobs(model, batch, out.tokens, n, cfg.micro_batch)
    captions = decode_captions(vocab, out.tokens) if text else None
    # both paths give 0 at padded positions (decoding's convention)
    return Rollout(out.tokens, logprobs, out.mask, ent, captions, reward_batch(batch, n), time.perf_counter() - start,
                   out.hidden if hidden else None)


@in_precision
@torch.no_grad()
def greedy_tokens(model: torch.nn.Module, batch: Batch, decoding: Decoding) -> torch.Tensor:
    """The greedy caption of each image (B, T), decoded in eval mode (the self-critical baseline)."""
    was_training = model.training
    model.eval()
    out = decode(model, batch.feats, decoding.as_greedy())
    model.train(was_training)
    return out.tokens


def greedy_captions(model: torch.nn.Module, batch: Batch, vocab: Vocab, decoding: Decoding) -> list[str]:
    """The words of :func:`greedy_tokens`."""
    return decode_captions(vocab, greedy_tokens(model, batch, decoding))


def caption_lengths(tokens: torch.Tensor) -> torch.Tensor:
    """Words per caption (EOS and padding excluded): (N, T) -> (N,) float."""
    return ((tokens != PAD) & (tokens != EOS)).sum(1).float()
