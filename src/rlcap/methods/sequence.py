"""What the sequence-level (RL) loops share: their session and reward, the greedy rewards of the self-critical
baseline, and a pretraining phase run before a loop's main one."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Iterator

import torch

from rlcap.data.loader import Batch
from rlcap.rewards import Reward, RewardBatch, WeightedReward, build_reward
from rlcap.run_config import RunConfig
from rlcap.decoding.result import decode_captions
from rlcap.methods.reference import add_reference
from rlcap.methods.samples import greedy_tokens
from rlcap.rewards.combine import score
from rlcap.train.logger import Stats
from rlcap.train.session import Session, feature_dims, finish_step, open_session, resume_or_start, train_batches


def train_reward(session: Session) -> WeightedReward:
    """The run's weighted reward, given the training references, vocabulary and feature sizes;
    use it as a context manager so that it is closed when the run ends."""
    train = session.data.splits["train"]
    dims = feature_dims(session.data)
    return build_reward(session.cfg.reward, dict(zip(train.ids, train.refs)), vocab=session.data.vocab,
                        fc_dim=dims["fc"], att_dim=dims["att"], device=str(session.device),
                        precision=session.cfg.precision)


def conventions(cfg: RunConfig, n_train_images: int, baseline: str) -> str:
    """One line stating what must match for scores to be comparable across papers."""
    return (f"conventions: EOS counts as a token in the reward: {cfg.reward.eos_counts}; "
            f"baseline: {baseline}; samples per image: {cfg.rl.n_samples} ({cfg.rl.sample_method}, "
            f"temperature {cfg.decode.temperature}); rewards: {cfg.reward.weights}; CIDEr-D document frequencies: "
            f"the training references ({n_train_images} images)")


@contextmanager
def sequence_session(cfg: RunConfig, baseline: str,
                     settings: str = "") -> Iterator[tuple[Session, WeightedReward]]:
    """The set-up of a sequence-level loop whose only part is the policy: the session (resumed when
    asked), the run's reward (closed on exit), the conventions line in the log, and the policy in
    the mode it samples in (``rl.rollout_dropout``); with ``rl.kl_coef > 0``, the KL term's reference policy."""
    session = open_session(cfg, splits=("train", cfg.val.split))
    add_reference(session)
    resume_or_start(session)
    with train_reward(session) as reward:
        stated = conventions(cfg, len(session.data.splits["train"]), baseline)
        session.logger.note(stated + (f"; {settings}" if settings else ""), samples_per_image=cfg.rl.n_samples,
                            learns_from=cfg.reward.weights)
        session.model.train(cfg.rl.rollout_dropout)
        yield session, reward


def needs_text(reward: Reward) -> bool:
    """Whether scoring needs the captions' words (a reward on the device scores the tokens themselves)."""
    return not isinstance(reward, WeightedReward) or reward.needs_text()


def greedy_rewards(session: Session, batch: Batch, reward: Reward) -> torch.Tensor:
    """Reward of each image's greedy caption (the self-critical baseline of Rennie et al. 2017): (B,).
    Its words are decoded only for a reward that reads them (:meth:`WeightedReward.needs_text`)."""
    tokens = greedy_tokens(session.model, batch, session.decoding)
    captions = decode_captions(session.data.vocab, tokens) if needs_text(reward) else None
    return score(reward, captions, RewardBatch(batch.ids, batch.refs, batch.feats), tokens)


def pretrain_phase(session: Session, key: str, epochs: int, seq_per_img: int,
                   step: Callable[[Batch], Stats]) -> bool:
    """A phase before a loop's main one ([Shi18]'s value pretraining, [Chaffin24]'s discriminator pretraining):
    ``epochs`` passes of ``step(batch)`` (which returns the step's statistics, a dict) over the
    training batches, counted in ``session.state[key]`` (:func:`train_batches`' ``phase``). True when
    ``max_steps`` stopped the run."""
    for batch in train_batches(session, epochs, session.cfg.rl.batch_size, seq_per_img, phase=key):
        if finish_step(session, step(batch)):
            return True
    return False
