"""Retrieval rewards of distinctive captioning ([Chaffin24]): CLIP-S and eq. 2's
contrastive rewards, from a frozen retriever and its image bank.

``reward.paths.retrieval``: a dual-encoder checkpoint (``rlcap retrieval train``) or a local CLIP
folder; ``reward.paths.retrieval_bank``: the image bank built with it (``rlcap retrieval index``).

Pools ([Chaffin24 sec. 3.4]). The *text pool* is the captions scored in the call (a loop passes its beam,
greedy and ground-truth captions together) plus the ground-truth captions of the batch's images
not among them; the *image pool* is the batch's distinct images plus up to
``reward.hard_negatives`` mined neighbours of each. Each caption's own image is its positive.
With ``reward.negative_captions`` N > 0 the text pool also holds the first N ground-truth captions
of each mined neighbour: [Chaffin24] adds the mined images "to the batch as additional images" and builds
the text pool from "x_gt for all images of the batch", so that the i2t half, like the t2i half,
meets the captions of similar images (docs/DISTINCT.md); 0 keeps the batch's own captions only.
``reward.retrieval_tau`` is eq. 2's tau; 0 takes the retriever's own training temperature.
The retriever is frozen, so each image's ground-truth captions are embedded once per run, together
and apart from any other image's (so the values never depend on which batch met them first, and a
resumed run computes the same ones), and kept: a training set's references are a bounded set; the
sampled captions are not kept.

- ``clip_s``: CLIP-S, 2.5 * max(cos, 0) with its image (Hessel et al. 2021); ``ref_clip_s``: RefCLIP-S, its
  harmonic mean with the caption's best cosine with its image's references. With a CLIP retriever these are the
  CLIP-S and RefCLIP-S of ``rlcap eval --clip`` (one implementation, :mod:`rlcap.metrics.clip_score`: the
  captions and references read after its prefix "A photo depicts", the images the bank's embeddings of the
  pictures by the same CLIP; equal to 1e-6, tests/retrieval/test_one_clip_s.py); with rlcap's dual encoder, the
  same formulas on its cosines, the captions as they are;
- ``i2t``, ``t2i``: eq. 2's two halves ([Chaffin24]'s RL-Unidirectional uses ``i2t`` alone);
- ``bicont``: eq. 2, i2t + t2i.
"""

from __future__ import annotations

import torch

from rlcap.models.retriever import load_retriever
from rlcap.rewards.batch import RewardBatch, TrainRefs, check_batch
from rlcap.rewards.context import RewardContext
from rlcap.rewards.image_bank import ImageBank, load_image_bank
from rlcap.metrics.clip_score import refclip_s, with_prefix
from rlcap.rl.contrastive import bicont_reward, clip_s, i2t_reward, t2i_reward

KINDS = {"i2t": i2t_reward, "t2i": t2i_reward, "bicont": bicont_reward}
# the similarities a retrieval reward scores by: CLIP-S and eq. 2's three contrastive rewards
SIMILARITIES = ("bicont", "i2t", "t2i", "clip_s")
CLIP_KINDS = ("clip_s", "ref_clip_s")  # CLIP-S and RefCLIP-S: each caption against its own image (and references)
# the reward.* settings a retrieval reward reads beside its weight
RETRIEVAL_SETTINGS = ("paths", "retrieval_tau", "hard_negatives", "negative_captions")


class RetrievalReward:
    """``(captions, batch) -> (N,)``: ``kind`` one of clip_s, ref_clip_s, i2t, t2i, bicont."""

    def __init__(self, retriever, bank: ImageBank, kind: str, tau: float = 0.0, hard_negatives: int = 5,
                 negative_captions: int = 0, captions_of: TrainRefs | None = None):
        if kind not in CLIP_KINDS and kind not in KINDS:
            raise ValueError(f"retrieval reward: unknown kind {kind!r}; expected "
                             f"{', '.join(CLIP_KINDS + tuple(KINDS))}")
        if negative_captions and captions_of is None:
            raise ValueError("retrieval reward: negative_captions needs captions_of, the mined images' references")
        self.retriever, self.bank, self.kind = retriever, bank, kind
        self.tau = tau if tau > 0 else retriever.temperature
        self.hard_negatives = hard_negatives
        self.negative_captions, self.captions_of = negative_captions, captions_of
        self._references: dict[tuple[str, ...], torch.Tensor] = {}  # an image's references -> (G, D)
        # what the retriever reads of a caption: CLIP-S's prefix for a CLIP (as rlcap eval --clip reads it)
        clip = kind in CLIP_KINDS and getattr(retriever, "kind", None) == "clip"
        self.reads = with_prefix if clip else (lambda caption: caption)

    @torch.no_grad()
    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        texts = self.embed(captions)  # (N, D)
        if self.kind == "clip_s":
            return self.pool_scores(texts, batch.image_ids)
        if self.kind == "ref_clip_s":  # the best cosine with the caption's image's references, then the H-mean
            best = torch.stack([(self.reference_embeddings(refs) @ text).max()
                                for text, refs in zip(texts, batch.refs)])  # (N,)
            return refclip_s(self.pool_scores(texts, batch.image_ids), best)
        given, extra, extra_ids = set(captions), [], []
        for image_id, refs in dict(zip(batch.image_ids, batch.refs)).items():  # each distinct image once
            keep = [k for k, ref in enumerate(refs) if ref not in given]
            if keep:
                extra.append(self.reference_embeddings(refs)[keep])
                extra_ids += [image_id] * len(keep)
        pool = torch.cat([texts, *extra])  # (N + G, D)
        return self.pool_scores(pool, list(batch.image_ids) + extra_ids)[: len(captions)]

    def embed(self, captions: list[str]) -> torch.Tensor:
        """(N, D): captions as this reward's retriever reads them (CLIP-S's prefix for a CLIP and a CLIP kind)."""
        return self.retriever.embed_captions([self.reads(c) for c in captions])

    def reference_embeddings(self, refs: list[str]) -> torch.Tensor:
        """(G, D): one image's ground-truth captions, embedded together the first time they are met."""
        key = tuple(refs)
        if key not in self._references:
            self._references[key] = self.embed(list(refs))
        return self._references[key]

    def pool_scores(self, texts: torch.Tensor, image_ids: list[str],
                    mined: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The reward of every caption of a whole text pool: ``texts`` (N, D) embeddings of the pool,
        ``image_ids`` (N,) each one's image; the image pool comes from the bank. ``mined``: more
        captions for the pool, (K, D) embeddings keyed by a mined image of the pool that they
        describe (the policy's own captions of the neighbours: ``wtf_rl.mined_captions``). -> (N,)"""
        rows, owner = self.bank.pool_rows(image_ids, 0 if self.kind in CLIP_KINDS else self.hard_negatives)
        images = self.bank.embeddings[rows]
        if self.kind in CLIP_KINDS:
            return clip_s(texts, images[owner])
        n = texts.size(0)
        extra = self._negative_captions(rows, len(set(image_ids))) if self.negative_captions else {}
        for image_id, embedded in (mined or {}).items():
            extra[image_id] = torch.cat([extra[image_id], embedded]) if image_id in extra else embedded
        if extra:
            texts, owner = _with_mined_captions(texts, owner, rows, self.bank, extra)
        return KINDS[self.kind](texts, images, owner, self.tau)[:n]

    def _negative_captions(self, rows: list[int], distinct: int) -> dict[str, torch.Tensor]:
        """The first ``negative_captions`` references of each mined image of the pool (pool positions
        ``distinct``: onward): rows of the image's cached reference embeddings, the same vectors it
        gets when it is a batch image."""
        out = {}
        for position in range(distinct, len(rows)):
            image_id = self.bank.ids[rows[position]]
            refs = list(self.captions_of.get(image_id, ()))
            if refs:
                out[image_id] = self.reference_embeddings(refs)[: self.negative_captions]
        return out

    def image_embeddings(self, image_ids: list[str]) -> torch.Tensor:
        """(N, D): each caption's image from the bank."""
        return self.bank.embeddings[self.bank.rows(image_ids)]


def _with_mined_captions(texts: torch.Tensor, owner: torch.Tensor, rows: list[int], bank: ImageBank,
                         mined: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The text pool extended by captions of images of the image pool ``rows``, each (K, D) owned
    by its image's position in the pool; an image outside the pool is an error."""
    position = {row: p for p, row in enumerate(rows)}
    extra, extra_owner = [texts], [owner]
    for image_id, embedded in mined.items():
        row = bank.rows([image_id]).item()
        if row not in position:
            raise ValueError(f"retrieval reward: captions of image {image_id!r}, which is not in the batch's image pool")
        extra.append(embedded)
        extra_owner.append(torch.full((embedded.size(0),), position[row], dtype=torch.long))  # cpu: as the bank
    return torch.cat(extra), torch.cat(extra_owner)


def make_retrieval_reward(ctx: RewardContext, kind: str) -> RetrievalReward:
    retriever = load_retriever(ctx.path("retrieval"), ctx.device)
    bank = load_image_bank(ctx.path("retrieval_bank"), retriever=ctx.path("retrieval"))
    return RetrievalReward(retriever, bank, kind, ctx.retrieval_tau, ctx.hard_negatives, ctx.negative_captions,
                           ctx.train_refs)


def make_clip_s(ctx: RewardContext) -> RetrievalReward:
    return make_retrieval_reward(ctx, "clip_s")


def make_ref_clip_s(ctx: RewardContext) -> RetrievalReward:
    return make_retrieval_reward(ctx, "ref_clip_s")


def make_i2t(ctx: RewardContext) -> RetrievalReward:
    return make_retrieval_reward(ctx, "i2t")


def make_t2i(ctx: RewardContext) -> RetrievalReward:
    return make_retrieval_reward(ctx, "t2i")


def make_bicont(ctx: RewardContext) -> RetrievalReward:
    return make_retrieval_reward(ctx, "bicont")
