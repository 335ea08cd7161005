"""The distribution decoding draws each word from: PAD and BOS banned, entropy, top-k / top-p filtering, inverse-CDF draws.

Pure tensor functions over one step's ``(R, V)`` log-probabilities, shared by every decoder.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from rlcap.data.vocab import BOS, PAD


def banned_words(vocab_size: int, like: torch.Tensor) -> torch.Tensor:
    """(V,) additive mask: -inf at PAD and BOS, which are never generated."""
    words = torch.arange(vocab_size, device=like.device)  # (V,) made on the device: no copy from the host
    return torch.where((words == PAD) | (words == BOS), float("-inf"), 0.0).to(like.dtype)


def entropy(logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy of each row's distribution: (R, V) log-probabilities -> (R,) fp32; 0 * log 0 = 0.

    Computed in fp32 whatever the input's dtype and under autocast too: a product reduction such as
    ``torch.linalg.vecdot`` is one of autocast's low-precision ops, where fp32's clamp value becomes
    -inf and 0 * -inf = NaN. Elementwise products and sums are not autocast ops, so they stay fp32."""
    lp = logprobs.float()
    finite = lp.clamp(min=torch.finfo(lp.dtype).min)  # (R, V) -inf (banned words) -> 0 * finite
    return -(finite.exp() * finite).sum(dim=-1)


def word_logprobs(step_lp: torch.Tensor, ban: torch.Tensor) -> torch.Tensor:
    """The policy over the words that can be generated: (R, V) -> (R, V), renormalised without PAD and BOS.

    Decoding never emits PAD or BOS, so the captions are drawn from this distribution, and the
    log-probabilities a policy gradient uses must be its own. Taking them from the model's full
    softmax instead leaves the banned words' share out of every REINFORCE update: with a baseline
    above the mean sample reward (the greedy baseline's usual case) each step then moves probability
    onto PAD and BOS, and the policy collapses once they hold most of it (docs/RL.md).
    """
    return torch.log_softmax(step_lp + ban, dim=-1)


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """-inf outside the k largest logits and outside the nucleus (Holtzman et al. 2020).

    logits (R, V) -> (R, V). The nucleus is the smallest set of most likely words whose
    probability reaches ``top_p``; the most likely word is always kept.
    """
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (R, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (R, V)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # (R, V) probability of the more likely words
        drop_sorted = mass_before >= top_p
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return logits


def draw(probs: torch.Tensor, generator: torch.Generator | None = None,
         uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One word per row, drawn in proportion to ``probs`` (R, V) (need not sum to 1) -> (R,).

    Inverse-CDF sampling: one uniform number per row, found in the row's cumulative sums. It draws
    from the same distribution as ``torch.multinomial(probs, 1)``, which on CPU draws an exponential
    variate for every word: about 10 ms for 250 rows x 2,107 words on the project's 2-core machine,
    8% of an UpDown SCST step, against under 0.5 ms for this (timed by hand).

    The sums are taken in two levels, so that no scan runs over the whole vocabulary: the words in B blocks of
    K = ceil(sqrt(V)), each block's sum (a float64 reduction), the cumulative sums of the B blocks, the block whose
    sum reaches the row's target, then the cumulative sums of its K words (inductor could not generate code for a
    float64 scan over 8,513 words on an H200, a split scan, and every compiled decoding step fell back to eager;
    two scans of about 93 are short ones). The sums are in float64, so the draw is exact to float32's
    probabilities, and equal to one scan over the vocabulary but where their last bits differ
    (tests/test_decoding_draw.py: 16,000 draws of four vocabularies, all equal). A word of probability 0 is never
    returned: the target within the block is at least the smallest positive float64 and at most the block's
    sum, and the index never passes the block's last word of positive probability.

    ``uniform`` (R,) float64 in [0, 1): the row's number, drawn beforehand (the decoders draw all of a
    decode's numbers at once, :func:`uniforms`); None: drawn here from ``generator``.
    """
    rows, words = probs.shape
    size = math.isqrt(words - 1) + 1 if words > 1 else 1  # K: ceil(sqrt(V))
    blocks = -(-words // size)  # B
    padded = torch.nn.functional.pad(probs, (0, blocks * size - words)).view(rows, blocks, size)  # (R, B, K)
    outer = padded.sum(dim=2, dtype=torch.float64).cumsum(dim=1)  # (R, B) the blocks' cumulative sums
    u = torch.rand(rows, 1, dtype=torch.float64, device=probs.device, generator=generator) \
        if uniform is None else uniform[:, None]  # (R, 1) in [0, 1)
    target = (1.0 - u) * outer[:, -1:]  # (R, 1) in (0, total]
    block = torch.searchsorted(outer, target).clamp(max=blocks - 1)  # (R, 1) first block whose sum reaches it
    before = outer.gather(1, (block - 1).clamp(min=0)).masked_fill(block == 0, 0.0)  # (R, 1) the blocks before it
    inner = padded.gather(1, block[:, :, None].expand(rows, 1, size))[:, 0].to(torch.float64).cumsum(dim=1)  # (R, K)
    within = (target - before).clamp(min=torch.finfo(torch.float64).tiny)  # (R, 1) in (0, the block's sum]
    last = (inner < inner[:, -1:]).sum(dim=1, keepdim=True)  # (R, 1) the block's last word of positive probability
    word = torch.minimum(torch.searchsorted(inner, within), last)  # (R, 1) first word whose sum reaches it
    return (block * size + word).squeeze(1)  # (R,)


def uniforms(steps: int, rows: int, device: torch.device, generator: torch.Generator | None = None) -> torch.Tensor:
    """Every uniform number a decode of ``steps`` steps over ``rows`` rows draws words with: (steps, R)
    float64 in [0, 1), row p for step p. Drawn at once before the loop, so that a step is a pure function
    of its inputs (a compiled step draws nothing: inductor's random numbers differ from eager's) and the
    compiled and eager decoders read the same numbers. On the CPU, row p holds the numbers that one draw
    per step would give at step p (a decode that stops early has drawn the later rows too)."""
    return torch.rand(steps, rows, dtype=torch.float64, device=device, generator=generator)


Chooser = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]
"""(R, V) policy log-probabilities and (R,) uniform numbers (None for a choice that draws none) -> (R,) words."""


def most_likely(logprobs: torch.Tensor, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy choice: (R, V) -> (R,) the most likely word of each row; ``uniform`` is not read."""
    return logprobs.argmax(dim=1)


@dataclass(frozen=True)
class Sampler:
    """A chooser that draws from the tempered, top-k / top-p filtered policy: (R, V), (R,) -> (R,).

    A frozen value (equal settings compare equal), so that a compiled step is keyed by its settings."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __call__(self, logprobs: torch.Tensor, uniform: torch.Tensor | None) -> torch.Tensor:
        probs = filter_logits(logprobs / self.temperature, self.top_k, self.top_p).softmax(dim=-1)  # (R, V)
        return draw(probs, uniform=uniform)  # (R,)


def sampler(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> Sampler:
    """A :class:`Sampler` with these settings."""
    return Sampler(float(temperature), int(top_k), float(top_p))
