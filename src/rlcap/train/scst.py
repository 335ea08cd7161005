"""Self-critical sequence training (Rennie et al. 2017), and SLL-ME with an entropy bonus.

Starts from an XE checkpoint (``init_from``). Each step: sample n captions per image, score
them, subtract a baseline, and take a REINFORCE step. With ``rl.entropy_weight > 0`` this is
the SLL-ME comparison of 003_5a024678a14e9bf6.txt (maximum-entropy regularisation on the policy,
sec. 5.2). The conventions that change the numbers are written to the log at the start.
"""

from __future__ import annotations

import logging
import math
import time
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from rlcap.rewards import Reward, RewardBatch, build_reward
from rlcap.rl.baselines import (RunningMean, advantages, greedy_baseline, leave_one_out_baseline, no_baseline,
                                running_mean_baseline, update_running_mean)
from rlcap.rl.losses import entropy_bonus, reinforce_loss
from rlcap.train.config import RunConfig
from rlcap.train.rollout import Rollout, caption_lengths, greedy_captions, rollout, score
from rlcap.train.session import (Session, TrainResult, end_epoch, finish_run, finish_step, optimizer_step,
                                 start_session)

log = logging.getLogger(__name__)


class StepStats(NamedTuple):
    loss: float
    reward: float
    baseline: float
    advantage: float
    entropy: float
    length: float
    sample_s: float
    reward_s: float
    backward_s: float


def conventions(cfg: RunConfig, n_train_images: int) -> str:
    """One line stating what must match for scores to be comparable across papers."""
    return (f"conventions: EOS counts as a token in the reward: {cfg.reward.eos_counts}; "
            f"baseline: {cfg.rl.baseline}; samples per image: {cfg.rl.n_samples} ({cfg.rl.sample_method}, "
            f"temperature {cfg.rl.temperature}); rewards: {cfg.reward.weights}; CIDEr-D document frequencies: "
            f"the training references ({n_train_images} images)")


def compute_baseline(session: Session, roll: Rollout, batch, rewards: torch.Tensor, reward: Reward,
                     state: RunningMean) -> tuple[torch.Tensor, RunningMean]:
    """The baseline named by ``rl.baseline``: (B*n,), plus the running-mean state."""
    cfg, n = session.cfg.rl, session.cfg.rl.n_samples
    if cfg.baseline == "greedy":
        captions = greedy_captions(session.model, batch, session.data.vocab, cfg.max_len)
        greedy_rewards = score(reward, captions, RewardBatch(batch.ids, batch.refs, batch.feats))
        return greedy_baseline(greedy_rewards, n), state
    if cfg.baseline == "leave_one_out":
        return leave_one_out_baseline(rewards, n), state
    if cfg.baseline == "running_mean":
        base = running_mean_baseline(state, rewards)
        return base, update_running_mean(state, rewards, cfg.running_mean_decay)
    return no_baseline(rewards), state


def scst_step(session: Session, batch, reward: Reward, state: RunningMean) -> tuple[StepStats, RunningMean]:
    s, cfg = session, session.cfg
    # 1. generate n captions per image (policy in training mode)
    roll = rollout(s.model, batch, s.data.vocab, cfg.rl)
    # 2. rewards of the samples
    t0 = time.perf_counter()
    rewards = score(reward, roll.captions, roll.reward_batch)               # (B*n,)
    # 3. baseline and advantages (the greedy baseline decodes once more, counted as reward time)
    baseline, state = compute_baseline(s, roll, batch, rewards, reward, state)
    adv = advantages(rewards, baseline)                                     # (B*n,)
    reward_s = time.perf_counter() - t0
    # 4. REINFORCE loss (minus the entropy bonus for SLL-ME), backward, step
    t0 = time.perf_counter()
    loss = reinforce_loss(roll.logprobs, roll.mask, adv)
    if cfg.rl.entropy_weight > 0:  # SLL-ME; otherwise the entropy is only logged (no backward through it)
        ent = entropy_bonus(roll.entropy, roll.mask)
        loss = loss - cfg.rl.entropy_weight * ent
    else:
        ent = entropy_bonus(roll.entropy.detach(), roll.mask)
    optimizer_step(s, loss)
    backward_s = time.perf_counter() - t0
    stats = StepStats(loss.item(), float(rewards.mean()), float(baseline.mean()), float(adv.mean()),
                      ent.item(), float(caption_lengths(roll.tokens).mean()), roll.seconds, reward_s, backward_s)
    return stats, state


def train_scst(cfg: RunConfig) -> TrainResult:
    s = start_session(cfg, splits=("train", cfg.val.split))
    train = s.data.splits["train"]
    reward = build_reward(cfg.reward, dict(zip(train.ids, train.refs)))
    s.logger.note(conventions(cfg, len(train)))
    return run_rl_loop(s, cfg, reward, scst_step)


def run_rl_loop(s: Session, cfg: RunConfig, reward: Reward, step_fn) -> TrainResult:
    """Epochs of ``step_fn`` with logging, checkpoints and validation (shared by the RL loops)."""
    train, p = s.data.splits["train"], s.progress
    steps_per_epoch = math.ceil(len(train) / cfg.rl.batch_size)
    state = RunningMean.init()
    s.model.train(cfg.rl.rollout_dropout)
    while p.epoch < cfg.rl.epochs:
        batches = train.batches(cfg.rl.batch_size, 1, cfg.seed, p.epoch, p.step_in_epoch)
        bar = tqdm(batches, total=steps_per_epoch, initial=p.step_in_epoch, desc=f"{cfg.algorithm} epoch {p.epoch + 1}",
                   leave=False, disable=None)
        for batch in bar:
            stats, state = step_fn(s, batch, reward, state)
            bar.set_postfix(reward=f"{stats.reward:.3f}")
            if finish_step(s, stats._asdict()):
                return finish_run(s, stopped_early=True)
        end_epoch(s)
    return finish_run(s, stopped_early=False)
