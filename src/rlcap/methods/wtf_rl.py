"""Distinctive captioning with a retrieval reward: [Chaffin24].

Two parts: ``policy`` (the captioner, from an XE checkpoint: [Chaffin24]'s TF row) and ``discriminator``
(:class:`rlcap.models.Discriminator`, sec. 3.2), each with its own optimizer, beside a frozen
retriever and its image bank (``reward.paths.retrieval``, ``reward.paths.retrieval_bank``). Two
phases, the phase and its position kept in ``session.state`` so that a killed run resumes exactly
(without ``reward.paths.retrieval_bank`` the loop builds the bank into the run folder first):

1. discriminator pretraining (``wtf_rl.discriminator_pretrain_epochs``, sec. 4.1): ground-truth
   captions against the XE policy's beam search;
2. the loop (``rl.epochs``), per batch: decode the beam-search (x_bs) and greedy (x_gs) captions,
   embed them and the ground truth (x_gt) with the retriever; one discriminator step on x_gt
   against x_bs (sec. 4.1: "at the beginning of each iteration"); rewards
   r(x) = alpha * r_sim(x) + (1 - alpha) * p_D(x) (eq. 3), r_sim the bidirectional contrastive
   reward of eq. 2 over the text pool {x_bs, x_gs, x_gt} and the image pool of the batch's images
   and their mined neighbours; the policy's step on eq. 3:
   -[r(x_bs) log p(x_bs) + r(x_gt) log p(x_gt)], log p by teacher forcing; with
   ``wtf_rl.gt_weight: positive`` (the recipes) x_gt is weighted by max(r(x_gt), 0), and with
   ``wtf_rl.bs_baseline: batch_mean`` (the COCO-concepts recipes) x_bs by r(x_bs) minus the batch's mean.

``wtf_rl.trajectories`` gives [Chaffin24]'s Table 1 variants: ``both`` (WTF-RL), ``gt`` (WTF: weighted
teacher forcing alone), ``bs`` (RL); ``wtf_rl.similarity=i2t`` with ``bs`` is RL-Unidirectional.
SCST-Discriminator, on SCST's samples, is its own method (``methods/scst_discriminator.py``) on the
parts and helpers of this one.
The log-likelihood of a caption is normalised per word, as the teacher-forcing loss it weights
(:func:`rlcap.rl.losses.reinforce_loss`); with every r = 1, WTF is teacher forcing.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NamedTuple

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.data.vocab import PAD
from rlcap.decoding.options import decode
from rlcap.errors import ConfigError
from rlcap.models.discriminator import Discriminator
from rlcap.models.retriever import load_retriever
from rlcap.rewards.image_bank import ImageBank, build_image_bank, load_image_bank
from rlcap.rewards.retrieval import RETRIEVAL_SETTINGS, SIMILARITIES, RetrievalReward
from rlcap.rl.contrastive import discriminator_loss, weighted_reward
from rlcap.rl.losses import reinforce_loss
from rlcap.train.logger import OWN_REWARD, Stat, Stats
from rlcap.run_config import OptimConfig, SequenceRunConfig, algorithm_field, check_lr, check_min
from rlcap.methods.reference import Scored, add_kl, add_reference
from rlcap.methods.samples import caption_lengths, teacher_forced_logprobs
from rlcap.decoding.result import decode_captions
from rlcap.methods.sequence import pretrain_phase
from rlcap.distributed import count_share, global_mean, word_share
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import (Session, TrainResult, add_part, finish_run, finish_step, open_session, resume_or_start,
                                 train_batches)

log = logging.getLogger(__name__)

DISCRIMINATOR = "discriminator"
PRETRAIN = "discriminator_pretrain"  # session.state key: {"epoch", "step_in_epoch"} of phase 1
BANK_NEIGHBOURS = 10  # neighbours mined per image when the loop builds its own image bank


WTF_TRAJECTORIES = ("both", "gt", "bs")
WTF_GT_WEIGHTS = ("reward", "positive")
WTF_BS_BASELINES = ("none", "batch_mean")


@dataclass
class DiscriminatorRewardConfig:
    """What [Chaffin24]'s methods share: r = alpha * r_sim + (1 - alpha) * p_D (eq. 3) and the
    discriminator that gives p_D (sec. 3.2). The retriever and its image bank are
    ``reward.paths.retrieval`` and ``reward.paths.retrieval_bank``; tau and the hard negatives
    ``reward.retrieval_tau`` and ``reward.hard_negatives``."""

    SECTION: ClassVar[str] = "wtf_rl"  # the section's name in messages

    similarity: str = help_field("bicont", "r_sim: bicont (eq. 2), i2t (RL-Unidirectional), t2i, or clip_s")
    alpha: float = help_field(0.94, "r = alpha * r_sim + (1 - alpha) * p_D ([Chaffin24 sec. 4.1]: 0.94)")
    discriminator_hidden: int = help_field(512, "hidden width of the discriminator's 3-layer MLP")
    discriminator_image: bool = help_field(True, "the discriminator also reads the image's embedding")
    discriminator_lr: float = help_field(1e-4, "the discriminator's learning rate (Adam)")
    discriminator_pretrain_epochs: int = help_field(1, "epochs of discriminator pretraining on ground truth "
                                                       "versus the XE model's beam search, before the loop")

    def validate(self) -> None:
        name = self.SECTION
        if self.similarity not in SIMILARITIES:
            raise ConfigError(f"{name}.similarity: {self.similarity!r} is not one of {', '.join(SIMILARITIES)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"{name}.alpha: expected a number in [0, 1], got {self.alpha}")
        check_min(f"{name}.discriminator_hidden", self.discriminator_hidden, 1)
        check_min(f"{name}.discriminator_pretrain_epochs", self.discriminator_pretrain_epochs, 0)
        check_lr(f"{name}.discriminator_lr", self.discriminator_lr)


@dataclass
class WtfRlConfig(DiscriminatorRewardConfig):
    """algorithm=wtf_rl: distinctive captioning, [Chaffin24 eq. 3], on beam-search and ground-truth
    trajectories: WTF-RL, WTF and RL (``trajectories``)."""

    trajectories: str = help_field("both", "both: beam-search and ground-truth trajectories (WTF-RL); gt: "
                                           "ground truth only (WTF); bs: beam search only (RL)")
    gt_weight: str = help_field("reward", "the weight of a ground-truth trajectory: reward, r(x_gt) as eq. 3 "
                                          "writes it; positive, max(r(x_gt), 0): never push a human caption away")
    bs_baseline: str = help_field("none", "subtracted from r(x_bs), the weight of a beam-search trajectory: none, "
                                          "eq. 3 as written; batch_mean, the batch's mean r(x_bs)")
    mined_captions: int = help_field(0, "the policy's greedy captions of each batch image's first K mined neighbours "
                                        "join eq. 2's text pool ([Chaffin24 sec. 3.4]: mined images are added to the "
                                        "batch; at most reward.hard_negatives; 0: the batch's own captions only)")

    def validate(self) -> None:
        super().validate()
        if self.trajectories not in WTF_TRAJECTORIES:
            raise ConfigError(f"wtf_rl.trajectories: {self.trajectories!r} is not one of {', '.join(WTF_TRAJECTORIES)}"
                              " (SCST's samples: algorithm=scst_discriminator)")
        if self.gt_weight not in WTF_GT_WEIGHTS:
            raise ConfigError(f"wtf_rl.gt_weight: {self.gt_weight!r} is not one of {', '.join(WTF_GT_WEIGHTS)}")
        if self.bs_baseline not in WTF_BS_BASELINES:
            raise ConfigError(f"wtf_rl.bs_baseline: {self.bs_baseline!r} is not one of {', '.join(WTF_BS_BASELINES)}")
        check_min("wtf_rl.mined_captions", self.mined_captions, 0)
        if self.mined_captions and self.similarity == "clip_s":
            raise ConfigError("wtf_rl.mined_captions extends eq. 2's text pool: it needs similarity bicont, i2t or t2i")


@dataclass
class DistinctRunConfig(SequenceRunConfig):
    """The run config of a [Chaffin24] method: a retrieval reward (its retriever's settings always read)
    and a discriminator, set by the method's section (a :class:`DiscriminatorRewardConfig`)."""

    READS_CAPTIONS: ClassVar[bool] = True  # the discriminator's pretraining and WTF read the references
    # the reward is the method's own (its retriever's similarity and the discriminator, built by the loop):
    # reward.weights and the metric rewards' conventions are not read
    UNREAD: ClassVar[tuple[str, ...]] = ("reward.weights", "reward.eos_counts", "reward.nonfinite", "reward.cache_dir")

    def reads(self, key: str) -> bool:
        section, _, rest = key.partition(".")
        return super().reads(key) or (section == "reward" and rest in RETRIEVAL_SETTINGS)  # its retriever, always


@dataclass
class WtfRlRunConfig(DistinctRunConfig):
    """``algorithm: wtf_rl``: distinctive captioning: WTF, RL and WTF-RL with a retrieval reward [Chaffin24]."""

    # beam and greedy trajectories only: it samples no caption
    UNREAD: ClassVar[tuple[str, ...]] = (*DistinctRunConfig.UNREAD, "rl.n_samples", "rl.sample_method",
                                         "rl.rollout_dropout", "decode.temperature")

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("wtf_rl")
    wtf_rl: WtfRlConfig = help_field(WtfRlConfig, "distinctive captioning: WTF, RL and WTF-RL with a retrieval "
                                                  "reward [Chaffin24]")


def wtf_stats(loss: Stat, discriminator_loss: Stat, discriminator_acc: Stat, reward_bs: Stat, reward_gt: Stat,
              sim_bs: Stat, p_human_bs: Stat, length: Stat, phase: float, seconds: float) -> Stats:
    """The statistics of a [Chaffin24] step: ``loss`` the policy's eq. 3 loss (0 in pretraining);
    ``discriminator_acc`` the share of x_gt and x_bs the discriminator classifies right, before its step;
    ``reward_bs`` the mean r(x_bs); ``reward_gt`` the mean weight of x_gt (r(x_gt), or its positive part:
    ``wtf_rl.gt_weight``); ``sim_bs`` and ``p_human_bs`` the means of r_sim(x_bs) and p_D(x_bs); ``length`` the
    mean words of x_bs; ``phase`` 1 in discriminator pretraining, 2 in the loop."""
    return {"loss": loss, "discriminator_loss": discriminator_loss, "discriminator_acc": discriminator_acc,
            "reward_bs": reward_bs, "reward_gt": reward_gt, "sim_bs": sim_bs, "p_human_bs": p_human_bs,
            "length": length, "phase": phase, "seconds": seconds}


class Trajectories(NamedTuple):
    """A batch's captions: beam search and greedy (one per image) and ground truth (S per image)."""

    bs: torch.Tensor  # (B, T) word ids, no BOS
    gs: torch.Tensor  # (B, T)
    gt: torch.Tensor  # (B*S, T)
    captions: list[str]  # bs, then gs, then gt
    image_ids: list[str]  # the image of each caption, in the same order


def decode_trajectories(session: Session, batch: Batch, beam: bool = True) -> Trajectories:
    """x_bs and x_gs from the policy in eval mode (no gradient), x_gt from the batch. ``beam=False``:
    x_bs is the greedy caption too (not decoded twice)."""
    model, vocab = session.model, session.data.vocab
    was_training = model.training
    model.eval()
    with torch.no_grad():
        gs = decode(model, batch.feats, session.decoding.as_greedy()).tokens
        bs = decode(model, batch.feats, session.decoding.as_beam()).tokens if beam else gs
    model.train(was_training)
    gt = batch.tokens[:, 1:]  # (B*S, T+1): drop BOS
    per_image = gt.size(0) // len(batch.ids)
    ids = list(batch.ids)
    captions = decode_captions(vocab, bs, gs, gt)  # one transfer for the three
    return Trajectories(bs, gs, gt, captions, ids + ids + [i for i in ids for _ in range(per_image)])


def discriminator_step(session: Session, texts: torch.Tensor, images: torch.Tensor, b: int,
                       human_from: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the discriminator on the ground truth (rows ``human_from``:, default 2b:) against
    the generated captions (rows :b); (loss, accuracy before the step)."""
    discriminator = session.module(DISCRIMINATOR)
    # the retriever's embeddings come on the CPU
    texts, images = texts.to(session.device), images.to(session.device)
    human_from = 2 * b if human_from is None else human_from
    human = discriminator(texts[human_from:], images[human_from:])
    generated = discriminator(texts[:b], images[:b])
    accuracy = torch.cat([human > 0, generated < 0]).float().mean()
    loss = discriminator_loss(human, generated)
    share = count_share(torch.tensor(float(b), device=session.device), session.ranks)
    optimizer_step(session, loss * share, part=DISCRIMINATOR)
    return loss.detach(), accuracy


def mined_captions(session: Session, batch: Batch, reward: RetrievalReward, k: int) -> dict[str, torch.Tensor]:
    """[Chaffin24 sec. 3.4] adds the mined images "to the batch as additional images" and builds the text
    pool from x_gs (and x_bs, x_gt) "for all images of the batch": the policy's greedy caption of
    each batch image's first ``k`` mined neighbours, embedded, keyed by the neighbour's id. Only
    neighbours among the run's training images (``data.max_train_images``) have features to decode."""
    train, bank = session.data.splits["train"], reward.bank
    row_of = {i: r for r, i in enumerate(train.ids)}  # ~1 ms for 10k images
    in_batch, ids = set(batch.ids), []
    for row in bank.rows(list(batch.ids)).tolist():
        ids += [bank.ids[neighbour] for neighbour in bank.neighbours[row, :k].tolist()]
    ids = [i for i in dict.fromkeys(ids) if i not in in_batch and i in row_of]
    if not ids:
        return {}
    model, was_training = session.model, session.model.training
    model.eval()
    with torch.no_grad():
        # cpu: row indices of the split's data
        feats = train.feats(torch.tensor([row_of[i] for i in ids])).to(session.device)
        tokens = decode(model, feats, session.decoding.as_greedy()).tokens
    model.train(was_training)
    words = [session.data.vocab.decode(row.tolist()) for row in tokens]
    embedded = reward.embed(words)  # (K, D)
    return {i: embedded[j:j + 1] for j, i in enumerate(ids)}


def wtf_rl_step(session: Session, batch: Batch, reward: RetrievalReward) -> Stats:
    cfg, start = session.cfg.wtf_rl, time.perf_counter()
    b = len(batch.ids)
    # 1. trajectories: beam search, greedy (the text pool's baselines) and ground truth; with
    #    wtf_rl.mined_captions, the greedy captions of mined neighbours too (the text pool only)
    traj = decode_trajectories(session, batch)
    mined = mined_captions(session, batch, reward, cfg.mined_captions) if cfg.mined_captions else None
    # 2. the frozen retriever's embeddings of every caption and of each caption's image
    texts = reward.embed(traj.captions)  # (2B + B*S, D)
    images = reward.image_embeddings(traj.image_ids)  # (2B + B*S, D)
    # 3. the discriminator's step first ([Chaffin24 sec. 4.1]), then p_D of x_bs and x_gt
    d_loss, d_acc = discriminator_step(session, texts, images, b)
    with torch.no_grad():
        p_human = torch.sigmoid(session.module(DISCRIMINATOR)(texts.to(session.device),
                                                               images.to(session.device)))  # (2B + B*S,)
    # 4. eq. 2 over the whole text pool and the batch's image pool; eq. 3's r = alpha r_sim + (1 - alpha) p_D
    sim = reward.pool_scores(texts, traj.image_ids, mined).to(session.device)
    r = weighted_reward(sim, p_human, cfg.alpha)
    r_bs, r_gt = r[:b], gt_weights(r[2 * b:], cfg.gt_weight)
    w_bs = bs_weights(r_bs, cfg.bs_baseline, global_mean(r_bs, session.ranks))
    # 5. eq. 3: the trajectories' log-likelihoods (teacher forcing, with gradient), weighted by r
    terms, scored = [], []
    if cfg.trajectories in ("both", "bs"):
        lp, _ = teacher_forced_logprobs(session.model, batch, traj.bs, 1, session.cfg.rl.micro_batch)
        terms.append((lp, traj.bs != PAD, w_bs))
        scored.append(Scored(traj.bs, lp, traj.bs != PAD, 1))
    if cfg.trajectories in ("both", "gt"):
        lp, _ = teacher_forced_logprobs(session.model, batch, traj.gt, traj.gt.size(0) // b,
                                        session.cfg.rl.micro_batch)
        terms.append((lp, traj.gt != PAD, r_gt))
        scored.append(Scored(traj.gt, lp, traj.gt != PAD, traj.gt.size(0) // b))
    # plus beta times k3 over the trajectories' words (rl.kl_coef; not samples of the policy: docs/RL.md, "The KL term")
    loss, kl = add_kl(session, eq3_loss(terms), batch, *scored)
    optimizer_step(session, loss * word_share(torch.cat([m.flatten() for _, m, _ in terms]), session.ranks))
    return wtf_stats(loss.detach(), d_loss, d_acc, r_bs.mean(), r_gt.mean(), sim[:b].mean(),
                     p_human[:b].mean(), caption_lengths(traj.bs).mean(), 2.0, time.perf_counter() - start) | kl


def gt_weights(r_gt: torch.Tensor, mode: str) -> torch.Tensor:
    """The weights of the ground-truth trajectories in eq. 3: ``reward``, r(x_gt) as written;
    ``positive``, max(r(x_gt), 0): a human caption less distinctive than the pool's best is not
    learned from, rather than pushed away (docs/DISTINCT.md, "Choices, and why")."""
    if mode == "reward":
        return r_gt
    if mode == "positive":
        return r_gt.clamp(min=0.0)
    raise ValueError(f"gt_weights: unknown mode {mode!r}; expected reward or positive")


def bs_weights(r_bs: torch.Tensor, baseline: str, batch_mean: torch.Tensor | None = None) -> torch.Tensor:
    """The weights of the beam-search trajectories in eq. 3: ``none``, r(x_bs) as written;
    ``batch_mean``, r(x_bs) minus its mean over the batch (``batch_mean``, default ``r_bs``'s own: under
    torchrun, every rank's), so that as many beams are pushed down as pulled up whatever the reward's
    level (docs/DISTINCT.md, "Choices, and why")."""
    if baseline == "none":
        return r_bs
    if baseline == "batch_mean":
        return r_bs - (r_bs.mean() if batch_mean is None else batch_mean)
    raise ValueError(f"bs_weights: unknown baseline {baseline!r}; expected none or batch_mean")


def eq3_loss(terms: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """-sum_x r(x) log p(x) over the given trajectory sets, each (logprobs (N, T), mask (N, T), r (N,)),
    normalised by their words together: one REINFORCE loss over the rows of every set."""
    width = max(lp.size(1) for lp, _, _ in terms)
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.size(1)))  # noqa: E731
    return reinforce_loss(torch.cat([pad(lp) for lp, _, _ in terms]), torch.cat([pad(m) for _, m, _ in terms]),
                          torch.cat([r for _, _, r in terms]))


def pretrain_step(session: Session, batch: Batch, reward: RetrievalReward) -> Stats:
    start = time.perf_counter()
    traj = decode_trajectories(session, batch)
    texts = reward.embed(traj.captions)
    d_loss, d_acc = discriminator_step(session, texts, reward.image_embeddings(traj.image_ids), len(batch.ids))
    return wtf_stats(0.0, d_loss, d_acc, 0.0, 0.0, 0.0, 0.0, caption_lengths(traj.bs).mean(), 1.0,
                     time.perf_counter() - start)


def pretrain_discriminator(session: Session, reward: RetrievalReward, section: DiscriminatorRewardConfig) -> bool:
    """Phase 1, from where ``session.state`` says it stands; True when ``max_steps`` stopped the run."""
    return pretrain_phase(session, PRETRAIN, section.discriminator_pretrain_epochs, session.cfg.data.seq_per_img,
                          lambda batch: pretrain_step(session, batch, reward))


def discriminator_optim(cfg: DistinctRunConfig, section: DiscriminatorRewardConfig) -> OptimConfig:
    return dataclasses.replace(cfg.optim, name="adam", lr=section.discriminator_lr, lr_decay_every=0)


def image_bank(cfg: DistinctRunConfig) -> ImageBank:
    """``reward.paths.retrieval_bank``, or one built from the run's data with its retriever, once,
    into the run folder (``image_bank.h5``; [Chaffin24 sec. 3.4]: mined once before training)."""
    paths = cfg.reward.paths
    if "retrieval_bank" in paths:
        return load_image_bank(paths["retrieval_bank"], retriever=paths["retrieval"])
    path = Path(cfg.out_dir) / "image_bank.h5"
    if path.is_file():
        bank = load_image_bank(path)
        if bank.retriever == str(paths["retrieval"]):
            return bank
    log.info("building the image bank of %s into %s", paths["retrieval"], path)
    bank = build_image_bank(paths["retrieval"], cfg.data, k=BANK_NEIGHBOURS)
    bank.save(path)
    return bank


def open_distinct_session(cfg: DistinctRunConfig, section: DiscriminatorRewardConfig, what: str,
                          mined: int = 0) -> tuple[Session, RetrievalReward]:
    """The session of a [Chaffin24] method with its two parts (policy, discriminator) begun, and its
    retrieval reward (the frozen retriever and its image bank), as the method's ``section`` sets them;
    ``what``: its trajectories, for the log; ``mined``: ``wtf_rl.mined_captions``."""
    session = open_session(cfg, splits=("train", cfg.val.split))
    paths = cfg.reward.paths
    if "retrieval" not in paths:
        raise ConfigError(f"algorithm={cfg.algorithm} needs reward.paths.retrieval: a retriever (rlcap retrieval "
                          "train) or a local CLIP folder")
    train = session.data.splits["train"]
    captions_of = dict(zip(train.ids, train.refs)) if cfg.reward.negative_captions else None
    reward = RetrievalReward(load_retriever(paths["retrieval"]), image_bank(cfg), section.similarity,
                             cfg.reward.retrieval_tau, cfg.reward.hard_negatives, cfg.reward.negative_captions,
                             captions_of)
    if mined > reward.hard_negatives:
        raise ConfigError(f"wtf_rl.mined_captions ({mined}) names neighbours outside the image pool: "
                          f"at most reward.hard_negatives ({reward.hard_negatives})")
    dim = reward.bank.embeddings.size(1)
    discriminator = Discriminator(dim, section.discriminator_hidden, section.discriminator_image)
    add_part(session, DISCRIMINATOR, discriminator, discriminator_optim(cfg, section))
    add_reference(session)  # rl.kl_coef > 0: the KL term's reference policy
    resume_or_start(session)
    mixed = f"{section.alpha} * {section.similarity} + {1 - section.alpha:.2f} * p_D"
    session.logger.note(f"[Chaffin24]: {what}; r = {mixed}; tau {reward.tau:g}; hard negatives {reward.hard_negatives} "
                        f"(their captions in the text pool: {reward.negative_captions} each, the policy's greedy "
                        f"captions of {mined}); retriever {paths['retrieval']} ({reward.retriever.kind})",
                        samples_per_image=cfg.rl.n_samples if cfg.reads("rl.n_samples") else None,
                        learns_from=OWN_REWARD)
    session.model.train()
    discriminator.train()
    return session, reward


def train_wtf_rl(cfg: WtfRlRunConfig) -> TrainResult:
    trajectories = f"trajectories {cfg.wtf_rl.trajectories}"
    session, reward = open_distinct_session(cfg, cfg.wtf_rl, trajectories, cfg.wtf_rl.mined_captions)
    # phase 1 (discriminator pretraining), then eq. 3 per batch
    if not pretrain_discriminator(session, reward, cfg.wtf_rl):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size, cfg.data.seq_per_img):
            if finish_step(session, wtf_rl_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("wtf_rl", train_wtf_rl, WtfRlRunConfig,
                "distinctive captioning: WTF, RL and WTF-RL with a retrieval reward [Chaffin24]"))
