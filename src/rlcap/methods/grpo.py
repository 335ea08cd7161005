"""GRPO (Shao et al. 2024, [Shao24 eq. 3]) on captions, from an XE checkpoint (``init_from``), with the variants
TRL's GRPOTrainer offers: Dr. GRPO's unscaled advantages and constant normaliser ([Liu25]), DAPO's clip-higher,
token-level average and truncation mask ([Yu25]), GSPO's sequence-level ratio ([Zheng25]), and the KL term to
the starting policy (``rl.kl_coef``): k3 as [Shao24 eq. 3] writes it, or times the ratio (``grpo.kl_ratio``,
[DeepSeek25]; TRL's default).

Each step samples G = ``rl.n_samples`` captions per image, scores them with the run's reward (any of rlcap's:
``reward.weights``), takes each caption's advantage from its image's group (``grpo.scale``) and makes
``grpo.iterations`` updates on the same captions with the clipped importance ratio (``grpo.ratio``), the old
policy's log-probabilities being the sampling pass's. The first update's ratio is 1, so that with one update,
no scaling and no KL term GRPO is SCST with the group's mean as the baseline (docs/RL.md, "GRPO and SCST").
The maths are :mod:`rlcap.rl.grpo`; a step of the log is one sampled batch and its updates.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from rlcap.config import help_field
from rlcap.data.loader import Batch
from rlcap.data.vocab import EOS
from rlcap.distributed import Ranks, count_share, counted, global_mean, total, word_share
from rlcap.errors import ConfigError
from rlcap.methods.reference import reference_logprobs
from rlcap.methods.registry import Method, register
from rlcap.methods.samples import caption_lengths, rollout, teacher_forced_logprobs
from rlcap.methods.sequence import needs_text, sequence_session
from rlcap.rewards import Reward
from rlcap.rewards.combine import Parts, WeightedReward, part_means, score
from rlcap.rl.grpo import (GRPO_AGGREGATIONS, GRPO_LOSSES, GRPO_RATIOS, GRPO_SCALES, batch_normalised, decoupled_sum,
                           ended_only, group_advantages, grpo_loss)
from rlcap.rl.losses import entropy_bonus
from rlcap.run_config import SequenceRunConfig, algorithm_field, check_min
from rlcap.train.logger import Stats
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches

log = logging.getLogger(__name__)


@dataclass
class GrpoConfig:
    """GRPO ([Shao24]) and its variants; the defaults are TRL 1.16's GRPOConfig's, but for kl_ratio (TRL's
    use_bias_correction_kl, true there): rlcap's default is the KL term as [Shao24 eq. 3] writes it."""

    iterations: int = help_field(1, "updates per sampled batch, on the same captions ([Shao24]'s mu; TRL's "
                                    "num_iterations, default 1)")
    epsilon: float = help_field(0.2, "the ratio is clipped below at 1 - epsilon ([Shao24 eq. 3]; TRL's 0.2)")
    epsilon_high: float | None = help_field(None, "and above at 1 + epsilon_high (null: epsilon; DAPO's "
                                                  "clip-higher takes 0.28 [Yu25])")
    scale: str = help_field("group", "what a caption's reward minus its group's mean is divided by: group (the "
                                     "group's std, [Shao24]), batch (the batch's std) or none (Dr. GRPO, [Liu25])")
    loss: str = help_field("dapo", "how the per-word loss is averaged: grpo (per caption, then over captions, "
                                   "[Shao24]), dapo (over the batch's words, [Yu25]; TRL's default) or dr_grpo "
                                   "(summed, / captions x decode.max_len, [Liu25])")
    ratio: str = help_field("token", "the importance ratio: token ([Shao24]) or sequence (GSPO: the geometric "
                                     "mean over the caption's words, [Zheng25])")
    mask_truncated: bool = help_field(False, "leave out of the loss the captions cut by decode.max_len before "
                                             "their EOS (TRL's mask_truncated_completions; [Yu25])")
    aggregation: str = help_field("sum_then_normalize", "with several rewards: sum_then_normalize (the group "
                                                        "advantage of their weighted sum, [Shao24]) or "
                                                        "normalize_then_sum (GDPO: each reward's own group "
                                                        "advantage, weighted and summed, then normalised over the "
                                                        "batch, [Liu26]; TRL's multi_objective_aggregation)")
    kl_ratio: bool = help_field(False, "multiply each word's k3 term by the importance ratio, so that its "
                                       "gradient is that of the KL it estimates, from the policy to the reference "
                                       "([DeepSeek25]; TRL's use_bias_correction_kl, true there); false: k3 as "
                                       "[Shao24 eq. 3] writes it, whose gradient is that of the KL from the "
                                       "reference to the policy")

    def validate(self) -> None:
        check_min("grpo.iterations", self.iterations, 1)
        for key, value in (("epsilon", self.epsilon), ("epsilon_high", self.epsilon_high)):
            if value is not None and not 0 < value < 1:
                raise ConfigError(f"grpo.{key}: expected a number in (0, 1), got {value}")
        for key, value, allowed in (("scale", self.scale, GRPO_SCALES), ("loss", self.loss, GRPO_LOSSES),
                                    ("ratio", self.ratio, GRPO_RATIOS), ("aggregation", self.aggregation,
                                                                         GRPO_AGGREGATIONS)):
            if value not in allowed:
                raise ConfigError(f"grpo.{key}: {value!r} is not one of {list(allowed)}")

    def reads(self, key: str) -> bool:
        """The clipping acts from the second update on (the first's ratio is 1); GDPO normalises by its own
        stages, not by ``scale``; ``kl_ratio``, read with a KL term only, is the run config's to say
        (:meth:`GrpoRunConfig.reads`)."""
        if key == "scale":
            return self.aggregation == "sum_then_normalize"
        return key not in ("epsilon", "epsilon_high") or self.iterations > 1

    def notes(self) -> list[str]:
        """Settings that run but are likely not what was meant, one line each (the run logs them as warnings)."""
        out = []
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            out.append(f"grpo.epsilon_high={self.epsilon_high} is below grpo.epsilon={self.epsilon}: the ratio may "
                       f"rise less than it may fall, the opposite of DAPO's clip-higher [Yu25] (null: epsilon)")
        if self.ratio == "sequence" and self.loss != "grpo":
            out.append(f"grpo.ratio=sequence with grpo.loss={self.loss} weighs each caption by its length, not 1/G "
                       f"as GSPO [Zheng25] does: set grpo.loss=grpo for GSPO's objective")
        return out

    def check_run(self, run: SequenceRunConfig, name: str) -> None:
        """A group needs two samples; the ratio needs samples of the policy (not the beam's n-best)."""
        if run.rl.n_samples < 2:
            raise ConfigError(f"algorithm={name} takes its advantages from a group of samples: rl.n_samples must "
                              f"be at least 2, got {run.rl.n_samples}")
        if run.rl.sample_method != "sample":
            raise ConfigError(f"algorithm={name} samples its captions: rl.sample_method must be 'sample', "
                              f"got {run.rl.sample_method!r}")

    @property
    def high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


@dataclass
class GrpoRunConfig(SequenceRunConfig):
    """``algorithm: grpo``: group advantages and a clipped ratio [Shao24], with Dr. GRPO, DAPO and GSPO's variants."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("grpo")
    grpo: GrpoConfig = help_field(GrpoConfig, "GRPO: group advantages and a clipped ratio [Shao24], with Dr. GRPO, "
                                              "DAPO and GSPO's variants")

    def reads(self, key: str) -> bool:
        """``grpo.kl_ratio`` shapes the KL term: read only with one (``rl.kl_coef > 0``)."""
        return super().reads(key) and (key != "grpo.kl_ratio" or self.rl.kl_coef > 0)


def batch_std(rewards: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """The (unbiased) std of the whole batch's rewards (B*G,), every rank's together under torchrun: ()."""
    if ranks.world == 1:
        return rewards.float().std()
    mine = counted(rewards.float(), ranks)  # (none on a rank that steps on a stand-in)
    count = total(torch.tensor(float(mine.numel()), device=rewards.device), ranks)
    squares = total(((mine - global_mean(rewards, ranks)) ** 2).sum(), ranks)
    return (squares / (count - 1).clamp(min=1.0)).sqrt()


def advantages(rewards: torch.Tensor, parts: Parts, reward: Reward, g: int, gc: GrpoConfig,
               ranks: Ranks) -> torch.Tensor:
    """(B*G,) advantages: the group advantage of the summed ``rewards`` ([Shao24 sec. 4.1.2], ``grpo.scale``), or
    with ``normalize_then_sum`` GDPO's ([Liu26]): each reward of ``parts`` normalised in its group, weighted,
    summed, then normalised over the batch (every rank's)."""
    if gc.aggregation == "sum_then_normalize":
        return group_advantages(rewards, g, gc.scale, batch_std(rewards, ranks) if gc.scale == "batch" else None)
    if isinstance(reward, WeightedReward) and parts:
        summed = decoupled_sum({k: v.to(rewards.device).float() for k, v in parts.items()}, reward.weights, g)
    else:  # a reward of one's own, not split into parts: GDPO of one reward
        summed = decoupled_sum({"reward": rewards}, {"reward": 1.0}, g)
    return batch_normalised(summed, global_mean(summed, ranks), batch_std(summed, ranks))


def grpo_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg, gc, g = session.cfg, session.cfg.grpo, session.cfg.rl.n_samples
    # 1. sample G captions per image; their log-probabilities (with gradient) are the first update's, and,
    #    detached, pi_theta_old's of every update ([Shao24 eq. 3])
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding, text=needs_text(reward))
    old = roll.logprobs.detach()
    mask = ended_only(roll.mask, roll.tokens, EOS) if gc.mask_truncated else roll.mask  # (B*G, T)
    # 2. rewards; 3. advantages from each image's group ([Shao24 sec. 4.1.2]), and the reference's log-probabilities
    t0 = time.perf_counter()
    parts: Parts = {}  # each reward's own scores, logged as reward/<name>
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens, parts)  # (B*G,)
    adv = advantages(rewards, parts, reward, g, gc, session.ranks)
    ref = reference_logprobs(session, batch, roll.tokens, g) if cfg.rl.kl_coef > 0 else None  # (B*G, T)
    reward_s = time.perf_counter() - t0
    # 4. grpo.iterations updates on the same captions: the clipped ratio, plus beta * k3 per word (eq. 3-4)
    t0 = time.perf_counter()
    share = word_share(mask, session.ranks) if gc.loss == "dapo" else count_share(
        torch.tensor(float(mask.size(0)), device=mask.device), session.ranks)
    logprobs, first, last = roll.logprobs, None, None
    for update in range(gc.iterations):
        if update:  # the policy has moved: its log-probabilities of the same captions, by teacher forcing
            logprobs, _ = teacher_forced_logprobs(session.model, batch, roll.tokens, g, cfg.rl.micro_batch)
        last = grpo_loss(logprobs, old, adv, mask, epsilon=gc.epsilon, epsilon_high=gc.high, ratio=gc.ratio,
                         loss=gc.loss, max_len=cfg.decode.max_len, ref_logprobs=ref, beta=cfg.rl.kl_coef,
                         kl_ratio=gc.kl_ratio)
        optimizer_step(session, last.loss * share)
        first = last if first is None else first
    # "loss": the first update's; "clipped": the share of the words the last update's clipping held back
    stats = {"loss": first.loss.detach(), "reward": rewards.mean(), "advantage_std": adv.std(),
             "clipped": last.clipped, "entropy": entropy_bonus(roll.entropy.detach(), roll.mask),
             "length": caption_lengths(roll.tokens).mean(), "sample_s": roll.seconds, "reward_s": reward_s,
             "backward_s": time.perf_counter() - t0, **part_means(parts)}
    return stats if first.kl is None else {**stats, "kl": first.kl}


def train_grpo(cfg: GrpoRunConfig) -> TrainResult:
    gc = cfg.grpo
    for note in gc.notes():
        log.warning(note)
    scaled = (f"scaled by {gc.scale}" if gc.aggregation == "sum_then_normalize" else
              "of each reward normalised in its group, summed, normalised over the batch (GDPO)")
    settings = (f"GRPO: advantages {scaled}, loss {gc.loss}, ratio per {gc.ratio}, clipped to "
                f"[1 - {gc.epsilon}, 1 + {gc.high}], {gc.iterations} update(s) per batch, KL weight {cfg.rl.kl_coef}"
                + (" (k3 times the ratio)" if gc.kl_ratio and cfg.rl.kl_coef > 0 else "")
                + (", truncated captions masked" if gc.mask_truncated else ""))
    with sequence_session(cfg, "the group's mean reward (GRPO)", settings) as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(session, grpo_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("grpo", train_grpo, GrpoRunConfig,
                "GRPO: group advantages and a clipped ratio [Shao24], with Dr. GRPO, DAPO and GSPO's variants"))
