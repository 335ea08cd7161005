"""SLL-ME: SCST with maximum-entropy regularisation, the word-level exploration that
[Chen20] compares its sequence-level term against (sec. 4.1, 5.2; weight 0.01).

The loss is SCST's REINFORCE loss minus ``sll_me.entropy_weight`` times the mean per-word
entropy of the policy (Mnih et al. 2016), differentiated through the entropy. It takes SCST's
baselines (``sll_me.baseline``). This file is the worked example of docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.errors import ConfigError
from rlcap.methods.scst import ScstConfig, scst_baseline
from rlcap.rewards import Reward
from rlcap.rl.baselines import advantages
from rlcap.rl.losses import entropy_bonus, reinforce_loss
from rlcap.run_config import SequenceRunConfig, algorithm_field
from rlcap.methods.reference import Scored, add_kl
from rlcap.methods.samples import caption_lengths, rollout
from rlcap.rewards.combine import Parts, part_means, score
from rlcap.methods.sequence import needs_text, sequence_session
from rlcap.distributed import word_share
from rlcap.train.logger import Stats
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches


@dataclass
class SllMeConfig(ScstConfig):
    """SLL-ME ([Chen20 sec. 5.2]): SCST plus a per-word entropy bonus."""

    entropy_weight: float = help_field(0.01, "weight of the per-step entropy bonus (the paper's 0.01)")

    def validate(self) -> None:
        super().validate()
        if self.entropy_weight < 0:
            raise ConfigError(f"sll_me.entropy_weight: expected >= 0, got {self.entropy_weight}")


@dataclass
class SllMeRunConfig(SequenceRunConfig):
    """``algorithm: sll_me``: SLL-ME: SCST plus a per-word entropy bonus [Chen20 sec. 5.2]."""

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("sll_me")
    sll_me: SllMeConfig = help_field(SllMeConfig, "SLL-ME: SCST plus a per-word entropy bonus [Chen20 sec. 5.2]")


def sll_me_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg, me = session.cfg, session.cfg.sll_me
    # 1. sample n captions per image; their log-probabilities and per-step entropies carry gradient
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding, text=needs_text(reward))
    # 2. score the samples, and 3. subtract SCST's baseline
    t0 = time.perf_counter()
    parts: Parts = {}  # each reward's own scores, logged as reward/<name>
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens, parts)  # (B*n,)
    baseline = scst_baseline(session, me, batch, rewards, reward)          # (B*n,)
    adv = advantages(rewards, baseline)                                    # (B*n,)
    reward_s = time.perf_counter() - t0
    # 4. REINFORCE minus the entropy bonus H(p(w_t | w_<t, x)) averaged over the words, then a step
    t0 = time.perf_counter()
    ent = entropy_bonus(roll.entropy, roll.mask)
    loss = reinforce_loss(roll.logprobs, roll.mask, adv) - me.entropy_weight * ent
    # plus beta times the KL to the reference policy (rl.kl_coef; [Shao24 eq. 4]'s k3)
    loss, kl = add_kl(session, loss, batch, Scored(roll.tokens, roll.logprobs, roll.mask, cfg.rl.n_samples))
    optimizer_step(session, loss * word_share(roll.mask, session.ranks))
    return {"loss": loss.detach(), "reward": rewards.mean(), "baseline": baseline.mean(), "advantage": adv.mean(),
            "entropy": ent.detach(), "length": caption_lengths(roll.tokens).mean(), "sample_s": roll.seconds,
            "reward_s": reward_s, "backward_s": time.perf_counter() - t0, **kl, **part_means(parts)}


def train_sll_me(cfg: SllMeRunConfig) -> TrainResult:
    settings = f"entropy weight {cfg.sll_me.entropy_weight}"
    with sequence_session(cfg, cfg.sll_me.baseline, settings) as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(session, sll_me_step(session, batch, reward)):
                break
    return finish_run(session)


register(Method("sll_me", train_sll_me, SllMeRunConfig, "SLL-ME: SCST plus a per-word entropy bonus [Chen20 sec. 5.2]"))
