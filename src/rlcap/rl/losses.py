"""Losses for captioning: masked means, REINFORCE, entropy bonus and word-level cross-entropy.

Pure tensor functions in the style of torchtune's ``rlhf/loss``: shapes in the docstrings, no
model or reward code. ``mask`` arguments may be bool or float (1 = a real token, 0 = padding)
and are always cast to the dtype of the values.

Normalisation (see docs/RL.md): :func:`reinforce_loss` divides the summed token terms by the
number of valid tokens in the whole batch, as self-critical.pytorch's ``RewardCriterion``
does. Within one batch this is the per-sequence-sum estimator (Williams 1992; Chen & Jin
eq. 15) times the positive constant ``num_sequences / num_tokens``: the gradient direction
is unchanged and its scale no longer grows with caption length, so the same learning rate
works for XE and RL. A per-sequence length-normalised mean would instead change the
relative weight of long and short samples, which the estimator does not allow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# A mask that sums to zero (an empty batch, or only empty captions with EOS not counted)
# gives 0 rather than 0/0.
_MIN_DENOMINATOR = 1e-8


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x * mask`` over ``dim`` (all elements when ``dim`` is None). Shapes as ``x``."""
    m = mask.to(x.dtype)
    return (x * m).sum() if dim is None else (x * m).sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set.

    Args:
        x: (..., T) values.
        mask: same shape as ``x``; bool or float weights.
        dim: reduce over this dimension; None reduces over every element to a scalar.

    Returns:
        ``sum(x * mask, dim) / sum(mask, dim)``; 0 wherever the mask sums to 0 (never NaN).

    Example: x [[1, 2, 3], [4, 5, 6]], mask [[1, 1, 0], [0, 0, 0]] -> 1.5 (dim=None),
    [1.5, 0.0] (dim=1).
    """
    if x.shape != mask.shape:
        raise ValueError(f"masked_mean: x {tuple(x.shape)} and mask {tuple(mask.shape)} differ in shape")
    m = mask.to(x.dtype)
    total = masked_sum(x, m, dim)
    count = m.sum() if dim is None else m.sum(dim=dim)
    return total / count.clamp(min=_MIN_DENOMINATOR)


def _check_sequences(name: str, logprobs: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor) -> None:
    if logprobs.dim() != 2 or logprobs.shape != mask.shape:
        raise ValueError(
            f"{name}: expected logprobs and mask of one shape (B, T), "
            f"got {tuple(logprobs.shape)} and {tuple(mask.shape)}")
    b, t = logprobs.shape
    if advantages.shape not in ((b,), (b, t)):
        raise ValueError(f"{name}: expected advantages of shape ({b},) (one per caption) or ({b}, {t}) "
                         f"(one per word), got {tuple(advantages.shape)}")


def reinforce_loss(logprobs: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """REINFORCE surrogate loss ``-sum_{i,t} A_it * log p(w_it) * m_it / sum_{i,t} m_it``.

    Args:
        logprobs: (B, T) log-probability of each sampled token under the policy (with grad).
        mask: (B, T) 1 for the tokens the reward counts (the words, plus EOS when it counts).
        advantages: treated as a constant (detached), either
            (B,) reward minus baseline per caption, the same for each of its tokens
            (``A_it = A_i``), or
            (B, T) one advantage per word (``rlcap.rl.credit``: value, TD or Monte-Carlo
            credit); entries at padding are ignored.

    Returns:
        () scalar loss; 0 when the mask is empty. The normalisation is the same for both
        shapes, so (B, T) advantages that repeat A_i along each row give the (B,) loss.

    Example: logprobs [[-1, -2], [-3, -4]], mask [[1, 1], [1, 0]], advantages [1, -2]
    -> -((-1) + (-2) + (-2)(-3)) / 3 = -1.0; per word, advantages [[1, 0.5], [-2, 9]]
    -> -((-1) + 0.5(-2) + (-2)(-3)) / 3 = -4/3.
    """
    _check_sequences("reinforce_loss", logprobs, mask, advantages)
    logprobs = logprobs.float()  # fp32 under autocast too
    adv = advantages.detach().to(logprobs.dtype)
    if adv.dim() == 1:
        adv = adv[:, None]  # (B, 1): one advantage for every token of the caption
    weighted = -adv * logprobs  # (B, T)
    return masked_mean(weighted, mask)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean per-step policy entropy over the valid tokens (maximum-entropy RL, Mnih et al. 2016).

    This is word-level exploration, the SLL-ME comparison in Chen & Jin ([Chen20],
    sec. 4.1 and 5.2, weight 1e-2): ``H(p(w_t | w_<t, x))`` averaged over valid steps. The
    training loop *subtracts* ``weight * entropy_bonus`` from its loss.

    Args:
        entropy: (B, T) entropy of the policy's next-word distribution at each step (with grad).
        mask: (B, T) valid steps.

    Returns:
        () scalar, >= 0.
    """
    if entropy.shape != mask.shape or entropy.dim() != 2:
        raise ValueError(f"entropy_bonus: expected entropy and mask of one shape (B, T), got "
                         f"{tuple(entropy.shape)} and {tuple(mask.shape)}")
    return masked_mean(entropy, mask)


def xe_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
            label_smoothing: float = 0.0) -> torch.Tensor:
    """Word-level cross-entropy (teacher forcing), averaged over the valid target tokens.

    Args:
        logits: (B, T, V) scores; position t predicts ``targets[:, t]``.
        targets: (B, T) int64 word ids.
        mask: (B, T) 1 for real targets (words and the final EOS), 0 for padding.
        label_smoothing: in [0, 1); mass spread uniformly over all V classes as in
            :func:`torch.nn.functional.cross_entropy`.

    Returns:
        () scalar: mean over valid tokens of ``-log softmax(logits)[target]`` (smoothed). A -inf column (a token
        the model cannot write: a transformers policy's PAD when the model has none, or a second copy of a
        shared id) counts neither at a padded target, whose term is dropped rather than multiplied by 0, nor in
        the smoothing, which spreads its mass over the finite columns only (all V of them without such columns).
    """
    if logits.dim() != 3 or logits.shape[:2] != targets.shape or targets.shape != mask.shape:
        raise ValueError(f"xe_loss: expected logits (B, T, V), targets and mask (B, T); got {tuple(logits.shape)}, "
                         f"{tuple(targets.shape)}, {tuple(mask.shape)}")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"xe_loss: label_smoothing must be in [0, 1), got {label_smoothing}")
    logits = logits.float()  # fp32 under autocast too: the loss of low-precision scores, computed in fp32
    logp = F.log_softmax(logits, dim=-1)  # (B, T, V)
    per_token = -logp.gather(-1, targets[..., None]).squeeze(-1)  # (B, T)
    if label_smoothing:
        finite = torch.isfinite(logits)  # (B, T, V)
        spread = -logp.masked_fill(~finite, 0.0).sum(-1) / finite.sum(-1).clamp(min=1)  # (B, T)
        per_token = (1.0 - label_smoothing) * per_token + label_smoothing * spread
    return masked_mean(per_token.masked_fill(mask == 0, 0.0), mask)


def sequence_logprob(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``log p(y | x) = sum_t log p(w_t | w_<t, x)`` over valid steps: (B, T) -> (B,)."""
    if logprobs.shape != mask.shape:
        raise ValueError(f"sequence_logprob: logprobs {tuple(logprobs.shape)} and mask {tuple(mask.shape)} differ")
    return masked_sum(logprobs, mask, dim=-1)
