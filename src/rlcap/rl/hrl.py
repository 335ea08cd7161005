"""The maths of [Wang18] that :mod:`rlcap.rl.credit` does not already hold: pure tensor functions.

- :func:`delta_rewards`: sec. 3.3.3's immediate reward f(a_t) = CIDEr(sent + a_t) - CIDEr(sent),
  from the scores of every prefix of a caption (the empty prefix scores 0). Their discounted sums
  are the worker's returns (eq. 24, :func:`rlcap.rl.credit.discounted_returns`) and, summed per
  segment, the manager's (eq. 25, :func:`rlcap.rl.credit.segment_returns`).
- :func:`critic_loss`: eq. 10, the internal critic's negative log-likelihood of the true
  end-of-segment signals z*_t, averaged over the valid words.
- :func:`segment_end_targets`: z*_t from the word index at which each segment starts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def delta_rewards(prefix_scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """prefix_scores (B, T): score of the caption's first t+1 words at step t; mask (B, T) valid steps
    -> (B, T) f(a_t) = s_t - s_{t-1} with s_{-1} = 0; 0 at padding. Their sum over a caption is its score.

    Example: scores [[0.2, 0.5, 0.4]], mask [[1, 1, 1]] -> [[0.2, 0.3, -0.1]].
    """
    if prefix_scores.shape != mask.shape or prefix_scores.dim() != 2:
        raise ValueError(f"delta_rewards: expected prefix_scores and mask of one shape (B, T), got "
                         f"{tuple(prefix_scores.shape)} and {tuple(mask.shape)}")
    valid = mask != 0
    scores = torch.where(valid, prefix_scores, 0.0)
    previous = F.pad(scores[:, :-1], (1, 0))  # (B, T) s_{t-1}, 0 before the first word
    return torch.where(valid, scores - previous, 0.0).detach()


def critic_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 10: -mean over valid words of log p(z*_t), p(z_t) = sigmoid(logit). logits, targets, mask (B, T) -> ()."""
    if not logits.shape == targets.shape == mask.shape:
        raise ValueError("critic_loss: logits, targets and mask must have one shape (B, T)")
    valid = mask != 0
    nll = F.binary_cross_entropy_with_logits(logits, targets.float(), reduction="none")
    return (nll * valid).sum() / valid.sum().clamp(min=1)


def segment_end_targets(starts: list[list[int]], length: int) -> torch.Tensor:
    """Per caption, the word indices at which its segments start (the first is 0 or the first word of
    a segment) -> (B, length) z*: 1 at the last word of each segment (the word before the next
    start, and the caption's last word), 0 elsewhere.

    Example: starts [[0, 3]], length 5 -> [[0, 0, 1, 0, 1]].
    """
    out = torch.zeros(len(starts), length)  # cpu: targets built from captions, moved with the data
    for row, s in enumerate(starts):
        for nxt in s[1:]:
            if 0 < nxt <= length:
                out[row, nxt - 1] = 1.0
        out[row, length - 1] = 1.0
    return out
