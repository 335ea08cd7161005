"""Self-critical sequence training (Rennie et al. 2017), from an XE checkpoint (``init_from``).

Each step samples n captions per image, scores them, subtracts a baseline (``scst.baseline``:
the greedy caption's reward as in the paper, the mean of the image's other samples, a running
mean, or none) and takes a REINFORCE step. The conventions that change the numbers are written
to the log at the start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.errors import ConfigError
from rlcap.rewards import Reward
from rlcap.rl.baselines import (RunningMean, advantages, greedy_baseline, leave_one_out_baseline, no_baseline,
                                running_mean_baseline, update_running_mean)
from rlcap.rl.losses import entropy_bonus, reinforce_loss
from rlcap.run_config import SequenceRunConfig, algorithm_field
from rlcap.methods.reference import Scored, add_kl
from rlcap.methods.samples import caption_lengths, rollout
from rlcap.rewards.combine import Parts, part_means, score
from rlcap.methods.sequence import greedy_rewards, needs_text, sequence_session
from rlcap.distributed import global_mean, word_share
from rlcap.train.logger import Stats
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches

SCST_BASELINES = ("greedy", "leave_one_out", "running_mean", "none")


@dataclass
class ScstConfig:
    """Self-critical sequence training (Rennie et al. 2017) and its baselines."""

    baseline: str = help_field("greedy", "greedy (self-critical), leave_one_out, running_mean or none")
    running_mean_decay: float = help_field(0.9, "decay of the running-mean baseline")

    def validate(self) -> None:
        if self.baseline not in SCST_BASELINES:
            raise ConfigError(f"scst.baseline: {self.baseline!r} is not one of {list(SCST_BASELINES)}")
        if not 0 <= self.running_mean_decay < 1:
            raise ConfigError(f"scst.running_mean_decay: expected a number in [0, 1), got {self.running_mean_decay}")

    def reads(self, key: str) -> bool:
        """The decay is read by the running-mean baseline only."""
        return key != "running_mean_decay" or self.baseline == "running_mean"

    def check_run(self, run: SequenceRunConfig, name: str) -> None:
        """The leave-one-out baseline needs another sample of the image to leave out (``name``: this section's)."""
        if self.baseline == "leave_one_out" and run.rl.n_samples < 2:
            raise ConfigError(f"{name}.baseline=leave_one_out needs rl.n_samples >= 2, got {run.rl.n_samples}")


@dataclass
class ScstRunConfig(SequenceRunConfig):
    """``algorithm: scst``: self-critical sequence training [Rennie17], or SLL [Chen20]."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("scst")
    scst: ScstConfig = help_field(ScstConfig, "self-critical sequence training [Rennie17], or SLL [Chen20]")


def scst_baseline(session: Session, cfg: ScstConfig, batch: Batch, rewards: torch.Tensor,
                  reward: Reward) -> torch.Tensor:
    """The baseline named by ``cfg.baseline`` for rewards (B*n,). The running mean's statistics
    live in ``session.state`` and so are checkpointed with the run."""
    n = session.cfg.rl.n_samples
    if cfg.baseline == "greedy":
        return greedy_baseline(greedy_rewards(session, batch, reward), n)
    if cfg.baseline == "leave_one_out":
        return leave_one_out_baseline(rewards, n)
    if cfg.baseline == "running_mean":
        state = session.state.get("running_mean", RunningMean.init())
        # the whole batch's mean reward under torchrun, so that every rank keeps the same running mean
        batch_mean = global_mean(rewards, session.ranks).reshape(1) if session.ranks.world > 1 else rewards
        session.state["running_mean"] = update_running_mean(state, batch_mean, cfg.running_mean_decay)
        return running_mean_baseline(state, rewards)
    return no_baseline(rewards)


def scst_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg = session.cfg
    # 1. generate n captions per image (policy in training mode); their words only for a reward that reads them
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding, text=needs_text(reward))
    # 2. rewards of the samples
    t0 = time.perf_counter()
    parts: Parts = {}  # each reward's own scores, logged as reward/<name>
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens, parts)  # (B*n,)
    # 3. baseline and advantages (the greedy baseline decodes once more, counted as reward time)
    baseline = scst_baseline(session, cfg.scst, batch, rewards, reward)    # (B*n,)
    adv = advantages(rewards, baseline)                                    # (B*n,)
    reward_s = time.perf_counter() - t0
    # 4. REINFORCE loss (Rennie et al. eq. 7-9), backward, step
    t0 = time.perf_counter()
    loss = reinforce_loss(roll.logprobs, roll.mask, adv)
    # plus beta times the KL to the reference policy (rl.kl_coef; [Shao24 eq. 4]'s k3)
    loss, kl = add_kl(session, loss, batch, Scored(roll.tokens, roll.logprobs, roll.mask, cfg.rl.n_samples))
    optimizer_step(session, loss * word_share(roll.mask, session.ranks))
    ent = entropy_bonus(roll.entropy.detach(), roll.mask)                 # logged only
    # the statistics stay on the device until a line is logged (rlcap.train.logger)
    return {"loss": loss.detach(), "reward": rewards.mean(), "baseline": baseline.mean(), "advantage": adv.mean(),
            "entropy": ent, "length": caption_lengths(roll.tokens).mean(), "sample_s": roll.seconds,
            "reward_s": reward_s, "backward_s": time.perf_counter() - t0, **kl, **part_means(parts)}


def train_scst(cfg: ScstRunConfig) -> TrainResult:
    with sequence_session(cfg, cfg.scst.baseline) as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(session, scst_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("scst", train_scst, ScstRunConfig, "self-critical sequence training [Rennie17], or SLL [Chen20]"))
