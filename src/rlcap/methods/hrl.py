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
from typing import NamedTuple

import torch
from torch import nn

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding import banned_words, sample, word_logprobs
from rlcap.errors import ConfigError
from rlcap.host_sync import on_host, to_device, to_host
from rlcap.rewards import Reward, RewardBatch, RewardContext, resolve_reward
from rlcap.rl.credit import discounted_returns, segment_returns
from rlcap.rl.hrl import delta_rewards
from rlcap.rl.losses import masked_mean, reinforce_loss
from rlcap.run_config import SequenceRunConfig, algorithm_field, check_lr, check_min
from rlcap.methods.samples import caption_lengths
from rlcap.decoding.stepping import decode_options
from rlcap.rewards.batch import reward_batch
from rlcap.methods.sequence import train_reward
from rlcap.train.logger import Stat
from rlcap.distributed import word_share
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import (Session, TrainResult, add_part, begin, finish_run, finish_step, open_session, train_batches)

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

    algorithm: str = algorithm_field("hrl")
    hrl: HrlConfig = help_field(HrlConfig, "hierarchical RL for video: alternating worker and manager phases [Wang18]")


class Baselines(nn.Module):
    """b^w_t = w . h^W_t + b and b^m = v . h^M + c ([Wang18 eq. 14, 22])."""

    def __init__(self, worker_dim: int, manager_dim: int):
        super().__init__()
        self.worker = nn.Linear(worker_dim, 1)
        self.manager = nn.Linear(manager_dim, 1)


class HrlStats(NamedTuple):
    loss: Stat
    baseline_loss: Stat
    reward: Stat  # mean score of the captions by hrl.prefix_metric (the sum of their delta rewards)
    segments: Stat  # mean segments per caption
    length: Stat
    phase: float  # 1: worker, 2: manager
    seconds: float


def prefix_reward(s: Session, run_reward: Reward) -> Reward:
    """What scores every prefix (``hrl.prefix_metric``): the run's reward (``cider_d``), or plain CIDEr
    (``cider``) against the same training references, with their document frequencies."""
    if s.cfg.hrl.prefix_metric == "cider_d":
        return run_reward
    train = s.data.splits["train"]
    return resolve_reward(s.cfg.hrl.prefix_metric, RewardContext.from_config(s.cfg.reward, dict(zip(train.ids,
                                                                                                     train.refs))))


def prefix_scores(reward: Reward, vocab, tokens: torch.Tensor, batch: RewardBatch) -> torch.Tensor:
    """The prefix metric (:func:`prefix_reward`) of every prefix of every caption: tokens (B, T) -> (B, T),
    one reward call. At EOS the finished caption is scored again (its delta is 0); padding is not scored (0)."""
    host_tokens = to_host(tokens)  # one transfer; the metric is CPU code
    with on_host():
        return to_device(_prefix_scores_on_host(reward, vocab, host_tokens, batch), tokens.device)


def _prefix_scores_on_host(reward: Reward, vocab, tokens: torch.Tensor, batch: RewardBatch) -> torch.Tensor:
    rows, captions, ids, refs = [], [], [], []
    for i, row in enumerate(tokens.tolist()):
        words: list[str] = []
        for t, w in enumerate(row):
            if w == PAD:
                break
            if w != EOS:
                words.append(vocab.itos[w])
            rows.append((i, t))
            captions.append(" ".join(words))
            ids.append(batch.image_ids[i])
            refs.append(batch.refs[i])
    values = reward(captions, RewardBatch(ids, refs)).tolist() if captions else []
    out = torch.zeros(tokens.shape)  # cpu: filled on the host, copied to the device once
    for (i, t), v in zip(rows, values):
        out[i, t] = v
    return out


def manager_params(model: nn.Module) -> tuple[nn.Parameter, ...]:
    return tuple(p for name in MANAGER_PARTS for p in getattr(model, name).parameters())


def worker_params(model: nn.Module) -> tuple[nn.Parameter, ...]:
    mine = {id(p) for p in manager_params(model)}
    return tuple(p for p in model.parameters() if id(p) not in mine and p.requires_grad)


def worker_step(s: Session, batch: Batch, reward: Reward) -> HrlStats:
    cfg, model, start = s.cfg, s.model, time.perf_counter()
    model.goal_noise = 0.0  # Algorithm 1, line 6
    model.train(cfg.rl.rollout_dropout)  # the mode every loop samples in (a manager phase decodes in eval mode)
    # 1. sampled captions (one per clip as Algorithm 1, or hrl.worker_samples), with the worker's hidden states
    k = cfg.hrl.worker_samples
    out = sample(model, batch.feats, k, cfg.decode.max_len, temperature=cfg.decode.temperature, return_hidden=True,
                 **decode_options(s.device))
    # 2. eq. 24: delta rewards (sec. 3.3.3) and their discounted returns
    rb = reward_batch(batch, k)
    f = delta_rewards(prefix_scores(reward, s.data.vocab, out.tokens, rb), out.mask)
    returns = discounted_returns(f, out.mask, cfg.hrl.gamma)
    # 3. eq. 14: the linear baseline on h^W_t, its gradient cut from the worker
    b = s.parts[BASELINES].module.worker(out.hidden.detach()).squeeze(2).float()  # (B, T)
    loss = reinforce_loss(out.logprobs, out.mask, returns - b.detach())
    optimizer_step(s, loss * word_share(out.mask, s.ranks), frozen=manager_params(model))  # the manager frozen (line 9)
    b_loss = masked_mean((b - returns) ** 2, out.mask)
    optimizer_step(s, b_loss * word_share(out.mask, s.ranks), part=BASELINES)
    return HrlStats(loss.detach(), b_loss.detach(), f.sum(1).mean(), 0.0,
                    caption_lengths(out.tokens).mean(), 1.0, time.perf_counter() - start)


def greedy_segments(model: nn.Module, batch: Batch, max_len: int, exit_every: int = 1):
    """The worker decodes greedily under the manager's (noisy) goals. -> tokens (B, T), log pi of each
    word (with gradient), segment starts (B, T) bool and h^M at each step (B, T, M).

    With dropout off, the caller's modes restored after: Algorithm 1 (lines 12-13) explores by the goal
    noise alone (eq. 23), and with dropout on the "greedy" worker would be another random policy. Only the
    dropout layers change mode, not the whole model: autograd stays on, so the gradient reaches the goals
    through the encoder's LSTMs, whose cuDNN backward (on a GPU) refuses a module in eval mode."""
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    modes = [m.training for m in dropouts]
    for m in dropouts:
        m.eval()
    try:
        return _greedy_segments(model, batch, max_len, exit_every)
    finally:
        for m, mode in zip(dropouts, modes):
            m.train(mode)


def _greedy_segments(model: nn.Module, batch: Batch, max_len: int, exit_every: int):
    """:func:`greedy_segments` in the model's current mode.

    Eq. 21 credits a goal with its own segment's words: where the critic (frozen, deterministic)
    will start a segment at the next step, the worker state entering it is detached from the goals before."""
    memory = model.encode(batch.feats)
    state = model.init_state(memory)
    word = torch.full((batch.feats.att.size(0),), BOS, dtype=torch.long, device=batch.feats.att.device)
    done = torch.zeros_like(word, dtype=torch.bool)
    tokens, logprobs, starts, h_m = [], [], [], []
    ban = None
    for p in range(max_len):
        step_lp, state = model.step(memory, state, word)
        ban = banned_words(step_lp.size(1), step_lp) if ban is None else ban
        step_lp = word_logprobs(step_lp, ban)  # the policy decoding draws from: PAD and BOS never written
        starts.append(model.segment_start(state))
        h_m.append(state.h_m)
        word = step_lp.detach().argmax(1).masked_fill(done, PAD)  # greedy: the worker as the oracle (line 13)
        logprobs.append(torch.where(done, 0.0, step_lp.gather(1, word.clamp(min=0)[:, None]).squeeze(1)))
        tokens.append(word)
        done = done | (word == EOS)
        if exit_every and (p + 1) % exit_every == 0 and bool(done.all()):  # (decode.exit_every: 0 on a GPU)
            break
        with torch.no_grad():
            ends = model.critic.step(state.h_i, word)[0] > 0  # (B,) the next step starts a segment
        state = state._replace(h_w=torch.where(ends[:, None], state.h_w.detach(), state.h_w),
                               c_w=torch.where(ends[:, None], state.c_w.detach(), state.c_w))
    tokens_t = torch.stack(tokens, 1)
    return tokens_t, torch.stack(logprobs, 1), torch.stack(starts, 1) & (tokens_t != PAD), torch.stack(h_m, 1)


def manager_step(s: Session, batch: Batch, reward: Reward) -> HrlStats:
    cfg, model, start = s.cfg, s.model, time.perf_counter()
    model.goal_noise = cfg.hrl.goal_noise  # eq. 23 (line 12)
    # 1. greedy decoding (eval mode) by the frozen worker under the manager's explored goals (line 13)
    tokens, logprobs, starts, h_m = greedy_segments(model, batch, cfg.decode.max_len,
                                                    decode_options(s.device)["exit_every"])
    mask = tokens != PAD
    # 2. eq. 25: delta rewards summed per segment, discounted over segments
    f = delta_rewards(prefix_scores(reward, s.data.vocab, tokens, reward_batch(batch, 1)), mask)
    ends = torch.cat([starts[:, 1:], torch.zeros_like(starts[:, :1])], 1)  # a segment ends before the next starts
    returns = segment_returns(f, ends, mask, cfg.hrl.gamma)
    # 3. eq. 22: the linear baseline on h^M (cut from the manager), the loss through the goals only
    b = s.parts[BASELINES].module.manager(h_m.detach()).squeeze(2).float()  # (B, T)
    loss = reinforce_loss(logprobs, mask, returns - b.detach())
    optimizer_step(s, loss * word_share(mask, s.ranks), frozen=worker_params(model))  # the worker frozen (line 15)
    b_loss = masked_mean((b - returns) ** 2, mask)
    optimizer_step(s, b_loss * word_share(mask, s.ranks), part=BASELINES)
    model.goal_noise = 0.0
    return HrlStats(loss.detach(), b_loss.detach(), f.sum(1).mean(), starts.sum(1).float().mean(),
                    caption_lengths(tokens).mean(), 2.0, time.perf_counter() - start)


def train_hrl(cfg: HrlRunConfig) -> TrainResult:
    s = open_session(cfg, splits=("train", cfg.val.split))
    model = s.model
    if not hasattr(model, "segment_start"):
        from rlcap.errors import ConfigError

        raise ConfigError("algorithm=hrl trains a model of arch hrl: give init_from an XE checkpoint of model.arch=hrl")
    add_part(s, BASELINES, Baselines(model.worker.hidden_size, model.manager.hidden_size),
             dataclasses.replace(cfg.optim, lr=cfg.hrl.baseline_lr, lr_decay_every=0))
    begin(s)
    phase = s.state.setdefault(PHASE, {"phase": cfg.hrl.first, "steps": 0})
    with train_reward(s) as run_reward:
        reward = prefix_reward(s, run_reward)
        scored = cfg.reward.weights if cfg.hrl.prefix_metric == "cider_d" else "plain CIDEr"
        s.logger.note(f"[Wang18]: alternating phases of {cfg.hrl.switch_every} steps from the {cfg.hrl.first}; gamma "
                      f"{cfg.hrl.gamma}; goal noise {cfg.hrl.goal_noise}; prefixes scored by {scored} for the delta "
                      f"rewards; worker samples at temperature {cfg.decode.temperature}, rollout dropout "
                      f"{cfg.rl.rollout_dropout}; the manager's greedy worker in eval mode")
        for batch in train_batches(s, cfg.rl.epochs, cfg.rl.batch_size):
            step = worker_step if phase["phase"] == "worker" else manager_step
            stats = step(s, batch, reward)
            phase["steps"] += 1
            if phase["steps"] >= cfg.hrl.switch_every:  # Algorithm 1's alternation
                phase.update(phase="manager" if phase["phase"] == "worker" else "worker", steps=0)
            if finish_step(s, stats._asdict()):
                break
    return finish_run(s)


register(Method("hrl", train_hrl, HrlRunConfig, "hierarchical RL for video: alternating worker and manager phases [Wang18]"))
