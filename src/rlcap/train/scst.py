"""Self-critical sequence training (Rennie et al. 2017), from an XE checkpoint (``init_from``).

Each step samples n captions per image, scores them, subtracts a baseline (``scst.baseline``:
the greedy caption's reward as in the paper, the mean of the image's other samples, a running
mean, or none) and takes a REINFORCE step. The conventions that change the numbers are written
to the log at the start.
"""

from __future__ import annotations

import time

from rlcap.data.loader import Batch
from rlcap.rewards import Reward
from rlcap.rl.baselines import advantages
from rlcap.rl.losses import entropy_bonus, reinforce_loss
from rlcap.train.config import RunConfig
from rlcap.train.rollout import caption_lengths, rollout, score
from rlcap.train.sequence import StepStats, rl_run, scst_baseline
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, optimizer_step, train_batches


def scst_step(s: Session, batch: Batch, reward: Reward) -> StepStats:
    cfg = s.cfg
    # 1. generate n captions per image (policy in training mode)
    roll = rollout(s.model, batch, s.data.vocab, cfg.rl, cfg.decode)
    # 2. rewards of the samples
    t0 = time.perf_counter()
    rewards = score(reward, roll.captions, roll.reward_batch)              # (B*n,)
    # 3. baseline and advantages (the greedy baseline decodes once more, counted as reward time)
    baseline = scst_baseline(s, cfg.scst, batch, rewards, reward)          # (B*n,)
    adv = advantages(rewards, baseline)                                    # (B*n,)
    reward_s = time.perf_counter() - t0
    # 4. REINFORCE loss (Rennie et al. eq. 7-9), backward, step
    t0 = time.perf_counter()
    loss = reinforce_loss(roll.logprobs, roll.mask, adv)
    optimizer_step(s, loss)
    ent = entropy_bonus(roll.entropy.detach(), roll.mask)                 # logged only
    return StepStats(loss.item(), float(rewards.mean()), float(baseline.mean()), float(adv.mean()), ent.item(),
                     float(caption_lengths(roll.tokens).mean()), roll.seconds, reward_s, time.perf_counter() - t0)


def train_scst(cfg: RunConfig) -> TrainResult:
    with rl_run(cfg, cfg.scst.baseline) as (s, reward):
        for batch in train_batches(s, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(s, scst_step(s, batch, reward)._asdict()):
                break
    return finish_run(s)
