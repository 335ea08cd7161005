"""Greedy decoding of [Wang18]'s hierarchical captioner that keeps what its manager's training needs: the
segment each word belongs to and the manager's state, with the gradient of every chosen word's
log-probability reaching the goals.

The manager phase of HRL (``methods/hrl.py``, Algorithm 1, lines 12-13) has the worker decode greedily as
the oracle behaviour policy under the manager's goals, explored by the goal noise alone (eq. 23); eq. 22
credits each goal with the log-probabilities of its own segment's words (eq. 21). The words are those of
:func:`rlcap.decoding.greedy` with dropout off.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding.word_distribution import banned_words, word_logprobs
from rlcap.models.base import Feats
from rlcap.models.hrl import HRLCaptioner


class Segments(NamedTuple):
    """Greedy captions of B clips with their segments; T is the number of steps run.

    tokens: (B, T) word ids, cut at EOS (PAD after it). logprobs: (B, T) log pi of each chosen word under the
    policy decoding draws from (PAD and BOS banned), with gradient; 0 after EOS. starts: (B, T) bool, True
    where the manager emitted a goal for that word (a segment starts); False at padding. h_m: (B, T, M) the
    manager's hidden state at each step.
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    starts: torch.Tensor
    h_m: torch.Tensor


def greedy_segments(model: HRLCaptioner, feats: Feats, max_len: int, exit_every: int = 1) -> Segments:
    """The worker's greedy captions of ``feats`` (B clips) under the manager's goals (noisy when
    ``model.goal_noise`` > 0), at most ``max_len`` words, with their segments (:class:`Segments`).

    Every ``exit_every`` steps (0: never, as on a GPU) decoding stops once every caption has ended. The
    dropout layers are off during the decode and back in the caller's modes after: a "greedy" worker with
    dropout on would be another random policy. Only the dropout layers change mode, not the whole model:
    autograd stays on, so the gradient reaches the goals through the encoder's LSTMs, whose cuDNN backward
    (on a GPU) refuses a module in eval mode."""
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    modes = [m.training for m in dropouts]
    for m in dropouts:
        m.eval()
    try:
        return _greedy_segments(model, feats, max_len, exit_every)
    finally:
        for m, mode in zip(dropouts, modes):
            m.train(mode)


def _greedy_segments(model: HRLCaptioner, feats: Feats, max_len: int, exit_every: int) -> Segments:
    """:func:`greedy_segments` in the model's current mode.

    Eq. 21 credits a goal with its own segment's words: where the critic (frozen, deterministic) will start a
    segment at the next step, the worker state entering it is detached from the goals before."""
    memory = model.encode(feats)
    state = model.init_state(memory)
    word = torch.full((feats.att.size(0),), BOS, dtype=torch.long, device=feats.att.device)  # (B,)
    done = torch.zeros_like(word, dtype=torch.bool)  # (B,)
    tokens, logprobs, starts, h_m = [], [], [], []
    ban = None
    for position in range(max_len):
        step_lp, state = model.step(memory, state, word)  # (B, V)
        ban = banned_words(step_lp.size(1), step_lp) if ban is None else ban
        step_lp = word_logprobs(step_lp, ban)  # the policy decoding draws from: PAD and BOS never written
        starts.append(model.segment_start(state))
        h_m.append(state.h_m)
        word = step_lp.detach().argmax(1).masked_fill(done, PAD)  # greedy: the worker as the oracle
        logprobs.append(torch.where(done, 0.0, step_lp.gather(1, word.clamp(min=0)[:, None]).squeeze(1)))
        tokens.append(word)
        done = done | (word == EOS)
        if exit_every and (position + 1) % exit_every == 0 and bool(done.all()):
            break
        with torch.no_grad():
            ends = model.critic.step(state.h_i, word)[0] > 0  # (B,) the next step starts a segment
        state = state._replace(h_w=torch.where(ends[:, None], state.h_w.detach(), state.h_w),
                               c_w=torch.where(ends[:, None], state.c_w.detach(), state.c_w))
    tokens_t = torch.stack(tokens, 1)  # (B, T)
    return Segments(tokens_t, torch.stack(logprobs, 1), torch.stack(starts, 1) & (tokens_t != PAD),
                    torch.stack(h_m, 1))
