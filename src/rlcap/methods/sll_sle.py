"""SLL-SLE: SCST plus the sequence-level exploration term of Chen & Jin
([Chen20], eq. 8-16, Algorithm 1).

Each step samples s captions per image, scores their precision reward (CIDEr-D), takes the
self-critical greedy baseline for it (or, with ``sll_sle.baseline: leave_one_out``, the mean of the
image's other samples), measures the pairwise distances d(y_j, y_k) built on
BLEU-3 and BLEU-4 between the samples of each image, and minimises the surrogate of eq. 15-16
with the mean pairwise distance as the diversity baseline (sec. 4.3). The formulas and the
choices where the paper is silent are in :mod:`rlcap.rl.sle` and docs/RL.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.errors import ConfigError
from rlcap.metrics import tokenize
from rlcap.rewards import Reward
from rlcap.rl.baselines import greedy_baseline, leave_one_out_baseline
from rlcap.rl.losses import entropy_bonus
from rlcap.rl.sle import pairwise_distances, sle_advantages, sle_loss
from rlcap.run_config import SequenceRunConfig, algorithm_field
from rlcap.methods.reference import Scored, add_kl
from rlcap.methods.samples import caption_lengths, rollout
from rlcap.rewards.combine import Parts, part_means, score
from rlcap.methods.sequence import greedy_rewards, sequence_session
from rlcap.distributed import word_share
from rlcap.train.logger import Stats
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches

SLE_BASELINES = ("greedy", "leave_one_out")


@dataclass
class SllSleConfig:
    """SLL-SLE ([Chen20 eq. 8-16]): the greedy baseline for precision (sec. 4.3), the
    mean pairwise distance for diversity."""

    alpha: float = help_field(0.75, "weight of the precision term against diversity (eq. 8-9)")
    baseline: str = help_field(
        "greedy", "precision baseline: greedy (self-critical, sec. 4.3) or leave_one_out (the mean of the image's "
        "other samples; centred per image, which sampling at a temperature below 1 needs: docs/RL.md)")

    def validate(self) -> None:
        if not 0 <= self.alpha <= 1:
            raise ConfigError(f"sll_sle.alpha: expected a number in [0, 1], got {self.alpha}")
        if self.baseline not in SLE_BASELINES:
            raise ConfigError(f"sll_sle.baseline: {self.baseline!r} is not one of {list(SLE_BASELINES)}")


@dataclass
class SllSleRunConfig(SequenceRunConfig):
    """``algorithm: sll_sle``: SLL-SLE: SCST plus sequence-level exploration [Chen20 eq. 8-16]."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("sll_sle")
    sll_sle: SllSleConfig = help_field(SllSleConfig, "SLL-SLE: SCST plus sequence-level exploration [Chen20 eq. 8-16]")


def sll_sle_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg, n, alpha = session.cfg, session.cfg.rl.n_samples, session.cfg.sll_sle.alpha
    # 1. sample s captions per image (Algorithm 1, line 4)
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding)
    # 2. precision reward Delta(y_j, y_i) and its self-critical baseline (eq. 10-11, sec. 4.3)
    t0 = time.perf_counter()
    parts: Parts = {}  # each reward's own scores, logged as reward/<name>
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens, parts)          # (B*s,)
    if cfg.sll_sle.baseline == "greedy":
        baseline = greedy_baseline(greedy_rewards(session, batch, reward), n)       # (B*s,)
    else:
        baseline = leave_one_out_baseline(rewards, n)                               # (B*s,)
    # 3. pairwise distances between the samples of each image (eq. 12-14, BLEU-3/4 based)
    distances = pairwise_distances([tokenize(caption) for caption in roll.captions], n)  # (B, s, s)
    adv = sle_advantages(rewards, baseline, distances, alpha)                       # (B*s,)
    reward_s = time.perf_counter() - t0
    # 4. surrogate loss of eq. 15-16, backward, step
    t0 = time.perf_counter()
    loss = sle_loss(roll.logprobs, roll.mask, rewards, baseline, distances, alpha)
    # plus beta times the KL to the reference policy (rl.kl_coef; [Shao24 eq. 4]'s k3)
    loss, kl = add_kl(session, loss, batch, Scored(roll.tokens, roll.logprobs, roll.mask, n))
    optimizer_step(session, loss * word_share(roll.mask, session.ranks))
    ent = entropy_bonus(roll.entropy.detach(), roll.mask)
    return {"loss": loss.detach(), "reward": rewards.mean(), "baseline": baseline.mean(), "advantage": adv.mean(),
            "entropy": ent, "length": caption_lengths(roll.tokens).mean(), "sample_s": roll.seconds,
            "reward_s": reward_s, "backward_s": time.perf_counter() - t0, **kl, **part_means(parts)}


def train_sll_sle(cfg: SllSleRunConfig) -> TrainResult:
    precision_baseline = "greedy (self-critical)" if cfg.sll_sle.baseline == "greedy" else "leave-one-out"
    settings = f"SLE alpha {cfg.sll_sle.alpha}, distance 1 - (BLEU-3 + BLEU-4)/2"
    with sequence_session(cfg, precision_baseline, settings) as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(session, sll_sle_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("sll_sle", train_sll_sle, SllSleRunConfig,
                "SLL-SLE: SCST plus sequence-level exploration [Chen20 eq. 8-16]"))
