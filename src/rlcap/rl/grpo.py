"""GRPO's maths: group advantages, the clipped importance ratio (per token or per sequence) and the three ways of
averaging the per-token loss. Pure tensor functions; the loop is :mod:`rlcap.methods.grpo`, the equations and
their sources docs/RL.md ("GRPO").

With G samples y_1..y_G of an image, rewards r_i, old log-probabilities (the sampling pass's) and the policy's:

* advantages ([Shao24 sec. 4.1.2]): ``A_i = (r_i - mean(r)) / (std(r) + 1e-4)``, mean and std over the image's
  group; ``scale: batch`` divides by the std of the whole batch instead, ``none`` by nothing ([Liu25]'s Dr. GRPO);
* the ratio: per token ``rho_it = pi(y_it) / pi_old(y_it)`` ([Shao24 eq. 3]), or per sequence
  ``s_i = exp(mean_t log rho_it)`` ([Zheng25]'s GSPO), the same for every token of y_i;
* the per-token loss ``-min(rho A_i, clip(rho, 1 - eps_low, 1 + eps_high) A_i)`` plus ``beta * k3`` (rl/kl.py),
  or ``beta * rho * k3`` (``kl_ratio``: [DeepSeek25]'s unbiased KL gradient, TRL's default), eps_high > eps_low
  being DAPO's clip-higher ([Yu25 sec. 3.1]);
* its average: ``grpo``, over each sequence's tokens then over the sequences ([Shao24 eq. 3]); ``dapo``, over the
  tokens of the whole batch ([Yu25 sec. 3.3]); ``dr_grpo``, summed and divided by the constant rows x ``max_len``
  ([Liu25]).

With several rewards r_ik (``reward.weights`` w_k), ``aggregation: normalize_then_sum`` is GDPO ([Liu26]; TRL's
``multi_objective_aggregation``): each reward's own group advantage ``(r_ik - mean_k) / (std_k + 1e-4)``, summed with
the weights, then the sum normalised over the whole batch (its mean taken away, divided by its std + 1e-4), instead
of the group advantage of the weighted sum (``sum_then_normalize``, [Shao24]).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlcap.rl.kl import k3_kl, ratio_weighted_k3
from rlcap.rl.losses import masked_mean, masked_sum

GRPO_SCALES = ("group", "batch", "none")
GRPO_LOSSES = ("grpo", "dr_grpo", "dapo")
GRPO_RATIOS = ("token", "sequence")
GRPO_AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")  # TRL's multi_objective_aggregation's values
STD_EPSILON = 1e-4  # added to the std before dividing (TRL's GRPOTrainer; [Shao24] writes none)


def group_advantages(rewards: torch.Tensor, g: int, scale: str, batch_std: torch.Tensor | None = None) -> torch.Tensor:
    """Each reward minus its group's mean, divided as ``scale`` says ([Shao24 sec. 4.1.2]; [Liu25]).

    Args:
        rewards: (B*G,) rewards, the G samples of one image adjacent.
        g: samples per image (the group's size).
        scale: ``group`` (the group's std, unbiased), ``batch`` (``batch_std``, or the std of all the rewards
            given) or ``none``; ``STD_EPSILON`` is added to the std.
        batch_std: () the std of the whole batch's rewards (under torchrun, every rank's together), for ``batch``.

    Returns:
        (B*G,) advantages, detached.

    Example: rewards [1, 2, 3, 7], g=2 -> none: [-0.5, 0.5, -2, 2]; group: each divided by its group's std
    (0.70711 and 2.82843) + 1e-4 -> [-0.70701, 0.70701, -0.70708, 0.70708].
    """
    if scale not in GRPO_SCALES:
        raise ValueError(f"group_advantages: scale {scale!r} is not one of {list(GRPO_SCALES)}")
    if rewards.dim() != 1 or g < 1 or rewards.numel() % g:
        raise ValueError(f"group_advantages: expected (B*G,) rewards with G={g}, got {tuple(rewards.shape)}")
    groups = rewards.detach().float().view(-1, g)  # (B, G)
    centred = groups - groups.mean(dim=1, keepdim=True)  # (B, G)
    if scale == "group":
        # one sample per image has no spread: its std is taken as 0 (the advantage is 0 anyway)
        std = groups.std(dim=1, keepdim=True) if g > 1 else torch.zeros_like(groups[:, :1])
        centred = centred / (std + STD_EPSILON)
    elif scale == "batch":
        std = groups.flatten().std() if batch_std is None else batch_std
        centred = centred / (std + STD_EPSILON)
    return centred.flatten()


def decoupled_sum(parts: dict[str, torch.Tensor], weights: dict[str, float], g: int) -> torch.Tensor:
    """GDPO's first stage ([Liu26]): each reward's own group advantage, ``(r_k - mean_k) / (std_k + 1e-4)`` over
    its image's group (unbiased std), times its weight, summed over the rewards.

    Args:
        parts: name -> (B*G,) each reward's own unweighted scores, the G samples of one image adjacent.
        weights: name -> weight (``reward.weights``), every name of ``parts``.
        g: samples per image.

    Returns:
        (B*G,) the sum, detached; :func:`batch_normalised` makes it the advantage.

    Example: g=2, rewards a [0, 1, 0, 1] and b [0, 1, 0, 0], weights 1 and 1 -> [-1.41402, 1.41402, -0.70701,
    0.70701]: the pair (1, 1) against (0, 0) earns twice what (1, 0) does, where the group advantage of the sums
    (sum_then_normalize) gives both groups +-0.70701 ([Liu26]'s collapse of distinct reward combinations).
    """
    missing = sorted(set(parts) - set(weights))
    if missing or not parts:
        raise ValueError(f"decoupled_sum: no weight for {missing}" if missing else "decoupled_sum: no rewards given")
    return sum(weights[name] * group_advantages(values, g, "group") for name, values in parts.items())


def batch_normalised(values: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """GDPO's second stage ([Liu26]): ``(values - mean) / (std + 1e-4)``, ``mean`` and ``std`` the whole batch's
    (under torchrun, every rank's together), so that the advantage's range does not grow with the number of
    rewards. (B*G,) detached."""
    return ((values.detach().float() - mean) / (std + STD_EPSILON)).detach()


def ended_only(mask: torch.Tensor, tokens: torch.Tensor, eos: int) -> torch.Tensor:
    """``mask`` (B, T) with the rows of captions that never wrote ``eos`` (cut by the length limit) cleared:
    ``mask_truncated`` ([Yu25 sec. 3.4]'s overlong filtering; TRL's ``mask_truncated_completions``). (B, T) bool."""
    ended = (tokens == eos).any(dim=1, keepdim=True)  # (B, 1)
    return mask.bool() & ended


def log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """log of the importance ratio: ``token``, (B, T) ``log pi - log pi_old`` per token ([Shao24 eq. 3]);
    ``sequence``, (B, 1) its mean over each sequence's masked tokens ([Zheng25]). 0 at masked positions
    of the token level."""
    if level not in GRPO_RATIOS:
        raise ValueError(f"log_ratio: level {level!r} is not one of {list(GRPO_RATIOS)}")
    diff = torch.where(mask.bool(), logprobs.float() - old_logprobs.detach().float(), 0.0)  # (B, T)
    return diff if level == "token" else masked_mean(diff, mask, dim=1)[:, None]  # (B, T) or (B, 1)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss: str, max_len: int) -> torch.Tensor:
    """The mean of a per-token loss (B, T) over ``mask`` (B, T) as ``loss`` says: ``grpo`` (per sequence, then
    over the sequences), ``dapo`` (over the batch's tokens) or ``dr_grpo`` (summed, / (B * max_len)). ()"""
    if loss == "grpo":
        return masked_mean(per_token, mask, dim=1).mean()
    if loss == "dapo":
        return masked_mean(per_token, mask)
    if loss == "dr_grpo":
        return masked_sum(per_token, mask) / (per_token.size(0) * max_len)
    raise ValueError(f"aggregate: loss {loss!r} is not one of {list(GRPO_LOSSES)}")


class GrpoLoss(NamedTuple):
    loss: torch.Tensor  # () what the optimizer steps on
    clipped: torch.Tensor  # () share of the masked tokens whose ratio is clipped (no gradient), detached
    kl: torch.Tensor | None  # () mean k3 over the masked tokens, detached; None without a reference


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
              epsilon: float, epsilon_high: float, ratio: str, loss: str, max_len: int,
              ref_logprobs: torch.Tensor | None = None, beta: float = 0.0, kl_ratio: bool = False) -> GrpoLoss:
    """GRPO's clipped objective, negated ([Shao24 eq. 3]; clip-higher [Yu25 sec. 3.1]; GSPO [Zheng25]).

    Args:
        logprobs: (B, T) log pi_theta of the sampled tokens, with gradient.
        old_logprobs: (B, T) their log-probabilities in the sampling pass (constants).
        advantages: (B,) one per sequence (:func:`group_advantages`), constants.
        mask: (B, T) the tokens that count (:func:`ended_only` for ``mask_truncated``).
        epsilon, epsilon_high: the ratio is clipped to [1 - epsilon, 1 + epsilon_high].
        ratio: ``token`` or ``sequence`` (:func:`log_ratio`).
        loss: ``grpo``, ``dapo`` or ``dr_grpo`` (:func:`aggregate`); ``max_len``: dr_grpo's constant.
        ref_logprobs: (B, T) log pi_ref of the tokens, for the KL term ``beta * k3`` added to each token's loss
            before the average, as [Shao24 eq. 3] writes it; None: no KL term.
        kl_ratio: the KL term is ``beta * rho * k3`` instead, rho the ratio of ``ratio`` with its gradient
            (:func:`rlcap.rl.kl.ratio_weighted_k3`; TRL's ``use_bias_correction_kl``). The logged ``kl`` is k3's
            mean either way.

    Returns:
        :class:`GrpoLoss`. At the first update (pi = pi_old: every ratio 1), no clipping acts and the gradient is
        ``-sum_i A_i sum_t grad log pi(y_it)`` divided as ``loss`` says (for ``sequence`` and ``dapo`` too):
        REINFORCE with the group's mean as the baseline (docs/RL.md, "GRPO and SCST").
    """
    if logprobs.dim() != 2 or logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"grpo_loss: expected logprobs, old_logprobs and mask of one shape (B, T), got "
                         f"{tuple(logprobs.shape)}, {tuple(old_logprobs.shape)}, {tuple(mask.shape)}")
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"grpo_loss: expected advantages ({logprobs.size(0)},), got {tuple(advantages.shape)}")
    adv = advantages.detach().float()[:, None]  # (B, 1)
    rho = log_ratio(logprobs, old_logprobs, mask, ratio).exp()  # (B, T) or (B, 1)
    clipped_rho = rho.clamp(1.0 - epsilon, 1.0 + epsilon_high)
    per_token = -torch.minimum(rho * adv, clipped_rho * adv).expand(mask.shape)  # (B, T)
    # where the clipped term is the smaller one and differs, the gradient is 0: the update is held back
    held = ((rho < 1.0 - epsilon) & (adv < 0)) | ((rho > 1.0 + epsilon_high) & (adv > 0))  # (B, T) or (B, 1)
    kl = None
    if ref_logprobs is not None:
        k3 = k3_kl(logprobs, ref_logprobs)  # (B, T)
        per_token = per_token + beta * (ratio_weighted_k3(logprobs, ref_logprobs, rho) if kl_ratio else k3)
        kl = masked_mean(k3.detach(), mask)
    clipped = masked_mean(held.expand(mask.shape).float(), mask)
    return GrpoLoss(aggregate(per_token, mask, loss, max_len), clipped, kl)
