"""The visual-semantic embedding's ranking loss and its reward: pure tensor maths.

[Shi18 sec. 3.3.1]: images and captions are mapped linearly
into one space; eq. 5 trains the maps with a bidirectional hinge ranking loss against the other
images and captions of the batch, and eq. 6's reward is the cosine between a caption and its
image. The printed equations are garbled; docs/RL.md ("Actor-critic ([Shi18])") says how they are
read here: the form of Ren et al. 2017 (embedding reward for actor-critic captioning), of which
[Shi18]'s sec. 3.3 is a retelling, with [Shi18]'s penalty gamma as the margin.
"""

from __future__ import annotations

import torch



def _check_pairs(name: str, images: torch.Tensor, texts: torch.Tensor) -> None:
    if images.dim() != 2 or images.shape != texts.shape:
        raise ValueError(f"{name}: expected images and texts of one shape (B, D), got "
                         f"{tuple(images.shape)} and {tuple(texts.shape)}")


def ranking_loss(images: torch.Tensor, texts: torch.Tensor, margin: float,
                 not_negative: torch.Tensor | None = None) -> torch.Tensor:
    """Bidirectional hinge ranking loss over a batch of matching pairs ([Shi18 eq. 5]).

    ``s(i, j) = images[i] . texts[j]``; pair ``i`` matches. Every other caption ``j`` of the batch
    is a negative for image ``i``, every other image a negative for caption ``j``::

        L = 1/B sum_i sum_{j != i} max(0, margin - s(i, i) + s(i, j))     (image -> caption)
          + 1/B sum_j sum_{i != j} max(0, margin - s(j, j) + s(i, j))     (caption -> image)

    Args:
        images: (B, D) image embeddings (L2-normalised by the model, so ``s`` is a cosine).
        texts: (B, D) caption embeddings; row i describes image i.
        margin: the hinge's margin, [Shi18]'s gamma (in (0, 1)).
        not_negative: optional (B, B) bool, True where pair (i, j) must not count as a negative
            (e.g. caption j is word for word caption i); the diagonal never counts.

    Returns:
        () scalar, the sum over negatives divided by B.

    Example: images [[1, 0], [0, 1]], texts [[1, 0], [0.6, 0.8]], margin 0.5:
    s = [[1, 0.6], [0, 0.8]]; image 0 vs caption 1: 0.5 - 1 + 0.6 = 0.1; image 1 vs caption 0:
    0.5 - 0.8 + 0 < 0; caption 0 vs image 1: 0.5 - 1 + 0 < 0; caption 1 vs image 0:
    0.5 - 0.8 + 0.6 = 0.3 -> (0.1 + 0.3) / 2 = 0.2.
    """
    _check_pairs("ranking_loss", images, texts)
    b = images.size(0)
    sim = images.float() @ texts.float().T  # (B, B) s(i, j): image i, caption j, fp32
    pos = sim.diagonal()  # (B,) s(i, i)
    skip = torch.eye(b, dtype=torch.bool, device=sim.device)
    if not_negative is not None:
        if not_negative.shape != (b, b):
            raise ValueError(f"ranking_loss: expected not_negative of shape ({b}, {b}), "
                             f"got {tuple(not_negative.shape)}")
        skip = skip | not_negative.bool()
    to_caption = (margin - pos[:, None] + sim).clamp(min=0)  # (B, B) image i ranks caption j
    to_image = (margin - pos[None, :] + sim).clamp(min=0)  # (B, B) caption j ranks image i
    zero = torch.zeros((), dtype=sim.dtype, device=sim.device)
    return (torch.where(skip, zero, to_caption).sum() + torch.where(skip, zero, to_image).sum()) / max(b, 1)


def cosine_reward(images: torch.Tensor, texts: torch.Tensor) -> torch.Tensor:
    """Eq. 6: the cosine between each caption's embedding and its image's, in [-1, 1].

    Args:
        images: (N, D) image embeddings, one row per caption; need not be normalised.
        texts: (N, D) caption embeddings.

    Returns:
        (N,) ``images[n] . texts[n] / (|images[n]| |texts[n]|)``.

    Example: images [[3, 4]], texts [[4, 3]] -> [24 / 25] = [0.96].
    """
    _check_pairs("cosine_reward", images, texts)
    return torch.nn.functional.cosine_similarity(images, texts, dim=1)
