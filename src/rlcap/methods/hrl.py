"""Hierarchical RL for video captioning: [Wang18], Algorithm 1.

From an XE checkpoint of ``model.arch: hrl`` (manager and worker warm-started together, eq. 26,
with the trained internal critic frozen inside), the worker and the manager are trained in
alternating phases of ``hrl.switch_every`` steps (the phase and its position live in
``session.state``, so a killed run resumes exactly):

- **worker phase** (eq. 11-14, 24): goal exploration off; one caption sampled per clip
  (``hrl.worker_samples`` draws more, each scored and baselined alike) at ``decode.temperature``,
  with dropout on or off as ``rl.rollout_dropout`` says, as every sampling loop; every word
  gets the delta reward f(a_t) = CIDEr(sent + a_t) - CIDEr(sent) (sec. 3.3.3; the prefixes scored
  by ``hrl.prefix_metric``: the run's reward, or plain CIDEr) and the
  discounted return R(a_t) (gamma 0.95); a linear baseline on h^W_t (its gradient cut from the
  worker) is subtracted; REINFORCE updates the worker alone (the manager's parameters are frozen).
- **manager phase** (eq. 17-23, 25): Gaussian noise on the goals (eq. 23); the worker decodes
  greedily as the oracle behaviour policy, in eval mode (dropout off: the goal noise is the only
  exploration; autograd stays on for the goals); each segment e_n (cut by the critic) gets the
  discounted segment return R(e_n) minus a linear baseline on h^M; the loss
  -(R(e_n) - b) * sum_{i in e_n} log pi(a_i) reaches the manager only through its goals (eq. 22;
  the worker's parameters are frozen), the worker state passed on to the next segment detached so
  that each goal is credited with its own segment's words, as eq. 21 writes.

The baselines are one part, ``baselines`` (two linear regressors), with their own optimizer.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.data.vocab import PAD
from rlcap.decoding.options import decode, segments
from rlcap.models.base import MarksSegments
from rlcap.errors import ConfigError
from rlcap.rewards import Reward, RewardContext, resolve_reward
from rlcap.rewards.prefix import prefix_scores
from rlcap.rl.credit import discounted_returns, segment_returns
from rlcap.rl.hrl import delta_rewards
from rlcap.rl.losses import masked_mean, reinforce_loss
from rlcap.run_config import SequenceRunConfig, algorithm_field, check_lr, check_min
from rlcap.methods.samples import caption_lengths
from rlcap.rewards.batch import reward_batch
from rlcap.methods.sequence import train_reward
from rlcap.train.logger import OWN_REWARD, Stat, Stats
from rlcap.distributed import word_share
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import (Session, TrainResult, add_part, finish_run, finish_step, open_session, resume_or_start,
                                 train_batches)

log = logging.getLogger(__name__)

BASELINES = "baselines"
PHASE = "hrl_phase"  # session.state: {"phase": "worker" | "manager", "steps": steps done in it}
MANAGER_PARTS = ("manager_att", "manager", "goal", "high")  # the manager's modules (the high-level encoder serves it)


HRL_PREFIX_METRICS = ("cider_d", "cider")


@dataclass
class HrlConfig:
    """algorithm=hrl: [Wang18]'s Algorithm 1 from an XE checkpoint of ``model.arch: hrl`` (manager and worker
    warm-started together, eq. 26), alternating worker and manager phases."""

    gamma: float = help_field(0.95, "discount of the delta-CIDEr-D returns ([Wang18 eq. 24-25]: 0.95)")
    switch_every: int = help_field(50, "steps of one phase before the other trains ([Wang18] leaves the schedule "
                                       "to its supplement; docs/VIDEO.md)")
    first: str = help_field("worker", "the phase that starts: worker or manager")
    goal_noise: float = help_field(0.1, "standard deviation of the manager's Gaussian goal exploration (eq. 23)")
    baseline_lr: float = help_field(1e-3, "learning rate of the two linear baselines (on h_W and h_M)")
    worker_samples: int = help_field(1, "captions sampled per clip in a worker phase (Algorithm 1: one; more "
                                        "sample more captions per step, against the same linear baseline)")
    prefix_metric: str = help_field("cider_d", "what scores every prefix for the delta rewards ([Wang18 sec. 3.3.3]): "
                                               "cider_d: the run's reward (reward.weights; chosen on validation); "
                                               "cider: plain CIDEr, no length penalty, same references (its runs "
                                               "learn to repeat phrases: docs/VIDEO.md)")

    def validate(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"hrl.gamma: expected a number in [0, 1], got {self.gamma}")
        check_min("hrl.switch_every", self.switch_every, 1)
        check_min("hrl.worker_samples", self.worker_samples, 1)
        if self.first not in ("worker", "manager"):
            raise ConfigError(f"hrl.first: {self.first!r} is not one of worker, manager")
        if self.prefix_metric not in HRL_PREFIX_METRICS:
            raise ConfigError(f"hrl.prefix_metric: {self.prefix_metric!r} is not one of "
                              f"{', '.join(HRL_PREFIX_METRICS)}")
        if self.goal_noise < 0:
            raise ConfigError(f"hrl.goal_noise: expected >= 0, got {self.goal_noise:g}")
        check_lr("hrl.baseline_lr", self.baseline_lr)


@dataclass
class HrlRunConfig(SequenceRunConfig):
    """``algorithm: hrl``: hierarchical RL for video: alternating worker and manager phases [Wang18]."""

    # a worker phase samples hrl.worker_samples captions per clip, a manager phase one greedy caption; no KL term
    UNREAD: ClassVar[tuple[str, ...]] = ("rl.n_samples", "rl.micro_batch")

    algorithm: str = algorithm_field("hrl")
    hrl: HrlConfig = help_field(HrlConfig, "hierarchical RL for video: alternating worker and manager phases [Wang18]")


class Baselines(nn.Module):
    """b^w_t = w . h^W_t + b and b^m = v . h^M + c ([Wang18 eq. 14, 22])."""

    def __init__(self, worker_dim: int, manager_dim: int):
        super().__init__()
        self.worker = nn.Linear(worker_dim, 1)
        self.manager = nn.Linear(manager_dim, 1)


def hrl_stats(loss: Stat, baseline_loss: Stat, delta_rewards: torch.Tensor, segments: Stat, tokens: torch.Tensor,
              phase: float, start: float) -> Stats:
    """A phase's step statistics: ``reward`` the mean score of the captions by ``hrl.prefix_metric`` (the sum of
    their delta rewards (B, T)), ``segments`` the mean segments per caption, ``phase`` 1 (worker) or 2 (manager),
    ``seconds`` since ``start``."""
    return {"loss": loss, "baseline_loss": baseline_loss, "reward": delta_rewards.sum(1).mean(), "segments": segments,
            "length": caption_lengths(tokens).mean(), "phase": phase, "seconds": time.perf_counter() - start}


def prefix_reward(session: Session, run_reward: Reward) -> Reward:
    """What scores every prefix (``hrl.prefix_metric``): the run's reward (``cider_d``), or plain CIDEr
    (``cider``) against the same training references, with their document frequencies."""
    cfg = session.cfg
    if cfg.hrl.prefix_metric == "cider_d":
        return run_reward
    train = session.data.splits["train"]
    return resolve_reward(cfg.hrl.prefix_metric, RewardContext.from_config(cfg.reward, dict(zip(train.ids,
                                                                                                 train.refs))))


def manager_params(model: nn.Module) -> tuple[nn.Parameter, ...]:
    return tuple(param for name in MANAGER_PARTS for param in getattr(model, name).parameters())


def worker_params(model: nn.Module) -> tuple[nn.Parameter, ...]:
    managers = {id(param) for param in manager_params(model)}
    return tuple(param for param in model.parameters() if id(param) not in managers and param.requires_grad)


def worker_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg, model, start = session.cfg, session.model, time.perf_counter()
    model.goal_noise = 0.0  # Algorithm 1, line 6
    model.train(cfg.rl.rollout_dropout)  # the mode every loop samples in (a manager phase decodes in eval mode)
    # 1. sampled captions (one per clip as Algorithm 1, or hrl.worker_samples), with the worker's hidden states
    k = cfg.hrl.worker_samples
    out = decode(model, batch.feats, session.decoding.as_sampling(), k, return_hidden=True)
    # 2. eq. 24: delta rewards (sec. 3.3.3) and their discounted returns
    context = reward_batch(batch, k)
    f = delta_rewards(prefix_scores(reward, session.data.vocab, out.tokens, context), out.mask)
    returns = discounted_returns(f, out.mask, cfg.hrl.gamma)
    # 3. eq. 14: the linear baseline on h^W_t, its gradient cut from the worker
    b = session.module(BASELINES).worker(out.hidden.detach()).squeeze(2).float()  # (B, T)
    loss = reinforce_loss(out.logprobs, out.mask, returns - b.detach())
    # the manager frozen (line 9)
    optimizer_step(session, loss * word_share(out.mask, session.ranks), frozen=manager_params(model))
    b_loss = masked_mean((b - returns) ** 2, out.mask)
    optimizer_step(session, b_loss * word_share(out.mask, session.ranks), part=BASELINES)
    return hrl_stats(loss.detach(), b_loss.detach(), f, 0.0, out.tokens, 1.0, start)


def manager_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg, model, start = session.cfg, session.model, time.perf_counter()
    model.goal_noise = cfg.hrl.goal_noise  # eq. 23 (line 12)
    # 1. greedy decoding (dropout off) by the frozen worker under the manager's explored goals (line 13)
    tokens, logprobs, starts, h_m = segments(model, batch.feats, session.decoding)
    mask = tokens != PAD
    # 2. eq. 25: delta rewards summed per segment, discounted over segments
    f = delta_rewards(prefix_scores(reward, session.data.vocab, tokens, reward_batch(batch, 1)), mask)
    ends = torch.cat([starts[:, 1:], torch.zeros_like(starts[:, :1])], 1)  # a segment ends before the next starts
    returns = segment_returns(f, ends, mask, cfg.hrl.gamma)
    # 3. eq. 22: the linear baseline on h^M (cut from the manager), the loss through the goals only
    b = session.module(BASELINES).manager(h_m.detach()).squeeze(2).float()  # (B, T)
    loss = reinforce_loss(logprobs, mask, returns - b.detach())
    # the worker frozen (line 15)
    optimizer_step(session, loss * word_share(mask, session.ranks), frozen=worker_params(model))
    b_loss = masked_mean((b - returns) ** 2, mask)
    optimizer_step(session, b_loss * word_share(mask, session.ranks), part=BASELINES)
    model.goal_noise = 0.0
    return hrl_stats(loss.detach(), b_loss.detach(), f, starts.sum(1).float().mean(), tokens, 2.0, start)


def train_hrl(cfg: HrlRunConfig) -> TrainResult:
    session = open_session(cfg, splits=("train", cfg.val.split))
    model = session.model.module
    if not isinstance(model, MarksSegments):
        raise ConfigError("algorithm=hrl trains a model of arch hrl: give init_from an XE checkpoint of model.arch=hrl")
    add_part(session, BASELINES, Baselines(model.worker.hidden_size, model.manager.hidden_size),
             dataclasses.replace(cfg.optim, lr=cfg.hrl.baseline_lr, lr_decay_every=0))
    resume_or_start(session)
    phase = session.state.setdefault(PHASE, {"phase": cfg.hrl.first, "steps": 0})
    with train_reward(session) as run_reward:
        reward = prefix_reward(session, run_reward)
        scored = cfg.reward.weights if cfg.hrl.prefix_metric == "cider_d" else "plain CIDEr"
        session.logger.note(f"[Wang18]: alternating phases of {cfg.hrl.switch_every} steps from the {cfg.hrl.first}; "
                            f"gamma {cfg.hrl.gamma}; goal noise {cfg.hrl.goal_noise}; prefixes scored by {scored} for "
                            f"the delta rewards; worker samples at temperature {cfg.decode.temperature}, rollout "
                            f"dropout {cfg.rl.rollout_dropout}; the manager's greedy worker in eval mode",
                            samples_per_image=cfg.hrl.worker_samples,
                            learns_from=cfg.reward.weights if cfg.hrl.prefix_metric == "cider_d" else OWN_REWARD)
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            step = worker_step if phase["phase"] == "worker" else manager_step
            stats = step(session, batch, reward)
            phase["steps"] += 1
            if phase["steps"] >= cfg.hrl.switch_every:  # Algorithm 1's alternation
                phase.update(phase="manager" if phase["phase"] == "worker" else "worker", steps=0)
            if finish_step(session, stats):
                break
    return finish_run(session)


register(Method("hrl", train_hrl, HrlRunConfig,
                "hierarchical RL for video: alternating worker and manager phases [Wang18]"))
