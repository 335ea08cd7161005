"""Retrieval rewards of distinctive captioning (002_b2d5a89fd5f9a310.txt): CLIP-S and eq. 2's
contrastive rewards, from a frozen retriever and its image bank.

``reward.paths.retrieval``: a dual-encoder checkpoint (``rlcap retrieval train``) or a local CLIP
folder; ``reward.paths.retrieval_bank``: the image bank built with it (``rlcap retrieval index``).

Pools (002 sec. 3.4). The *text pool* is the captions scored in the call (a loop passes its beam,
greedy and ground-truth captions together) plus the ground-truth captions of the batch's images
not among them; the *image pool* is the batch's distinct images plus up to
``reward.hard_negatives`` mined neighbours of each. Each caption's own image is its positive.
``reward.retrieval_tau`` is eq. 2's tau; 0 takes the retriever's own training temperature.

- ``clip_s``: 2.5 * max(cos, 0) with its image (Hessel et al. 2021);
- ``i2t``, ``t2i``: eq. 2's two halves (002's RL-Unidirectional uses ``i2t`` alone);
- ``bicont``: eq. 2, i2t + t2i.
"""

from __future__ import annotations

import torch

from rlcap.models.retriever import load_retriever
from rlcap.rewards.batch import RewardBatch, check_batch
from rlcap.rewards.context import RewardContext
from rlcap.rewards.image_bank import ImageBank, load_image_bank
from rlcap.rl.contrastive import bicont_reward, clip_s, i2t_reward, t2i_reward

KINDS = {"i2t": i2t_reward, "t2i": t2i_reward, "bicont": bicont_reward}


class RetrievalReward:
    """``(captions, batch) -> (N,)``: ``kind`` one of clip_s, i2t, t2i, bicont."""

    def __init__(self, retriever, bank: ImageBank, kind: str, tau: float = 0.0, hard_negatives: int = 5):
        if kind != "clip_s" and kind not in KINDS:
            raise ValueError(f"retrieval reward: unknown kind {kind!r}; expected clip_s, {', '.join(KINDS)}")
        self.retriever, self.bank, self.kind = retriever, bank, kind
        self.tau = tau if tau > 0 else retriever.temperature
        self.hard_negatives = hard_negatives

    @torch.no_grad()
    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        images, owner = self.bank.pool(batch.image_ids, 0 if self.kind == "clip_s" else self.hard_negatives)
        texts = self.retriever.embed_captions(captions)  # (N, D)
        if self.kind == "clip_s":
            return clip_s(texts, images[owner])
        given = set(captions)
        extra, extra_owner = [], []
        for image_id, refs, row in _distinct(batch.image_ids, batch.refs, owner):
            for ref in refs:
                if ref not in given:
                    extra.append(ref)
                    extra_owner.append(row)
        pool = torch.cat([texts, self.retriever.embed_captions(extra)]) if extra else texts  # (N + G, D)
        pool_owner = torch.cat([owner, torch.tensor(extra_owner, dtype=torch.long)])
        return KINDS[self.kind](pool, images, pool_owner, self.tau)[: len(captions)]


def _distinct(image_ids: list[str], refs: list[list[str]], owner: torch.Tensor):
    """(id, references, pool row) of each distinct image of the batch, in order."""
    seen: set[str] = set()
    for k, image_id in enumerate(image_ids):
        if image_id not in seen:
            seen.add(image_id)
            yield image_id, refs[k], int(owner[k])


def make_retrieval_reward(ctx: RewardContext, kind: str) -> RetrievalReward:
    retriever = load_retriever(ctx.path("retrieval"), ctx.device)
    bank = load_image_bank(ctx.path("retrieval_bank"))
    return RetrievalReward(retriever, bank, kind, ctx.retrieval_tau, ctx.hard_negatives)
