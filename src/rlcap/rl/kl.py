"""The KL term to a reference policy: the per-token k3 estimator and its mean over a batch's words.

Pure tensor functions. GRPO ([Shao24 eq. 4]) holds the policy near a reference policy pi_ref (the run's starting
weights) with ``beta * D_KL(pi_theta || pi_ref)``, estimated per sampled token with the unbiased, always
non-negative estimator Schulman calls k3 ([Schulman20])::

    k3 = exp(r) - r - 1,    r = log pi_ref(w_t | w_<t, x) - log pi_theta(w_t | w_<t, x)

Its expectation over w_t ~ pi_theta is KL(pi_theta || pi_ref) exactly, for each word position (the
test checks it against the closed form over a whole vocabulary), and it is 0 for a word both policies give the
same probability. Its gradient with respect to theta is ``(1 - exp(r)) grad log pi_theta``: the reference's
log-probabilities are constants (the reference never trains). The sampled words being constants of the loss,
that gradient's expectation over w_t ~ pi_theta is ``-sum_w pi_ref(w) grad log pi_theta(w)``, the gradient of
KL(pi_ref || pi_theta), not of the KL the value estimates. :func:`ratio_weighted_k3` (``grpo.kl_ratio``,
TRL's ``use_bias_correction_kl``) multiplies k3 by the importance ratio, whose gradient then adds
``k3 grad log pi_theta``: on the policy's own samples the sum is ``-r grad log pi_theta``, whose expectation is
the gradient of KL(pi_theta || pi_ref) ([DeepSeek25]). docs/RL.md, "The KL term".
"""

from __future__ import annotations

import torch

from rlcap.rl.losses import masked_mean


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref) ([Schulman20]; [Shao24 eq. 4]).

    Args:
        logprobs: (B, T) log pi_theta of each sampled token, with gradient.
        ref_logprobs: (B, T) log pi_ref of the same tokens (detached here: the reference is a constant).

    Returns:
        (B, T) ``exp(r) - r - 1`` with ``r = ref_logprobs - logprobs``: >= 0, 0 where the two agree. Padded
        positions hold whatever their inputs give (0 when both are 0, decoding's convention): mask them.

    Example: logprobs [[-1.0, -2.0]], ref_logprobs [[-1.0, -1.0]] -> [[0, e - 2]] = [[0, 0.71828]].
    """
    if logprobs.shape != ref_logprobs.shape or logprobs.dim() != 2:
        raise ValueError(f"k3_kl: expected logprobs and ref_logprobs of one shape (B, T), got "
                         f"{tuple(logprobs.shape)} and {tuple(ref_logprobs.shape)}")
    r = ref_logprobs.detach().float() - logprobs.float()  # (B, T), fp32 under autocast too
    return torch.expm1(r) - r  # exp(r) - 1 - r, without the cancellation of exp(r) - 1 near r = 0


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The k3 estimate averaged over the words of a batch: ``sum_{i,t} k3_it m_it / sum_{i,t} m_it``.

    The same normalisation as :func:`rlcap.rl.losses.reinforce_loss` (the words of the whole batch), so that a
    loop adds ``beta * kl_penalty`` to its loss with beta weighing each word's KL as the loss weighs each
    word's advantage, and the two scale alike under torchrun (``word_share``).

    Args:
        logprobs: (B, T) log pi_theta of the tokens, with gradient.
        ref_logprobs: (B, T) log pi_ref of the same tokens.
        mask: (B, T) the tokens the loss counts (bool or float).

    Returns:
        () the mean k3 over the masked tokens; 0 for an empty mask.

    Example: logprobs [[-1, -2], [-1, -3]], ref_logprobs [[-1, -1], [-2, -3]], mask [[1, 1], [1, 0]]
    -> (0 + (e - 2) + (e^-1 - 0)) / 3 = (0.71828 + 0.36788) / 3 = 0.36205.
    """
    return masked_mean(k3_kl(logprobs, ref_logprobs), mask)


def ratio_weighted_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """k3 multiplied by the importance ratio pi_theta / pi_old, the ratio with its gradient ([DeepSeek25]'s
    unbiased KL estimate; TRL's ``use_bias_correction_kl``, its default).

    On the policy's own samples (pi_old = pi_theta: the ratio is 1, its gradient ``grad log pi_theta``), the
    gradient is ``(1 - exp(r) + k3) grad log pi_theta = -r grad log pi_theta`` per word, with expectation
    ``grad KL(pi_theta || pi_ref)``; k3's own is ``(1 - exp(r)) grad log pi_theta``, with expectation
    ``grad KL(pi_ref || pi_theta)`` (see the module's docstring).

    Args:
        logprobs: (B, T) log pi_theta of each sampled token, with gradient.
        ref_logprobs: (B, T) log pi_ref of the same tokens (constants).
        ratio: (B, T) the per-token ratio, or (B, 1) one per sequence (GSPO's, broadcast over its tokens as TRL
            does), with gradient.

    Returns:
        (B, T) ``ratio * k3``; its value equals k3's where the ratio is 1.

    Example: logprobs [[-1.0, -2.0]], ref_logprobs [[-1.0, -1.0]], ratio [[1.0, 2.0]] -> [[0, 2 (e - 2)]]
    = [[0, 1.43656]]; with the ratio exp(logprobs - logprobs.detach()) (1, on the policy's samples) the
    gradient with respect to logprobs is -r = [[0, -1]].
    """
    if ratio.dim() != 2 or ratio.size(0) != logprobs.size(0) or ratio.size(1) not in (1, logprobs.size(1)):
        raise ValueError(f"ratio_weighted_k3: expected a ratio of shape ({logprobs.size(0)}, {logprobs.size(1)}) "
                         f"or ({logprobs.size(0)}, 1), got {tuple(ratio.shape)}")
    return ratio.float() * k3_kl(logprobs, ref_logprobs)  # (B, T)
