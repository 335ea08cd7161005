"""MIXER (Ranzato et al. 2016, as [Liu17] describes it), from an
XE checkpoint: cross-entropy on the first M words of a reference, REINFORCE on the words the
policy samples after them, M annealed towards 0 (``mixer.start``, ``mixer.delta`` every
``mixer.epochs_per_stage`` epochs; rl/mixer.py).

Each step draws ``mixer.references`` references per image (as XE draws captions) and continues each with one
sampled completion: the run's samples per image (``rl.n_samples`` is not read). The REINFORCE baseline is
Ranzato's regressor of the reward on the hidden state, here the baseline MLP of PG-SPIDEr (part ``baseline``)
on the detached hidden state. Choices where the papers are silent: docs/RL.md, "PG-SPIDEr and MIXER
([Liu17])".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from rlcap.config import help_field
from rlcap.methods.registry import Method, register
from rlcap.data.loader import Batch
from rlcap.data.vocab import PAD
from rlcap.decoding.options import decode
from rlcap.rewards import Reward
from rlcap.rl.credit import value_advantages, value_loss
from rlcap.rl.losses import masked_mean, reinforce_loss, xe_loss
from rlcap.rl.mixer import mixer_masks, mixer_prefix_len
from rlcap.train.logger import Stats
from rlcap.distributed import word_share
from rlcap.run_config import SequenceRunConfig, algorithm_field, check_lr, check_min
from rlcap.methods.learned_baseline import BASELINE, baseline_run
from rlcap.methods.reference import Scored, add_kl
from rlcap.methods.samples import caption_lengths
from rlcap.decoding.result import decode_captions
from rlcap.rewards.batch import reward_batch
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches
from rlcap.rewards.unique import score_unique


@dataclass
class MixerConfig:
    """MIXER (Ranzato et al. 2016, as [Liu17] describes it): XE on the first M words
    of the reference, REINFORCE on the words sampled after them; M annealed to 0."""

    start: int = help_field(16, "M in the first epoch (Ranzato: the longest caption, i.e. pure XE)")
    delta: int = help_field(2, "Delta: M decreases by this every epochs_per_stage epochs, down to 0")
    epochs_per_stage: int = help_field(2, "epochs trained at each M")
    references: int = help_field(5, "references drawn per image each step, each continued by one sampled "
                                    "completion after its first M words (the run's samples per image)")
    baseline_lr: float = help_field(1e-3, "learning rate of the baseline MLP on the hidden state (part 'baseline')")
    baseline_hidden: int = help_field(256, "hidden units of the baseline MLP")

    def validate(self) -> None:
        check_min("mixer.start", self.start, 0)
        check_min("mixer.delta", self.delta, 1)
        check_min("mixer.epochs_per_stage", self.epochs_per_stage, 1)
        check_min("mixer.references", self.references, 1)
        check_min("mixer.baseline_hidden", self.baseline_hidden, 1)
        check_lr("mixer.baseline_lr", self.baseline_lr)


@dataclass
class MixerRunConfig(SequenceRunConfig):
    """``algorithm: mixer``: MIXER: XE on a prefix annealed to 0, REINFORCE after it [Ranzato16, as Liu17]."""

    READS_CAPTIONS: ClassVar[bool] = True  # its XE prefix is the references'
    CAPTIONS_PER_IMAGE: ClassVar[bool] = False  # one reference per sampled row
    UNREAD: ClassVar[tuple[str, ...]] = ("rl.n_samples",)  # it samples one completion per reference: mixer.references

    KL_TERM: ClassVar[bool] = True  # its loss adds the KL term (rl.kl_coef)

    algorithm: str = algorithm_field("mixer")
    mixer: MixerConfig = help_field(MixerConfig,
                                    "MIXER: XE on a prefix annealed to 0, REINFORCE after it [Ranzato16, as Liu17]")


def mixer_step(session: Session, batch: Batch, reward: Reward, m: int) -> Stats:
    cfg, n = session.cfg, session.cfg.mixer.references
    targets = batch.tokens[:, 1:]  # (B*n, L) w_1 .. w_k EOS PAD.., the references
    # 1. continue each reference after its first M words by sampling (the words from M on are the policy's)
    t0 = time.perf_counter()
    prefix = targets[:, : min(m, cfg.decode.max_len)]  # (B*n, <= M)
    out = decode(session.model, batch.feats, session.decoding.as_sampling(), n, prefix=prefix,
                 return_hidden=True, micro_batch=cfg.rl.micro_batch)  # (B*n, T); forced words have logprob 0
    xe_mask, rl_mask = mixer_masks(targets != PAD, out.mask, m)  # (B*n, min(M, L)), (B*n, T)
    sample_s = time.perf_counter() - t0
    # 2. rewards of the whole captions (reference prefix + sample), each unique (caption, image) once
    captions = decode_captions(session.data.vocab, out.tokens)
    scored = score_unique(reward, captions, reward_batch(batch, n))
    rewards = scored.rewards  # (B*n,)
    # 3. the baseline (Ranzato: a regressor of the reward on the hidden state), advantages r - b_t
    base = session.module(BASELINE)(out.hidden.detach())  # (B*n, T)
    adv = value_advantages(rewards, base, out.mask)  # (B*n, T), detached
    # 4. XE on the first M reference words (teacher forcing) and REINFORCE on the rest, every word
    #    weighted alike (Ranzato's per-sequence sum over t), then a step of each part
    t0 = time.perf_counter()
    n_xe, n_rl = float(xe_mask.sum()), float(rl_mask.sum())
    xe = torch.zeros((), device=out.logprobs.device)
    if n_xe > 0:
        logits = session.model(batch.feats, batch.tokens[:, : xe_mask.size(1)], seq_per_img=n)  # (B*n, min(M, L), V)
        xe = xe_loss(logits, targets[:, : xe_mask.size(1)], xe_mask)
    rl = reinforce_loss(out.logprobs, rl_mask, adv)
    loss = (n_xe * xe + n_rl * rl) / max(n_xe + n_rl, 1.0)
    # plus beta times the KL to the reference policy over the sampled words (rl.kl_coef; [Shao24 eq. 4]'s k3)
    loss, kl = add_kl(session, loss, batch, Scored(out.tokens, out.logprobs, rl_mask, n))
    # under torchrun: each rank's per-word mean weighed by its share of both parts' words (one process: 1)
    optimizer_step(session, loss * word_share(torch.cat([xe_mask.flatten(), rl_mask.flatten()]), session.ranks))
    b_loss = value_loss(base, rewards, out.mask)  # every valid step's state regresses the caption's reward
    optimizer_step(session, b_loss * word_share(out.mask, session.ranks), part=BASELINE)
    backward_s = time.perf_counter() - t0
    # "loss": the XE and REINFORCE terms, one per word; "prefix_len": M; "rl_words": the share of the words
    # trained by REINFORCE; "advantage": the mean over the REINFORCE words
    return {"loss": loss.detach(), "xe_loss": xe.detach(), "rl_loss": rl.detach(), "prefix_len": float(m),
            "rl_words": n_rl / max(n_xe + n_rl, 1.0), "reward": rewards.mean(),
            "baseline": masked_mean(base.detach(), out.mask), "advantage": masked_mean(adv, rl_mask),
            "baseline_loss": b_loss.detach(), "length": caption_lengths(out.tokens).mean(), "sample_s": sample_s,
            "reward_s": scored.seconds, "backward_s": backward_s, **kl}


def train_mixer(cfg: MixerRunConfig) -> TrainResult:
    mx = cfg.mixer
    settings = (f"MIXER: XE on the first M reference words, M = {mx.start} minus {mx.delta} every "
                f"{mx.epochs_per_stage} epochs, down to 0; baseline MLP of {mx.baseline_hidden} units")
    with baseline_run(cfg, mx.baseline_lr, mx.baseline_hidden, mx.references, settings) as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size, seq_per_img=mx.references):
            m = mixer_prefix_len(session.progress.epoch, mx.start, mx.delta, mx.epochs_per_stage)
            if finish_step(session, mixer_step(session, batch, reward, m)):
                break
    return finish_run(session)


register(Method("mixer", train_mixer, MixerRunConfig,
                "MIXER: XE on a prefix annealed to 0, REINFORCE after it [Ranzato16, as Liu17]"))
