"""The embedding reward of [Shi18] (eq. 6): the cosine between a caption and its
image in a learned joint space.

The model is trained by ``algorithm: embedding`` (``methods/embedding.py``) and loaded from
``reward.paths.embedding``. Captions are tokenized as the training data is
(:func:`rlcap.metrics.tokenize`) and encoded with the embedding model's own vocabulary, saved in
its checkpoint, which need not be the captioner's. Eq. 7 weighs it with CIDEr-D:
``reward.weights: {cider_d: 1, embedding: w}``.
"""

from __future__ import annotations

import torch

from rlcap.data.vocab import Vocab
from rlcap.models.embedding import ImageTextEmbedder, encode_captions, load_embedding_model
from rlcap.rewards.batch import RewardBatch, check_batch
from rlcap.rewards.context import RewardContext
from rlcap.rl.embedding_loss import cosine_reward


class EmbeddingReward:
    """``(captions, batch) -> (N,)`` cosines in [-1, 1] between each caption and its image (eq. 6)."""

    def __init__(self, model: ImageTextEmbedder, vocab: Vocab, device: str = "cpu"):
        self.model, self.vocab, self.device = model, vocab, device

    @torch.no_grad()
    def __call__(self, captions: list[str], batch: RewardBatch) -> torch.Tensor:
        check_batch(captions, batch)
        feats = batch.caption_feats()  # one row per caption
        if feats is None:
            raise ValueError("the embedding reward needs the images' features: the reward batch has none")
        images = self.model.embed_images(feats.to(self.device))  # (N, D)
        texts = self.model.embed_texts(encode_captions(captions, self.vocab).to(self.device))  # (N, D)
        return cosine_reward(images, texts)  # (N,) on the device: the weighted sum copies host scores there


def make_embedding(ctx: RewardContext) -> EmbeddingReward:
    model, vocab = load_embedding_model(ctx.path("embedding"))
    if ctx.fc_dim and model.fc_dim != ctx.fc_dim:
        raise ValueError(f"reward.paths.embedding={ctx.path('embedding')} was trained on {model.fc_dim}-d image "
                         f"features, but this run's are {ctx.fc_dim}-d")
    return EmbeddingReward(model.to(ctx.device), vocab, ctx.device)
