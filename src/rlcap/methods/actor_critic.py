"""Actor-critic captioning with a value network: [Shi18].

Two parts: ``policy`` (the captioner, eq. 1-4, started from an XE checkpoint: eq. 8) and
``value`` (:class:`rlcap.models.ValueNetwork`, sec. 3.2.2; :class:`rlcap.models.AttValueNetwork` with
``ac.value_features: att``; :class:`rlcap.models.HiddenValueNetwork` on the policy's own decoder states with
``hidden``, the one for a transformers policy), each with its own optimizer. Two
phases (sec. 3.3.2), the phase and its position kept in ``session.state`` so that a killed run
resumes exactly:

1. value pretraining (``ac.value_pretrain_epochs``): the value network learns eq. 9 on captions
   sampled from the frozen XE policy;
2. joint training (``rl.epochs``): per-word advantages ``R - v(s_t)`` (eq. 10) weigh the policy's
   REINFORCE loss, and the value network keeps learning eq. 9 (its update is eq. 11).

The reward ``R`` is the run's weighted reward: [Shi18]'s eq. 7 mixes CIDEr-D with the embedding
reward of eq. 6, ``reward.weights: {cider_d: 1, embedding: w}`` with ``reward.paths.embedding`` a
checkpoint of ``algorithm: embedding``. After training, ``ac.lookahead`` picks the lambda of
lookahead inference (Fig. 1) on the validation split (``eval/lookahead.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import ClassVar
import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.data.vocab import BOS
from rlcap.errors import ConfigError
from rlcap.models import HiddenValueNetwork, build_value_model, hidden_size
from rlcap.models.value import FROM_POLICY_STATE, VALUE_MODELS
from rlcap.rewards import Reward
from rlcap.rl.credit import value_advantages, value_loss
from rlcap.rl.losses import masked_mean, reinforce_loss
from rlcap.run_config import OptimConfig, RunConfig, SequenceRunConfig, algorithm_field, check_lr, check_min
from rlcap.methods.reference import Scored, add_kl, add_reference
from rlcap.methods.samples import Rollout, caption_lengths, rollout
from rlcap.rewards.combine import Parts, part_means, score
from rlcap.train.logger import Stat, Stats
from rlcap.methods.sequence import conventions, pretrain_phase, train_reward
from rlcap.distributed import word_share
from rlcap.eval.lookahead import lookahead_for_run
from rlcap.train.checkpoint import VALUE
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import (Session, TrainResult, add_part, feature_dims, finish_run, finish_step, open_session,
                                 resume_or_start, train_batches)

log = logging.getLogger(__name__)

PRETRAIN = "value_pretrain"  # session.state key: {"epoch", "step_in_epoch"} of phase 1


@dataclass
class ActorCriticConfig:
    """algorithm=ac: actor-critic with a value network ([Shi18 sec. 3.2.2, 3.3.2],
    eq. 8-12). The policy trains with ``optim``, the value network with these settings."""

    value_lr: float = help_field(5e-4, "learning rate of the value network ([Shi18 sec. 4.1]: 5e-4)")
    value_lr_decay_every: int = help_field(2, "decay the value network's rate every this many joint epochs "
                                              "([Shi18 sec. 4.1]: 2; 0: never)")
    value_lr_decay_rate: float = help_field(0.9, "its decay factor ([Shi18 sec. 4.1]: 0.9)")
    value_pretrain_epochs: int = help_field(1, "epochs of value training on samples of the frozen XE policy "
                                               "before the joint phase ([Shi18 sec. 3.3.2]; the paper gives no number)")
    value_features: str = help_field("fc", "what the value network reads of the image: fc (the pooled vector), "
                                           "att (also attention over the region features, conditioned on its LSTM "
                                           "state at each step, as an UpDown policy sees them) or hidden (the "
                                           "policy's own decoder state, detached, under [Shi18]'s perceptron: for a "
                                           "transformers policy, model.arch=hf)")
    lookahead: list[float] = help_field([], "after training, decode the validation split with lookahead "
                                            "inference at each of these lambdas (Fig. 1) and write lookahead.json "
                                            "beside the checkpoints ([]: skip; 1.0 is plain beam search)")

    def validate(self) -> None:
        check_lr("ac.value_lr", self.value_lr)
        check_min("ac.value_lr_decay_every", self.value_lr_decay_every, 0)
        check_min("ac.value_pretrain_epochs", self.value_pretrain_epochs, 0)
        if self.value_features not in (*VALUE_MODELS, FROM_POLICY_STATE):
            raise ConfigError(f"ac.value_features: {self.value_features!r} is not one of "
                              f"{[*VALUE_MODELS, FROM_POLICY_STATE]}")
        if self.value_features == FROM_POLICY_STATE and self.lookahead:
            raise ConfigError("ac.lookahead steps the value network word by word; ac.value_features=hidden has no "
                              "state of its own to step: use fc or att, or ac.lookahead=[]")
        bad = [x for x in self.lookahead if not 0 <= x <= 1]
        if bad:
            raise ConfigError(f"ac.lookahead: every lambda must be in [0, 1], got {bad[0]}")


@dataclass
class ActorCriticRunConfig(SequenceRunConfig):
    """``algorithm: ac``: actor-critic with a value network [Shi18]."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("ac")
    ac: ActorCriticConfig = help_field(ActorCriticConfig, "actor-critic with a value network [Shi18]")


def value_optim(cfg: RunConfig) -> OptimConfig:
    """The value network's optimizer: the run's ``optim`` with the ``ac`` section's rate and decay."""
    ac = cfg.ac
    return dataclasses.replace(cfg.optim, lr=ac.value_lr, lr_decay_every=ac.value_lr_decay_every,
                               lr_decay_rate=ac.value_lr_decay_rate)


def value_inputs(tokens: torch.Tensor) -> torch.Tensor:
    """Sampled captions (R, T) -> the value network's inputs BOS w_1..w_{T-1} (R, T), so that
    ``values[:, t]`` is ``v(s_t)``, the state word ``t`` is chosen from (rl/credit.py's convention)."""
    bos = torch.full_like(tokens[:, :1], BOS)
    return torch.cat([bos, tokens[:, :-1]], dim=1)


def critic(session: Session, batch: Batch, roll: Rollout) -> torch.Tensor:
    """v(s_t) of every step of the sampled captions: (B*n, T), with the value network's gradient."""
    value = session.module(VALUE)
    if roll.hidden is not None:  # ac.value_features=hidden: the policy's states, detached (no feedback loop)
        return value(roll.hidden.detach())
    return value(batch.feats, value_inputs(roll.tokens), seq_per_img=session.cfg.rl.n_samples)


def ac_stats(loss: Stat, policy_loss: Stat, value_loss: Stat, rewards: torch.Tensor, values: torch.Tensor,
             adv: torch.Tensor, roll: Rollout, phase: float, reward_s: float, backward_s: float) -> Stats:
    """A step's statistics, left on the device until a line is logged: ``loss`` the policy's and the value
    network's together (the policy's is 0 in value pretraining), the means of R, of v(s_t) and of R - v(s_t)
    over the valid steps, the caption length, ``phase`` (1: value pretraining, 2: joint) and the seconds."""
    return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "reward": rewards.mean(),
            "value": masked_mean(values.detach(), roll.mask), "advantage": masked_mean(adv, roll.mask),
            "length": caption_lengths(roll.tokens).mean(), "phase": phase, "sample_s": roll.seconds,
            "reward_s": reward_s, "backward_s": backward_s}


def value_pretrain_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg = session.cfg
    # 1. sample n captions per image from the frozen XE policy (no gradient reaches it)
    with torch.no_grad():
        roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding, hidden=reads_policy(cfg))
    # 2. score them: R (B*n,)
    t0 = time.perf_counter()
    parts: Parts = {}  # each reward's own scores, logged as reward/<name>
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens, parts)
    reward_s = time.perf_counter() - t0
    # 3. eq. 9: regress v(s_t) on R at every step of each caption; a step of the value network
    t0 = time.perf_counter()
    values = critic(session, batch, roll)  # (B*n, T)
    v_loss = value_loss(values, rewards, roll.mask)
    optimizer_step(session, v_loss * word_share(roll.mask, session.ranks), part=VALUE)
    adv = value_advantages(rewards, values, roll.mask)
    return {**ac_stats(v_loss.detach(), 0.0, v_loss.detach(), rewards, values, adv, roll, 1.0, reward_s,
                       time.perf_counter() - t0), **part_means(parts)}


def joint_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg = session.cfg
    # 1. sample n captions per image; their log-probabilities carry the policy's gradient
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding, hidden=reads_policy(cfg))
    # 2. score them: R (B*n,), the weighted reward (eq. 6-7)
    t0 = time.perf_counter()
    parts: Parts = {}  # each reward's own scores, logged as reward/<name>
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens, parts)
    reward_s = time.perf_counter() - t0
    # 3. the critic: v(s_t) for every step (B*n, T)
    t0 = time.perf_counter()
    values = critic(session, batch, roll)
    # 4. eq. 10: per-word advantages R - v(s_t), detached; the policy's REINFORCE step
    adv = value_advantages(rewards, values, roll.mask)  # (B*n, T)
    p_loss = reinforce_loss(roll.logprobs, roll.mask, adv)
    # plus beta times the KL to the reference policy (rl.kl_coef; [Shao24 eq. 4]'s k3)
    p_loss, kl = add_kl(session, p_loss, batch, Scored(roll.tokens, roll.logprobs, roll.mask, cfg.rl.n_samples))
    optimizer_step(session, p_loss * word_share(roll.mask, session.ranks))
    # 5. eq. 9 / 11: the value network's squared error to R, and its own step (the policy is not in its graph)
    v_loss = value_loss(values, rewards, roll.mask)
    optimizer_step(session, v_loss * word_share(roll.mask, session.ranks), part=VALUE)
    return {**ac_stats((p_loss + v_loss).detach(), p_loss.detach(), v_loss.detach(), rewards, values, adv, roll, 2.0,
                       reward_s, time.perf_counter() - t0), **kl, **part_means(parts)}


def pretrain_value(session: Session, reward: Reward) -> bool:
    """Phase 1, from where ``session.state`` says it stands; True when ``max_steps`` stopped the run."""
    return pretrain_phase(session, PRETRAIN, session.cfg.ac.value_pretrain_epochs, 1,
                          lambda batch: value_pretrain_step(session, batch, reward))


def reads_policy(cfg: RunConfig) -> bool:
    """Whether the value network reads the policy's decoder states (``ac.value_features: hidden``)."""
    return cfg.ac.value_features == FROM_POLICY_STATE


def train_actor_critic(cfg: ActorCriticRunConfig) -> TrainResult:
    if reads_policy(cfg) and cfg.rl.sample_method != "sample":
        raise ConfigError("ac.value_features=hidden reads the decoder states of sampled captions: rl.sample_method "
                          "must be 'sample'")
    session = open_session(cfg, splits=("train", cfg.val.split))
    dims = feature_dims(session.data)
    value_net = (HiddenValueNetwork(hidden_size(session.model.module, session.cfg.model)) if reads_policy(cfg) else
                 build_value_model(session.cfg.model, len(session.data.vocab), dims["fc"], dims["att"],
                                   cfg.ac.value_features))
    add_part(session, VALUE, value_net, value_optim(cfg))
    add_reference(session)  # rl.kl_coef > 0: the KL term's reference policy
    resume_or_start(session)
    with train_reward(session) as reward:
        stated = conventions(cfg, len(session.data.splits["train"]), "value network v(s_t), per word ([Shi18 eq. 10])")
        session.logger.note(f"{stated}; value pretraining epochs {cfg.ac.value_pretrain_epochs}; "
                            f"value lr {cfg.ac.value_lr}", samples_per_image=cfg.rl.n_samples,
                            learns_from=cfg.reward.weights)
        session.model.train(cfg.rl.rollout_dropout)
        value_net.train()
        if not pretrain_value(session, reward):
            for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
                if finish_step(session, joint_step(session, batch, reward)):
                    break
    result = finish_run(session)
    if cfg.ac.lookahead and not result.stopped_early and session.ranks.main:  # under torchrun, rank 0 chooses lambda
        lookahead_for_run(session, cfg.ac.lookahead)
    return result


register(Method("ac", train_actor_critic, ActorCriticRunConfig, "actor-critic with a value network [Shi18]"))
