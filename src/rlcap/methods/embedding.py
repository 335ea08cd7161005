"""Training the image-caption embedding of [Shi18 sec. 3.3.1] (eq. 5): the model the
embedding reward (eq. 6, ``rewards/embedding.py``) loads from ``reward.paths.embedding``.

One caption per image per batch; the batch's other images and captions are the negatives of
eq. 5's bidirectional hinge. After every epoch the model is validated by cross-modal retrieval on
the validation split (R@1/5/10, caption -> image and image -> caption, ``rlcap.metrics.retrieval``)
and the best epoch by the mean of the six recalls is kept in ``best/``. The checkpoint's only part
is ``embedding``; its vocabulary is the one the reward tokenizes captions with.

``algorithm: retriever`` trains the same model with CLIP's symmetric contrastive loss (section
``retriever``): rlcap's own retriever, the offline default for the rewards of [Chaffin24], and the
independent judge of its tables (``rlcap retrieval train``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch, SplitData
from rlcap.devices import in_precision, model_device
from rlcap.errors import ConfigError
from rlcap.metrics.retrieval import RECALL_AT, retrieval_metrics
from rlcap.models.embedding import EMBEDDING, EmbeddingModel, EmbeddingModelConfig
from rlcap.rl.contrastive import info_nce_loss
from rlcap.rl.embedding_loss import ranking_loss
from rlcap.run_config import RunConfig, algorithm_field, check_min
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import (Session, TrainResult, add_part, feature_dims, finish_run, finish_step, open_session,
                                 resume_or_start, train_batches)

log = logging.getLogger(__name__)


EMBEDDING_LOSSES = ("ranking", "infonce")


@dataclass
class EmbeddingConfig:
    """algorithm=embedding: the image-caption embedding of [Shi18 sec. 3.3.1], trained with eq. 5's
    ranking loss, the model the embedding reward (eq. 6) loads. The same dual encoder trained
    contrastively is ``algorithm: retriever`` (:class:`RetrieverConfig`)."""

    SECTION: ClassVar[str] = "embedding"  # the section's name in messages

    model: EmbeddingModelConfig = help_field(EmbeddingModelConfig, "sizes of the embedding model")
    epochs: int = help_field(10, "training epochs")
    batch_size: int = help_field(128, "image-caption pairs per batch, one caption per image; the batch's other "
                                      "images and captions are the negatives of eq. 5")
    margin: float = help_field(0.2, "margin of eq. 5's hinge ([Shi18]'s penalty gamma, in (0, 1))")
    skip_identical: bool = help_field(True, "a caption word for word the same as the pair's own is not a negative "
                                            "(frequent on shapes, where many images share a caption)")
    loss: str = help_field("ranking", "ranking: [Shi18]'s eq. 5 hinge; infonce: the symmetric contrastive loss of "
                                      "CLIP (the retriever of [Chaffin24], rlcap.rl.contrastive.info_nce_loss)")
    temperature: float = help_field(0.07, "infonce: the softmax temperature (CLIP's initial 0.07)")

    def validate(self) -> None:
        name = self.SECTION
        if self.loss not in EMBEDDING_LOSSES:
            raise ConfigError(f"{name}.loss: {self.loss!r} is not one of {', '.join(EMBEDDING_LOSSES)}")
        if self.temperature <= 0:
            raise ConfigError(f"{name}.temperature: expected a positive number, got {self.temperature}")
        check_min(f"{name}.epochs", self.epochs, 1)
        check_min(f"{name}.batch_size", self.batch_size, 2)
        if not 0 < self.margin < 1:
            raise ConfigError(f"{name}.margin: expected a number in (0, 1), got {self.margin}")


@dataclass
class RetrieverConfig(EmbeddingConfig):
    """algorithm=retriever: the dual encoder trained with the symmetric contrastive loss of CLIP, the
    retriever of [Chaffin24]'s rewards and its independent judge (``rlcap retrieval train``)."""

    SECTION: ClassVar[str] = "retriever"

    loss: str = help_field("infonce", "infonce: the symmetric contrastive loss of CLIP "
                                      "(rlcap.rl.contrastive.info_nce_loss); ranking: [Shi18]'s eq. 5 hinge")


@dataclass
class DualEncoderRunConfig(RunConfig):
    """The run config of a trainer of an image-caption dual encoder (the embedding, the retriever): it builds
    no captioner, decodes no caption, keeps best/ by its own score and reads one caption per image a batch."""

    UNREAD: ClassVar[tuple[str, ...]] = ("model.", "decode.", "val.metric")
    CAPTIONS_PER_IMAGE: ClassVar[bool] = False


@dataclass
class EmbeddingRunConfig(DualEncoderRunConfig):
    """``algorithm: embedding``: the image-caption embedding that the embedding reward loads [Shi18]."""

    BATCH_KEY: ClassVar[str | None] = "embedding.batch_size"

    algorithm: str = algorithm_field("embedding")
    embedding: EmbeddingConfig = help_field(EmbeddingConfig, "the embedding that the embedding reward loads")


@dataclass
class RetrieverRunConfig(DualEncoderRunConfig):
    """``algorithm: retriever``: the dual encoder of [Chaffin24], trained as the embedding is."""

    BATCH_KEY: ClassVar[str | None] = "retriever.batch_size"

    algorithm: str = algorithm_field("retriever")
    retriever: RetrieverConfig = help_field(RetrieverConfig, "a dual encoder trained contrastively")


def identical_captions(tokens: torch.Tensor) -> torch.Tensor:
    """(B, T) word ids -> (B, B) bool, True where captions i and j are the same word for word."""
    return (tokens[:, None, :] == tokens[None, :, :]).all(dim=2)


def embedding_step(session: Session, batch: Batch, cfg: EmbeddingConfig) -> torch.Tensor:
    model = session.module(EMBEDDING)
    # 1. embed the B images and their B captions (one each) into the joint space
    images = model.embed_images(batch.feats)  # (B, D)
    texts = model.embed_texts(batch.tokens)  # (B, D)
    # 2. every other caption and image of the batch is a negative: eq. 5's hinge, or InfoNCE ([Chaffin24]'s retriever)
    same = identical_captions(batch.tokens) if cfg.skip_identical else None
    if cfg.loss == "infonce":
        loss = info_nce_loss(images, texts, cfg.temperature, same)
    else:
        loss = ranking_loss(images, texts, cfg.margin, same)
    # 3. a step of the embedding's optimizer
    optimizer_step(session, loss, part=EMBEDDING)
    return loss.detach()


@in_precision
@torch.no_grad()
def retrieval_scores(model: EmbeddingModel, split: SplitData, batch_size: int = 100,
                     limit: int = 0) -> dict[str, float]:
    """R@1/5/10, median rank and MRR in both directions over the first ``limit`` images (0: all)
    and all their captions, plus ``mean_R``, the mean of the six recalls; the embeddings computed in the run's
    precision (``model`` as the session hands it out; a plain module: fp32), their similarities in fp32
    (cosines 0.004 apart would tie in bf16)."""
    was_training = model.training
    model.eval()
    n = len(split) if limit <= 0 else min(limit, len(split))
    device = model_device(model)
    caps = split.caps[: int(split.cap_offsets[n])]  # (C, T)
    # cpu: row indices of the split's data
    images = torch.cat([model.embed_images(split.feats(torch.arange(i, min(i + batch_size, n))).to(device))
                        for i in range(0, n, batch_size)])  # (I, D)
    texts = torch.cat([model.embed_texts(caps[i:i + batch_size].to(device))
                       for i in range(0, len(caps), batch_size)])  # (C, D)
    # cpu: the image of each caption, for the metrics (numpy)
    owner = torch.arange(n).repeat_interleave(split.cap_offsets[1:n + 1] - split.cap_offsets[:n])  # (C,)
    model.train(was_training)
    similarity = images.float() @ texts.float().T  # (I, C), fp32
    scores = retrieval_metrics(similarity.cpu().numpy(), owner.numpy())
    scores["mean_R"] = float(np.mean([scores[f"{direction}_R@{k}"] for direction in ("t2i", "i2t")
                                      for k in RECALL_AT]))
    return scores


def train_embedding(cfg: EmbeddingRunConfig) -> TrainResult:
    return train_dual_encoder(cfg, cfg.embedding)


def train_retriever(cfg: RetrieverRunConfig) -> TrainResult:
    return train_dual_encoder(cfg, cfg.retriever)


def train_dual_encoder(cfg: DualEncoderRunConfig, section: EmbeddingConfig) -> TrainResult:
    """The loop of both: the dual encoder of ``section``'s sizes, trained contrastively, kept by mean recall."""
    session = open_session(cfg, splits=("train", cfg.val.split), policy=False)
    model = EmbeddingModel(section.model, len(session.data.vocab), feature_dims(session.data)["fc"])
    add_part(session, EMBEDDING, model, cfg.optim)
    resume_or_start(session, selects_by="mean_R")
    model.train()
    val = cfg.val

    def validate(session: Session) -> dict[str, float]:  # retrieval on the validation split; best/ by mean recall
        return retrieval_scores(session.module(EMBEDDING), session.data.splits[val.split], val.batch_size,
                                val.max_images)

    for batch in train_batches(session, section.epochs, section.batch_size, 1, validate=validate):
        if finish_step(session, {"loss": embedding_step(session, batch, section)}):
            break
    return finish_run(session)


register(Method("embedding", train_embedding, EmbeddingRunConfig,
                "the image-caption embedding that the embedding reward loads [Shi18]"))
register(Method("retriever", train_retriever, RetrieverRunConfig,
                "a dual encoder trained contrastively: the retriever and the judge of [Chaffin24]"))
