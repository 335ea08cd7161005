"""Generating and scoring captions for sequence-level training: shared by the RL loops."""

from __future__ import annotations

import time
from typing import NamedTuple

import torch

from rlcap.data.loader import Batch
from rlcap.data.vocab import BOS, EOS, PAD, Vocab
from rlcap.decoding import (DecodeResult, banned_words, beam_search, entropy, greedy, resolve_compile,
                            resolve_exit_every, sample, word_logprobs)
from rlcap.host_sync import on_host, to_device, to_host
from rlcap.rewards import Reward, RewardBatch
from rlcap.rewards.combine import WeightedReward
from rlcap.train.run_config import DecodeSettings, RLConfig


class Rollout(NamedTuple):
    """n captions for each of B images, rows of one image adjacent.

    tokens, logprobs, mask, entropy: (B*n, T); logprobs and entropy carry gradient.
    captions: B*n strings (None when not asked for: a reward that scores the tokens needs none); reward_batch: their context; seconds: time spent generating;
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


def teacher_forced_logprobs(model: torch.nn.Module, batch: Batch, tokens: torch.Tensor,
                            n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy of given captions (B*n, T) under the policy, with gradient;
    0 at padded positions, as in a :class:`DecodeResult`.

    The policy is the one decoding samples from: the model's softmax renormalised without PAD and
    BOS (:func:`rlcap.decoding.word_logprobs`). A padded position's log-probability is -inf under
    it (PAD is banned), so it is zeroed with ``where``: a product with the mask would give NaN."""
    bos = torch.full((tokens.shape[0], 1), BOS, dtype=tokens.dtype, device=tokens.device)
    inputs = torch.cat([bos, tokens[:, :-1]], dim=1)                 # (B*n, T)
    logits = model(batch.feats, inputs, seq_per_img=n)                      # (B*n, T, V)
    logp = word_logprobs(logits, banned_words(logits.size(-1), logits))      # (B*n, T, V)
    chosen = logp.gather(2, tokens.clamp(min=0)[:, :, None]).squeeze(2)    # (B*n, T)
    ent = entropy(logp.flatten(0, 1)).view(logp.shape[:2])                  # (B*n, T)
    mask = tokens != PAD
    return torch.where(mask, chosen, 0.0), torch.where(mask, ent, 0.0)


def reward_batch(batch: Batch, n: int) -> RewardBatch:
    """The context of n captions per image: ids and references per caption, features once per image."""
    rows = torch.arange(len(batch.ids), device=batch.feats.fc.device).repeat_interleave(n)  # (B*n,) caption -> image
    return RewardBatch([i for i in batch.ids for _ in range(n)], [r for r in batch.refs for _ in range(n)],
                       batch.feats, rows)


def rollout(model: torch.nn.Module, batch: Batch, vocab: Vocab, cfg: RLConfig, decode: DecodeSettings,
            hidden: bool = False, text: bool = True) -> Rollout:
    """Generate ``cfg.n_samples`` captions per image (by sampling, or as the beam's n-best); ``hidden``: keep the
    decoder state of each step (sampling only); ``text``: decode the captions' words (one transfer of the
    tokens to the host: :func:`decode_captions`)."""
    start = time.perf_counter()
    n = cfg.n_samples
    if cfg.sample_method == "sample":
        out: DecodeResult = sample(model, batch.feats, n=n, max_len=decode.max_len, temperature=decode.temperature,
                                   return_hidden=hidden, **decoding(decode, batch.feats.fc.device))
        logprobs, ent = out.logprobs, out.entropy
    else:
        with torch.no_grad():
            out = beam_search(model, batch.feats, beam_size=max(n, 2), max_len=decode.max_len, n_best=n,
                              **decoding(decode, batch.feats.fc.device))
        logprobs, ent = teacher_forced_logprobs(model, batch, out.tokens, n)
    captions = decode_captions(vocab, out.tokens) if text else None
    # both paths give 0 at padded positions (decoding's convention)
    return Rollout(out.tokens, logprobs, out.mask, ent, captions, reward_batch(batch, n), time.perf_counter() - start,
                   out.hidden if hidden else None)


def decoding(decode: DecodeSettings, device: torch.device) -> dict:
    """The decoders' ``exit_every`` and ``compile`` for ``decode``'s settings on ``device`` (auto resolved)."""
    return {"exit_every": resolve_exit_every(decode.exit_every, device), "compile": resolve_compile(decode.compile, device)}


@torch.no_grad()
def greedy_tokens(model: torch.nn.Module, batch: Batch, decode: DecodeSettings) -> torch.Tensor:
    """The greedy caption of each image (B, T), decoded in eval mode (the self-critical baseline)."""
    was_training = model.training
    model.eval()
    out = greedy(model, batch.feats, max_len=decode.max_len, **decoding(decode, batch.feats.fc.device))
    model.train(was_training)
    return out.tokens


def greedy_captions(model: torch.nn.Module, batch: Batch, vocab: Vocab, decode: DecodeSettings) -> list[str]:
    """The words of :func:`greedy_tokens`."""
    return decode_captions(vocab, greedy_tokens(model, batch, decode))


def decode_captions(vocab: Vocab, *tokens: torch.Tensor) -> list[str]:
    """The words of token rows (N, T), of one or several such tensors (their rows in turn, widths may
    differ), in one transfer to the host for them all (one synchronisation on a GPU, where a transfer
    per row would be one each: rlcap.host_sync)."""
    width = max(t.size(1) for t in tokens)
    rows = to_host(torch.cat([torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD) for t in tokens]))
    with on_host():
        return [vocab.decode(row) for row in rows.tolist()]


def score(reward: Reward, captions: list[str] | None, reward_batch: RewardBatch,
          tokens: torch.Tensor | None = None) -> torch.Tensor:
    """Rewards as a float tensor (N,), checked for shape, on the device of the batch's features.
    ``tokens`` (N, T): the captions' ids, which a reward computed on the device scores instead of their
    words (``captions`` may then be None); metric rewards are CPU code, their scores copied back once."""
    n = len(captions) if captions is not None else len(reward_batch.image_ids)
    values = reward(captions, reward_batch, tokens) if isinstance(reward, WeightedReward) else reward(captions,
                                                                                                        reward_batch)
    if values.shape != (n,):
        raise ValueError(f"reward returned shape {tuple(values.shape)} for {n} captions")
    device = reward_batch.feats.fc.device if reward_batch.feats is not None else values.device
    return to_device(values.float(), device)


def caption_lengths(tokens: torch.Tensor) -> torch.Tensor:
    """Words per caption (EOS and padding excluded): (N, T) -> (N,) float."""
    return ((tokens != PAD) & (tokens != EOS)).sum(1).float()
