"""Contrastive maths of distinctive captioning ([Chaffin24]): pure tensor functions.

Embeddings are L2-normalised, so ``s(x, i) = f_T(x) . f_I(i)`` is a cosine. A *text pool* holds
N captions, ``owner[n]`` the image (a row of the image pool) caption n describes; the *image pool*
holds M images: the batch's images and, for [Chaffin24]'s text-to-image reward, similar images mined from
the dataset (sec. 3.4).

- :func:`info_nce_loss`: the symmetric contrastive loss (CLIP's) that trains rlcap's dual encoder.
- :func:`i2t_reward`, :func:`t2i_reward`, :func:`bicont_reward`: eq. 2, the decoupled form of
  Yeh et al. 2022 (the positive pair is left out of the denominator)::

      r_i2t(x_c) = tau * log( e^{s(x_c, i_c)/tau} / sum_{x in T \\ x_c} e^{s(x, i_c)/tau} )
      r_t2i(x_c) = tau * log( e^{s(x_c, i_c)/tau} / sum_{i in I \\ i_c} e^{s(x_c, i)/tau} )
      r_bicont   = r_i2t + r_t2i

  Each is ``s(x_c, i_c)`` minus a soft maximum (tau * log-sum-exp) of the other pairs: the
  strongest baseline in the pool. Only x_c itself leaves the text denominator: another caption of
  the same image (its ground truth, its greedy caption) stays in it as a baseline, which is how
  the reward reduces to SCST's when the greedy caption is the most similar (sec. 3.4).
- :func:`clip_s`: CLIP-S of Hessel et al. 2021, ``w * max(cos, 0)`` with w = 2.5, the similarity
  reward of the SCST-Discriminator variant (Table 1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlcap.host_sync import device_check
from rlcap.metrics.clip_score import CLIP_S_WEIGHT, clip_s as metric_clip_s



def info_nce_loss(images: torch.Tensor, texts: torch.Tensor, temperature: float,
                  not_negative: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric InfoNCE over B matching pairs (row i of each describes the same image).

    ``(CE(S / t, I) + CE(S^T / t, I)) / 2`` with ``S = images @ texts.T`` (B, B): each image must
    pick its caption among the batch's captions, and each caption its image. ``not_negative``
    (B, B) bool: pairs (i, j), i != j, left out of both softmaxes (caption j word for word caption
    i, frequent on shapes). -> () scalar.
    """
    if images.dim() != 2 or images.shape != texts.shape:
        raise ValueError(f"info_nce_loss: expected images and texts of one shape (B, D), got "
                         f"{tuple(images.shape)} and {tuple(texts.shape)}")
    logits = images.float() @ texts.float().T / temperature  # (B, B), fp32: a loss outside autocast
    if not_negative is not None:
        off_diagonal = ~torch.eye(images.size(0), dtype=torch.bool, device=images.device)
        logits = logits.masked_fill(not_negative.bool() & off_diagonal, float("-inf"))
    target = torch.arange(images.size(0), device=images.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def _check_pools(texts: torch.Tensor, images: torch.Tensor, owner: torch.Tensor) -> None:
    if texts.dim() != 2 or images.dim() != 2 or texts.size(1) != images.size(1):
        raise ValueError(f"contrastive reward: expected texts (N, D) and images (M, D), got "
                         f"{tuple(texts.shape)} and {tuple(images.shape)}")
    if owner.shape != (texts.size(0),):
        raise ValueError(f"contrastive reward: owner must be ({texts.size(0)},), got {tuple(owner.shape)}")
    message = "contrastive reward: owner holds a row outside the image pool"
    device_check(((owner < 0) | (owner >= images.size(0))).any(), lambda: ValueError(message), message)


def _decoupled(positive: torch.Tensor, scores: torch.Tensor, leave_out: torch.Tensor, tau: float) -> torch.Tensor:
    """positive (N,), scores (N, K) of the pool, leave_out (N, K) bool -> tau * (pos/tau - LSE of the rest)."""
    rest = scores.masked_fill(leave_out, float("-inf")) / tau  # (N, K)
    return positive - tau * torch.logsumexp(rest, dim=1)


def i2t_reward(texts: torch.Tensor, images: torch.Tensor, owner: torch.Tensor, tau: float) -> torch.Tensor:
    """Image-to-text reward of eq. 2: caption n against every other caption of the pool, as seen
    from its image. texts (N, D), images (M, D), owner (N,) -> (N,). A pool of one caption has no
    baseline: +inf (tau times the log of an empty sum, -inf, subtracted; give a pool of two or more)."""
    _check_pools(texts, images, owner)
    sim = images[owner].float() @ texts.float().T  # (N, N): row n, s(x, i_{c(n)}) for every caption x of the pool
    positive = sim.diagonal()  # (N,) s(x_n, i_{c(n)})
    itself = torch.eye(texts.size(0), dtype=torch.bool, device=texts.device)
    return _decoupled(positive, sim, itself, tau)


def t2i_reward(texts: torch.Tensor, images: torch.Tensor, owner: torch.Tensor, tau: float) -> torch.Tensor:
    """Text-to-image reward of eq. 2: caption n's image against every other image of the pool.
    texts (N, D), images (M, D), owner (N,) -> (N,)."""
    _check_pools(texts, images, owner)
    sim = texts.float() @ images.float().T  # (N, M) s(x_n, i) for every image i of the pool
    positive = sim.gather(1, owner[:, None]).squeeze(1)  # (N,)
    own = owner[:, None] == torch.arange(images.size(0), device=owner.device)  # (N, M) (one_hot reads the values)
    return _decoupled(positive, sim, own, tau)


def bicont_reward(texts: torch.Tensor, images: torch.Tensor, owner: torch.Tensor, tau: float) -> torch.Tensor:
    """The bidirectional contrastive reward of eq. 2, r_i2t + r_t2i -> (N,)."""
    return i2t_reward(texts, images, owner, tau) + t2i_reward(texts, images, owner, tau)


def clip_s(texts: torch.Tensor, images: torch.Tensor, weight: float = CLIP_S_WEIGHT) -> torch.Tensor:
    """CLIP-S (Hessel et al. 2021): ``weight * max(cos(x, i), 0)`` for matching unit rows (N, D) -> (N,), by the
    metric's formula (:func:`rlcap.metrics.clip_score.clip_s`: one implementation)."""
    if texts.shape != images.shape:
        raise ValueError(f"clip_s: expected texts and images of one shape, got {tuple(texts.shape)} "
                         f"and {tuple(images.shape)}")
    return metric_clip_s((texts * images).sum(1), weight)


def discriminator_loss(human: torch.Tensor, generated: torch.Tensor) -> torch.Tensor:
    """The discriminator's binary cross-entropy ([Chaffin24 sec. 3.2]): logits of ground-truth captions
    (N_h,) labelled 1 and of generated ones (N_g,) labelled 0, each set weighing half. -> ()"""
    return (F.binary_cross_entropy_with_logits(human, torch.ones_like(human))
            + F.binary_cross_entropy_with_logits(generated, torch.zeros_like(generated))) / 2


def weighted_reward(similarity: torch.Tensor, p_human: torch.Tensor, alpha: float) -> torch.Tensor:
    """Eq. 3's reward r(x) = alpha * r_sim(x) + (1 - alpha) * p_D(x), elementwise."""
    return alpha * similarity + (1.0 - alpha) * p_human
