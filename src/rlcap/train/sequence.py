"""What the sequence-level (RL) loops share: their reward, the SCST baselines, step statistics, and a
pretraining phase run before a loop's main one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple

import torch
from tqdm.auto import tqdm

from rlcap.data.loader import Batch
from rlcap.rewards import Reward, RewardBatch, WeightedReward, build_reward
from rlcap.train.run_config import RunConfig
from rlcap.train.rollout import greedy_captions, score
from rlcap.train.distributed import shard_rows
from rlcap.train.session import Session, feature_dims, finish_step, start_session

log = logging.getLogger(__name__)


class StepStats(NamedTuple):
    loss: float
    reward: float
    baseline: float
    advantage: float
    entropy: float
    length: float
    sample_s: float
    reward_s: float
    backward_s: float


def train_reward(session: Session) -> WeightedReward:
    """The run's weighted reward, given the training references, vocabulary and feature sizes;
    use it as a context manager so that it is closed when the run ends."""
    train = session.data.splits["train"]
    dims = feature_dims(session.data)
    return build_reward(session.cfg.reward, dict(zip(train.ids, train.refs)), vocab=session.data.vocab,
                        fc_dim=dims["fc"], att_dim=dims["att"], device=str(session.device))


def conventions(cfg: RunConfig, n_train_images: int, baseline: str) -> str:
    """One line stating what must match for scores to be comparable across papers."""
    return (f"conventions: EOS counts as a token in the reward: {cfg.reward.eos_counts}; "
            f"baseline: {baseline}; samples per image: {cfg.rl.n_samples} ({cfg.rl.sample_method}, "
            f"temperature {cfg.decode.temperature}); rewards: {cfg.reward.weights}; CIDEr-D document frequencies: "
            f"the training references ({n_train_images} images)")


@contextmanager
def rl_run(cfg: RunConfig, baseline: str, settings: str = "") -> Iterator[tuple[Session, WeightedReward]]:
    """The set-up of a sequence-level loop whose only part is the policy: the session (resumed when
    asked), the run's reward (closed on exit), the conventions line in the log, and the policy in
    the mode it samples in (``rl.rollout_dropout``)."""
    s = start_session(cfg, splits=("train", cfg.val.split))
    with train_reward(s) as reward:
        s.logger.note(conventions(cfg, len(s.data.splits["train"]), baseline) + (f"; {settings}" if settings else ""))
        s.model.train(cfg.rl.rollout_dropout)
        yield s, reward


def greedy_rewards(session: Session, batch: Batch, reward: Reward) -> torch.Tensor:
    """Reward of each image's greedy caption (the self-critical baseline of Rennie et al. 2017): (B,)."""
    captions = greedy_captions(session.model, batch, session.data.vocab, session.cfg.decode.max_len)
    return score(reward, captions, RewardBatch(batch.ids, batch.refs, batch.feats))


def pretrain_phase(s: Session, key: str, epochs: int, seq_per_img: int, step: Callable[[Batch], Any],
                   what: str) -> bool:
    """A phase before a loop's main one ([Shi18]'s value pretraining, [Chaffin24]'s discriminator pretraining):
    ``epochs`` passes of ``step(batch)`` (which returns a NamedTuple of step statistics) over the
    training batches. Its epochs are counted in ``session.state[key]``, not in the run's progress (the
    run's epochs, validation and decay are the main phase's), so that a killed run resumes inside
    it. True when ``max_steps`` stopped the run."""
    cfg = s.cfg
    phase = s.state.setdefault(key, {"epoch": 0, "step_in_epoch": 0})
    train = s.data.splits["train"]
    steps = (len(train) + cfg.rl.batch_size - 1) // cfg.rl.batch_size
    while phase["epoch"] < epochs:
        batches = train.batches(cfg.rl.batch_size, seq_per_img, cfg.seed, phase["epoch"], phase["step_in_epoch"])
        for batch in tqdm(batches, total=steps, initial=phase["step_in_epoch"], leave=False, disable=None,
                          desc=f"{what} epoch {phase['epoch'] + 1}"):
            # under torchrun each rank takes its share of the batch, as train_batches does (one process: all of it)
            stats = step(batch.shard(shard_rows(len(batch.ids), s.ranks)).to(s.device))
            phase["step_in_epoch"] += 1  # before finish_step, which may checkpoint
            if finish_step(s, stats._asdict()):
                return True
        phase["epoch"] += 1
        phase["step_in_epoch"] = 0
        s.progress.step_in_epoch = 0  # finish_step counted the phase's steps there; the main phase starts at 0
        log.info("%s: epoch %d of %d done", what, phase["epoch"], epochs)
    return False
