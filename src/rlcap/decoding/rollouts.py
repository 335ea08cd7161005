"""Monte-Carlo rollouts: K sampled completions of every prefix of B captions, in one batched decode.

PG-SPIDEr ([Liu17], the Q estimate after the policy gradient)
estimates ``Q(g_{1:t-1}, g_t)`` for every step t of a sampled caption as the mean reward of K
captions sampled on from its prefix ``g_{1:t}``. For B captions of T words that is B*T*K rows.

How the work is shared instead of repeated K*T times:

1. the B captions are teacher-forced once, step by step (B rows): the model's state and next-word
   distribution after each prefix ``g_{1:t}``;
2. all rollouts then advance in lockstep by position: the K rows of prefix ``(b, t)`` join the
   batch at position t, starting from that state (copied K times), so no forced word is ever
   recomputed and no row runs before its first free word. Every row in the batch is at the same
   position, as in :mod:`rlcap.decoding.sampling`, so every model (the transformer's key/value
   cache too) batches them. Prefixes that have already ended (an EOS, or PAD: the caption was
   shorter) and prefixes of ``max_len`` words never join.

Rows join as groups of K (one group per prefix, ordered by t then b), so the memory is
``expand_memory(model, memory of the groups, K)``: UpDown still keeps regions once per group.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding.word_distribution import banned_words, entropy, sampler, uniforms, word_logprobs
from rlcap.decoding.result import DecodeResult, cut_after_eos, zero_pads
from rlcap.decoding.scoring import sampling_mode
from rlcap.decoding.settings import Decoding
from rlcap.models.base import Captioner, Feats, Tensors, expand_memory, same_kind, select_batch


def prefix_rollouts(model: Captioner, feats: Feats, tokens: torch.Tensor, k: int, decoding: Decoding, *,
                    generator: torch.Generator | None = None, return_hidden: bool = False) -> DecodeResult:
    """K sampled completions of each prefix ``tokens[b, :t]``, t = 1..T, of one caption per image, at most
    ``decoding.max_len`` words each.

    tokens (B, T): image b's caption (a decoder's output: cut at EOS, PAD-padded), T <= max_len.
    Returns B*T*K rows in order (b, t, j): row ``(b * T + t - 1) * K + j`` is the j-th rollout of
    the prefix of t words of caption b, so ``x.view(B, T, K, ...)`` indexes them. ``tokens`` holds
    the full caption (prefix, then sampled words, cut at EOS, at most ``max_len`` words); the
    prefix words count in ``mask`` and have logprob and entropy 0, so ``scores`` is each
    continuation's log-probability given its prefix. A prefix that has ended (it holds EOS, or PAD
    because the caption is shorter than t) or has ``max_len`` words is returned as it is, with K
    identical rows: Q of the finished caption is its own reward. ``hidden`` (with ``return_hidden``)
    has the state every word was chosen from, prefix words included (from the teacher forcing).

    Sampling is as in ``sample`` (``decoding``'s temperature, top-k, top-p and ``exit_every``; its steps are
    never compiled; ``generator``); autograd
    follows the caller's mode. Rollouts usually only feed a reward: call it under ``torch.no_grad()``.
    Which prefixes to roll out is read on the host once per call (their number sets the batch).
    """
    b, t_max = tokens.shape
    max_len = decoding.max_len
    if tokens.dtype != torch.long or b != feats.fc.size(0) or t_max > max_len or k < 1:
        raise ValueError(f"prefix_rollouts: expected tokens (B={feats.fc.size(0)}, T <= max_len={max_len}) long "
                          f"and k >= 1, got {tokens.dtype} {tuple(tokens.shape)}, k={k}")
    tokens = cut_after_eos(tokens)
    live = (~_ended(tokens, max_len)).nonzero()  # (G, 2) prefixes to roll out: (b, t - 1), ordered by b
    live = live[live[:, 1].argsort(stable=True)]  # (G, 2) ordered by t, then b: the order they join in
    group_b, group_t = live[:, 0], live[:, 1] + 1  # (G,) image and prefix length of each group of K rows
    row_of = (((group_b * t_max + group_t - 1) * k)[:, None] + torch.arange(k, device=tokens.device)).view(-1)
    # 1. teacher-force the captions: the state after every prefix (and all hidden states if asked)
    positions = max(int(group_t.max()) + 1 if group_t.numel() else 0, t_max if return_hidden else 0)
    encoded = model.encode(feats)
    with sampling_mode(model):  # (a policy that scores its samples decodes without dropout)
        starts = _teacher_force(model, encoded, tokens, positions, return_hidden)
        # 2. sample on from every prefix, groups joining at their first free position
        joins = group_t.tolist()  # ascending
        draws = uniforms(max_len - joins[0] if joins else 0, len(joins) * k, tokens.device, generator)  # (S, G*K)
        steps = _sample_on(model, select_batch(encoded, group_b), starts, group_b, joins, k, decoding, draws,
                           return_hidden)
    # 3. full captions in (b, t, j) order
    forced_hidden = torch.stack([h for _, _, h in starts[:t_max]], 1) if return_hidden else None  # (B, T, H)
    return _assemble(tokens, k, steps, row_of, forced_hidden)


def _ended(tokens: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, T) -> (B, T) bool: prefix ``tokens[b, :t]`` (column t - 1) ends its caption (EOS or PAD
    within it) or already has ``max_len`` words."""
    stop = ((tokens == EOS) | (tokens == PAD)).cummax(dim=1).values  # (B, T)
    full = torch.arange(1, tokens.size(1) + 1, device=tokens.device) >= max_len  # (T,)
    return stop | full


def _teacher_force(model: Captioner, memory: Tensors, tokens: torch.Tensor, positions: int,
                   return_hidden: bool) -> list[tuple[Tensors, torch.Tensor, torch.Tensor | None]]:
    """Read BOS and the captions' words, B rows: entry p is the state after reading p + 1 inputs
    (BOS, tokens[:, :p]), the policy (B, V) for position p, and its hidden state (B, H)."""
    state = model.init_state(memory)
    word = torch.full((tokens.size(0),), BOS, dtype=torch.long, device=tokens.device)  # (B,)
    ban, out = None, []
    for p in range(positions):
        step_lp, state = model.step(memory, state, word)  # (B, V)
        if ban is None:
            ban = banned_words(step_lp.size(1), step_lp)
        out.append((state, word_logprobs(step_lp, ban), model.hidden(state) if return_hidden else None))
        if p < tokens.size(1):
            word = tokens[:, p]
    return out


class _Step(NamedTuple):
    """The words chosen at ``position`` by the first ``len(words)`` rows of the rollout batch."""

    position: int
    words: torch.Tensor  # (n,) long
    logprobs: torch.Tensor  # (n,) 0 for ended rows
    entropy: torch.Tensor  # (n,) 0 for ended rows
    hidden: torch.Tensor | None  # (n, H)


def _sample_on(model: Captioner, group_memory: Tensors, starts: list[tuple[Tensors, torch.Tensor, torch.Tensor | None]],
               group_b: torch.Tensor, joins: list[int], k: int, decoding: Decoding, uniform: torch.Tensor,
               return_hidden: bool) -> list[_Step]:
    """Lockstep sampling by position, with ``decoding``'s sampling settings, up to its ``max_len``; the K rows of
    group g join at position ``joins[g]`` (ascending) from ``starts[joins[g]]`` of image ``group_b[g]``. Row order:
    group by group, K rows each. ``uniform`` (max_len - joins[0], G*K): row s holds the numbers of the rows in
    the batch at position joins[0] + s (the first n of them for n rows).
    Once every group has joined, stops when every row has ended, checked every ``exit_every`` steps."""
    choose = sampler(decoding.temperature, decoding.top_k, decoding.top_p)
    max_len, exit_every = decoding.max_len, decoding.exit_every
    steps: list[_Step] = []
    if not joins:
        return steps
    state: Tensors = ()
    lp = hid = done = None
    memory, active, ban = group_memory, 0, None
    for p in range(joins[0], max_len):
        end = bisect_right(joins, p)  # groups in the batch from this position on
        if end > active:  # 2a. new groups join: copy their prefix's state K times
            idx = group_b[active:end].repeat_interleave(k, output_size=(end - active) * k)  # (n_new,) their images
            start_state, start_lp, start_hid = starts[p]
            joining = select_batch(start_state, idx)
            state = same_kind(joining, [torch.cat(pair) for pair in zip(state, joining)]) if state else joining
            lp = _append(lp, start_lp.index_select(0, idx))  # (n, V)
            hid = _append(hid, start_hid.index_select(0, idx)) if return_hidden else None  # (n, H)
            done = _append(done, torch.zeros(idx.numel(), dtype=torch.bool, device=idx.device))  # (n,)
            memory = expand_memory(model, tuple(m[:end] for m in group_memory), k)
            active = end
        with torch.no_grad():  # 2b. choose, as _steps does
            word = choose(lp.detach(), uniform[p - joins[0], :done.numel()]).masked_fill(done, PAD)  # (n,)
        alive = ~done
        steps.append(_Step(p, word, torch.where(alive, lp.gather(1, word[:, None]).squeeze(1), 0.0),
                           torch.where(alive, entropy(lp), 0.0), hid))
        done = done | (word == EOS)
        if p + 1 == max_len or (active == len(joins) and exit_every and (p + 1) % exit_every == 0
                                and bool(done.all())):
            break
        step_lp, state = model.step(memory, state, word)  # 2c. read the word: (n, V)
        if ban is None:
            ban = banned_words(step_lp.size(1), step_lp)
        lp = word_logprobs(step_lp, ban)
        hid = model.hidden(state) if return_hidden else None
    return steps


def _append(old: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    """Rows of ``new`` after those of ``old`` (None: no rows yet)."""
    return new if old is None else torch.cat([old, new])


def _assemble(tokens: torch.Tensor, k: int, steps: list[_Step], row_of: torch.Tensor,
              forced_hidden: torch.Tensor | None) -> DecodeResult:
    """B*T*K full captions in (b, t, j) order from the prefixes and the sampled words.

    tokens (B, T) cut at EOS; row_of (G*K,) output row of each rollout row; forced_hidden (B, T, H)."""
    b, t_max = tokens.shape
    width = max(t_max, steps[-1].position + 1) if steps else t_max
    device = tokens.device
    row_b = torch.arange(b, device=device).repeat_interleave(t_max * k, output_size=b * t_max * k)  # (R,) its image
    per_image = torch.arange(1, t_max + 1, device=device).repeat_interleave(k, output_size=t_max * k)  # (T*K,)
    row_t = per_image.repeat(b)  # (R,) prefix length
    in_prefix = torch.arange(width, device=device) < row_t[:, None]  # (R, W)
    out = torch.where(in_prefix, F.pad(tokens, (0, width - t_max), value=PAD)[row_b], PAD)  # (R, W)
    dtype = steps[0].logprobs.dtype if steps else torch.get_default_dtype()
    logprobs, entropies = torch.zeros(out.shape, dtype=dtype, device=device), torch.zeros(out.shape, dtype=dtype,
                                                                                          device=device)
    hidden = None
    if forced_hidden is not None:
        hidden = torch.where(in_prefix[:, :, None], F.pad(forced_hidden, (0, 0, 0, width - t_max))[row_b], 0.0)
    if steps:
        rows = torch.cat([row_of[: s.words.numel()] for s in steps])  # (S,) every sampled word's row
        cols = torch.cat([torch.full_like(s.words, s.position) for s in steps])  # (S,) and position
        out = out.index_put((rows, cols), torch.cat([s.words for s in steps]))
        logprobs = logprobs.index_put((rows, cols), torch.cat([s.logprobs for s in steps]))
        entropies = entropies.index_put((rows, cols), torch.cat([s.entropy for s in steps]))
        if hidden is not None:
            hidden = hidden.index_put((rows, cols), torch.cat([s.hidden for s in steps]))
    mask = out != PAD
    hidden = zero_pads(hidden, mask) if hidden is not None else None
    return DecodeResult(out, logprobs, mask, logprobs.sum(1), entropies, hidden)
