"""PG-SPIDEr: policy gradient with Monte-Carlo rollouts and a learned baseline
(Liu et al. 2017, [Liu17]), from an XE checkpoint.

Each step samples M = ``rl.n_samples`` captions per image ([Liu17]: M = 1, as the recipes set it). For every
word g_t of a caption, K rollouts complete the prefix g_1:t and ``Q(g_1:t-1, g_t)`` is the mean of their K
rewards; at the caption's last word Q is the caption's own reward. The MLP ``B_phi`` reads the decoder's
hidden state (detached) and is trained to predict Q (``L_phi``); the policy's per-word advantage is ``Q - B``.
The reward is the run's ``reward.weights``: ``spider`` (PG-SPIDEr), ``cider_d``, ``bcmr`` (PG-BCMR), ...
Choices where [Liu17] is silent: docs/RL.md, "PG-SPIDEr and MIXER ([Liu17])".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.data.vocab import Vocab
from rlcap.decoding import DecodeResult
from rlcap.decoding.options import decode, rollouts
from rlcap.models import Feats
from rlcap.rewards import Reward, RewardBatch
from rlcap.rl.credit import baseline_loss, mc_q_estimates, value_advantages
from rlcap.rl.losses import entropy_bonus, masked_mean, reinforce_loss
from rlcap.train.logger import Stats
from rlcap.run_config import SequenceRunConfig, algorithm_field, check_lr, check_min
from rlcap.methods.learned_baseline import BASELINE, baseline_run
from rlcap.methods.reference import Scored, add_kl
from rlcap.methods.samples import caption_lengths
from rlcap.decoding.result import decode_captions
from rlcap.distributed import word_share
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches
from rlcap.rewards.unique import UniqueScores, score_unique


@dataclass
class PgConfig:
    """PG-SPIDEr ([Liu17]): Monte-Carlo Q per word and a learned baseline MLP."""

    rollouts: int = help_field(3, "K: Monte-Carlo rollouts completing every prefix g_1:t ([Liu17]'s Q estimate)")
    baseline_lr: float = help_field(1e-3, "learning rate of the baseline MLP B_phi (its own Adam, part 'baseline')")
    baseline_hidden: int = help_field(256, "hidden units of the baseline MLP B_phi")

    def validate(self) -> None:
        check_min("pg.rollouts", self.rollouts, 1)
        check_min("pg.baseline_hidden", self.baseline_hidden, 1)
        check_lr("pg.baseline_lr", self.baseline_lr)


@dataclass
class PgRunConfig(SequenceRunConfig):
    """``algorithm: pg``: PG-SPIDEr: Monte-Carlo rollouts and a learned baseline [Liu17]."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("pg")
    pg: PgConfig = help_field(PgConfig, "PG-SPIDEr: Monte-Carlo rollouts and a learned baseline [Liu17]")


class RolloutRewards(NamedTuple):
    rollout: torch.Tensor  # (R, T, K) reward of rollout k of prefix g_1:t+1; 0 where Q does not need it
    final: torch.Tensor  # (R,) reward of each sampled caption
    scores: UniqueScores


def needed_rollouts(mask: torch.Tensor) -> torch.Tensor:
    """(R, T) bool: the steps whose Q comes from rollouts: valid and not the caption's last step
    (there the caption is complete and Q is its own reward). mask (R, T), valid steps then padding."""
    after = torch.zeros_like(mask[:, :1])
    return mask & torch.cat([mask[:, 1:], after], dim=1)


def rollout_rewards(reward: Reward, vocab: Vocab, sampled: DecodeResult, rolls: DecodeResult, k: int,
                    context: RewardBatch) -> RolloutRewards:
    """Score the rollouts Q needs and the sampled captions, each unique (caption, image) pair once.

    sampled: R captions (R, T); rolls: their ``prefix_rollouts``, R*T*K rows ordered (r, t, k);
    context: the RewardBatch of the R sampled captions (one image id, refs and feature row each)."""
    r, t = sampled.tokens.shape
    need = needed_rollouts(sampled.mask)  # (R, T)
    rows = need[:, :, None].expand(r, t, k).reshape(-1).nonzero().squeeze(1)  # (N,) rollout rows to score
    owner = rows // (t * k)  # (N,) the sampled caption each belongs to
    captions = decode_captions(vocab, rolls.tokens[rows], sampled.tokens)  # one transfer for both
    every = torch.cat([owner, torch.arange(r, device=owner.device)])  # (N + R,) sampled caption of every scored string
    feats_row = context.feats_index if context.feats_index is not None else torch.arange(r, device=owner.device)
    batch = RewardBatch([context.image_ids[i] for i in every.tolist()], [context.refs[i] for i in every.tolist()],
                        context.feats, feats_row[every] if context.feats is not None else None)
    scores = score_unique(reward, captions, batch)
    rewards = scores.rewards.to(rows.device)
    rollout = torch.zeros(r * t * k, device=rows.device).index_put((rows,), rewards[: rows.numel()]).view(r, t, k)
    return RolloutRewards(rollout, rewards[rows.numel():], scores)


def sample_context(batch: Batch, m: int) -> tuple[Feats, RewardBatch]:
    """Features (one row per sampled caption, for the rollouts) and the reward context of M captions per image."""
    image_row = torch.arange(len(batch.ids), device=batch.feats.fc.device).repeat_interleave(m)  # (B*M,)
    feats = batch.feats if m == 1 else batch.feats.select(image_row)
    context = RewardBatch([i for i in batch.ids for _ in range(m)], [refs for refs in batch.refs for _ in range(m)],
                          batch.feats, image_row)
    return feats, context


def pg_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    pg, m = session.cfg.pg, session.cfg.rl.n_samples
    # 1. sample M captions per image g_1:T ~ pi_theta, with the hidden state each word is chosen from
    t0 = time.perf_counter()
    out = decode(session.model, batch.feats, session.decoding.as_sampling(), m, return_hidden=True,
                 micro_batch=session.cfg.rl.micro_batch)  # (R, T), R = B*M; hidden (R, T, H)
    sample_s = time.perf_counter() - t0
    # 2. K rollouts g^k_t+1:T completing every prefix g_1:t: one batched decode, no autograd
    t0 = time.perf_counter()
    feats, context = sample_context(batch, m)
    with torch.no_grad():
        rolls = rollouts(session.model, feats, out.tokens, pg.rollouts, session.decoding)  # R*T*K rows, (r, t, k)
    rollout_s = time.perf_counter() - t0
    # 3. rewards, each unique (caption, image) once; Q(g_1:t-1, g_t) = mean of the K rollouts' rewards,
    #    the caption's own reward at its last word ([Liu17], the Monte-Carlo estimate of Q)
    scored = rollout_rewards(reward, session.data.vocab, out, rolls, pg.rollouts, context)
    q = mc_q_estimates(scored.rollout, scored.final, out.mask)  # (R, T)
    # 4. the baseline B_phi(s_t) on the detached hidden state; per-word advantages Q - B_phi
    base = session.module(BASELINE)(out.hidden.detach())  # (R, T)
    adv = value_advantages(q, base, out.mask)  # (R, T), detached
    # 5. the policy's step (the gradient of V(s_0) with Q - B) and the baseline's step (L_phi)
    t0 = time.perf_counter()
    loss = reinforce_loss(out.logprobs, out.mask, adv)
    # plus beta times the KL to the reference policy (rl.kl_coef; [Shao24 eq. 4]'s k3)
    loss, kl = add_kl(session, loss, batch, Scored(out.tokens, out.logprobs, out.mask, m))
    optimizer_step(session, loss * word_share(out.mask, session.ranks))
    b_loss = baseline_loss(base, q, out.mask)
    optimizer_step(session, b_loss * word_share(out.mask, session.ranks), part=BASELINE)
    backward_s = time.perf_counter() - t0
    valid = out.mask
    # means over the sampled words; "scored": unique (caption, image) pairs scored per rollout row
    return {"loss": loss.detach(), "reward": scored.final.mean(), "q": masked_mean(q, valid),
            "baseline": masked_mean(base.detach(), valid), "advantage": masked_mean(adv, valid),
            "baseline_loss": b_loss.detach(), "entropy": entropy_bonus(out.entropy.detach(), valid),
            "length": caption_lengths(out.tokens).mean(),
            "scored": scored.scores.unique / max(1, len(scored.scores.rewards)), "sample_s": sample_s,
            "rollout_s": rollout_s, "reward_s": scored.scores.seconds, "backward_s": backward_s, **kl}


def train_pg(cfg: PgRunConfig) -> TrainResult:
    pg = cfg.pg
    settings = f"PG-SPIDEr ([Liu17]): {pg.rollouts} rollouts per word, baseline MLP of {pg.baseline_hidden} units"
    with baseline_run(cfg, pg.baseline_lr, pg.baseline_hidden, cfg.rl.n_samples, settings) as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(session, pg_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("pg", train_pg, PgRunConfig, "PG-SPIDEr: Monte-Carlo rollouts and a learned baseline [Liu17]"))
