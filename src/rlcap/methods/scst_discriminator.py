"""SCST-Discriminator, [Chaffin24]'s Table 1 row: self-critical sequence training [Rennie17] on the
reward r = alpha * r_sim + (1 - alpha) * p_D of eq. 3, r_sim CLIP-S in the paper.

The parts, the retrieval reward and the discriminator's pretraining are WTF-RL's
(``methods/wtf_rl.py``); per batch: ``rl.n_samples`` samples per image (their log-probabilities
carry the gradient), the greedy caption and the ground truth; one discriminator step on the
ground truth against the samples; then REINFORCE with each image's greedy caption's reward as the
baseline of its samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.methods.wtf_rl import (DISCRIMINATOR, DiscriminatorRewardConfig, DistinctRunConfig, decode_trajectories,
                                  discriminator_step, open_distinct_session, pretrain_discriminator, wtf_stats)
from rlcap.rewards.retrieval import RetrievalReward
from rlcap.rl.contrastive import weighted_reward
from rlcap.rl.losses import reinforce_loss
from rlcap.run_config import algorithm_field
from rlcap.methods.reference import Scored, add_kl
from rlcap.methods.samples import caption_lengths, rollout
from rlcap.distributed import word_share
from rlcap.train.logger import Stats
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches


@dataclass
class ScstDiscriminatorConfig(DiscriminatorRewardConfig):
    """algorithm=scst_discriminator: SCST on eq. 3's r, the discriminator trained on ground truth
    against the samples."""

    SECTION: ClassVar[str] = "scst_discriminator"

    similarity: str = help_field("clip_s", "r_sim: clip_s ([Chaffin24]'s row), or bicont, i2t, t2i over the "
                                           "samples, greedy captions and ground truth of the batch")


@dataclass
class ScstDiscriminatorRunConfig(DistinctRunConfig):
    """``algorithm: scst_discriminator``: SCST on a retrieval reward plus a discriminator's [Chaffin24]."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("scst_discriminator")
    scst_discriminator: ScstDiscriminatorConfig = help_field(
        ScstDiscriminatorConfig, "SCST on a retrieval reward plus a discriminator's [Chaffin24]")


def scst_discriminator_step(session: Session, batch: Batch, reward: RetrievalReward) -> Stats:
    """[Chaffin24]'s SCST-Discriminator row: n samples per image with the greedy caption's reward as the
    baseline (Rennie et al.), r = alpha * r_sim + (1 - alpha) * p_D (r_sim CLIP-S in [Chaffin24])."""
    cfg, start = session.cfg, time.perf_counter()
    b, n = len(batch.ids), cfg.rl.n_samples
    # 1. n samples per image (their log-probabilities carry the gradient), the greedy caption, the ground truth
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding)
    traj = decode_trajectories(session, batch, beam=False)
    captions = roll.captions + traj.captions[b:]  # samples, then greedy and ground truth
    ids = [i for i in batch.ids for _ in range(n)] + traj.image_ids[b:]
    texts, images = reward.embed(captions), reward.image_embeddings(ids)
    # 2. the discriminator's step on ground truth against the samples, then p_D
    d_loss, d_acc = discriminator_step(session, texts, images, b * n, human_from=b * n + b)
    with torch.no_grad():
        p_human = torch.sigmoid(session.module(DISCRIMINATOR)(texts.to(session.device), images.to(session.device)))
    # 3. rewards of samples and greedy captions; the greedy caption's is the baseline of its image's samples
    sim = reward.pool_scores(texts, ids).to(session.device)
    r = weighted_reward(sim, p_human, cfg.scst_discriminator.alpha)
    r_samples, r_greedy = r[:b * n], r[b * n:b * n + b]
    loss = reinforce_loss(roll.logprobs, roll.mask, r_samples - r_greedy.repeat_interleave(n))
    # plus beta times the KL to the reference policy (rl.kl_coef; [Shao24 eq. 4]'s k3)
    loss, kl = add_kl(session, loss, batch, Scored(roll.tokens, roll.logprobs, roll.mask, n))
    optimizer_step(session, loss * word_share(roll.mask, session.ranks))
    return wtf_stats(loss.detach(), d_loss, d_acc, r_samples.mean(), r[b * n + b:].mean(),
                     sim[:b * n].mean(), p_human[:b * n].mean(), caption_lengths(roll.tokens).mean(),
                     2.0, time.perf_counter() - start) | kl


def train_scst_discriminator(cfg: ScstDiscriminatorRunConfig) -> TrainResult:
    section = cfg.scst_discriminator
    session, reward = open_distinct_session(cfg, section, "SCST's samples with the greedy baseline")
    # phase 1 (discriminator pretraining, as WTF-RL's), then SCST on eq. 3's r per batch
    if not pretrain_discriminator(session, reward, section):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size, cfg.data.seq_per_img):
            if finish_step(session, scst_discriminator_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("scst_discriminator", train_scst_discriminator, ScstDiscriminatorRunConfig,
                "SCST on a retrieval reward plus a discriminator's [Chaffin24]"))
