"""SLL-SLE: SCST plus the sequence-level exploration term of Chen & Jin
(003_5a024678a14e9bf6.txt, eq. 8-16, Algorithm 1).

Each step samples s captions per image, scores their precision reward (CIDEr-D), takes the
self-critical greedy baseline for it, measures the pairwise distances d(y_j, y_k) built on
BLEU-3 and BLEU-4 between the samples of each image, and minimises the surrogate of eq. 15-16
with the mean pairwise distance as the diversity baseline (sec. 4.3). The formulas and the
choices where the paper is silent are in :mod:`rlcap.rl.sle` and docs/RL.md.
"""

from __future__ import annotations

import time

from rlcap.errors import ConfigError
from rlcap.metrics import tokenize
from rlcap.rewards import Reward, RewardBatch, build_reward
from rlcap.rl.baselines import RunningMean, greedy_baseline
from rlcap.rl.losses import entropy_bonus
from rlcap.rl.sle import pairwise_distances, sle_advantages, sle_loss
from rlcap.train.config import RunConfig
from rlcap.train.rollout import caption_lengths, greedy_captions, rollout, score
from rlcap.train.scst import StepStats, conventions, run_rl_loop
from rlcap.train.session import Session, TrainResult, optimizer_step, start_session


def sle_step(session: Session, batch, reward: Reward, state: RunningMean) -> tuple[StepStats, RunningMean]:
    s, cfg = session, session.cfg
    n = cfg.rl.n_samples
    # 1. sample s captions per image (Algorithm 1, line 4)
    roll = rollout(s.model, batch, s.data.vocab, cfg.rl)
    # 2. precision reward Delta(y_j, y_i) and its self-critical baseline (eq. 10-11, sec. 4.3)
    t0 = time.perf_counter()
    rewards = score(reward, roll.captions, roll.reward_batch)                       # (B*s,)
    greedy = greedy_captions(s.model, batch, s.data.vocab, cfg.rl.max_len)
    baseline = greedy_baseline(score(reward, greedy, RewardBatch(batch.ids, batch.refs, batch.feats)), n)
    # 3. pairwise distances between the samples of each image (eq. 12-14, BLEU-3/4 based)
    distances = pairwise_distances([tokenize(c) for c in roll.captions], n)         # (B, s, s)
    adv = sle_advantages(rewards, baseline, distances, cfg.rl.sle_alpha)           # (B*s,)
    reward_s = time.perf_counter() - t0
    # 4. surrogate loss of eq. 15-16, backward, step
    t0 = time.perf_counter()
    loss = sle_loss(roll.logprobs, roll.mask, rewards, baseline, distances, cfg.rl.sle_alpha)
    optimizer_step(s, loss)
    backward_s = time.perf_counter() - t0
    ent = float(entropy_bonus(roll.entropy.detach(), roll.mask))
    stats = StepStats(loss.item(), float(rewards.mean()), float(baseline.mean()), float(adv.mean()), ent,
                      float(caption_lengths(roll.tokens).mean()), roll.seconds, reward_s, backward_s)
    return stats, state


def train_sle(cfg: RunConfig) -> TrainResult:
    if cfg.rl.baseline != "greedy":
        raise ConfigError(f"rl.baseline: SLL-SLE takes the self-critical greedy baseline for its precision term "
                          f"(003_5a024678a14e9bf6.txt eq. 10-11), not {cfg.rl.baseline!r}; use algorithm=scst "
                          f"for the other baselines")
    s = start_session(cfg, splits=("train", cfg.val.split))
    train = s.data.splits["train"]
    reward = build_reward(cfg.reward, dict(zip(train.ids, train.refs)))
    s.logger.note(conventions(cfg, len(train)) + f"; SLE alpha {cfg.rl.sle_alpha}, distance 1 - (BLEU-3 + BLEU-4)/2")
    return run_rl_loop(s, cfg, reward, sle_step)
