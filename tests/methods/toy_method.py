"""A method written outside src/, as docs/ARCHITECTURE.md's worked example: REINFORCE with a constant baseline
(Williams 1992), its own section and run config class, a step and a loop on the shared helpers. Its recipe is
tests/methods/data/toy.yaml. The test registers it (``register(TOY)``) where it wants it; a child process runs
``python -m tests.methods.toy_method train RECIPE ...``, rlcap's command with the toy method registered
(tests/methods/test_method_registry.py)."""

from __future__ import annotations

import sys

# --- the method: docs/ARCHITECTURE.md shows it from here ---
from dataclasses import dataclass


from rlcap.config import help_field
from rlcap.data.loader import Batch
from rlcap.errors import ConfigError
from rlcap.methods.registry import Method, register
from rlcap.methods.samples import rollout
from rlcap.methods.sequence import sequence_session
from rlcap.rewards import Reward
from rlcap.rewards.combine import score
from rlcap.rl.losses import reinforce_loss
from rlcap.run_config import SequenceRunConfig, algorithm_field
from rlcap.train.logger import Stats
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import Session, TrainResult, finish_run, finish_step, train_batches


@dataclass
class ToyConfig:
    """The method's own section, ``toy:``."""

    baseline: float = help_field(1.0, "the constant subtracted from every reward")

    def validate(self) -> None:
        if self.baseline < 0:
            raise ConfigError(f"toy.baseline: expected >= 0, got {self.baseline}")


@dataclass
class ToyRunConfig(SequenceRunConfig):
    """``algorithm: toy``: the shared sections, ``rl`` and ``reward`` (a sequence-level method), and ``toy:``."""

    algorithm: str = algorithm_field("toy")
    toy: ToyConfig = help_field(ToyConfig, "REINFORCE with a constant baseline")


def toy_step(session: Session, batch: Batch, reward: Reward) -> Stats:
    cfg = session.cfg
    roll = rollout(session.model, batch, session.data.vocab, cfg.rl, session.decoding)  # 1. sample n per image
    rewards = score(reward, roll.captions, roll.reward_batch, roll.tokens)           # 2. score      (B*n,)
    advantages = rewards - cfg.toy.baseline                                          # 3. baseline   (B*n,)
    loss = reinforce_loss(roll.logprobs, roll.mask, advantages)                      # 4. loss, step
    optimizer_step(session, loss)
    return {"loss": loss.detach(), "reward": rewards.mean()}  # 0-d tensors: read at log lines only


def train_toy(cfg: ToyRunConfig) -> TrainResult:
    with sequence_session(cfg, f"constant {cfg.toy.baseline}") as (session, reward):
        for batch in train_batches(session, cfg.rl.epochs, cfg.rl.batch_size):
            if finish_step(session, toy_step(session, batch, reward)):
                break
    return finish_run(session)


TOY = Method("toy", train_toy, ToyRunConfig, "REINFORCE with a constant baseline")
# --- to here; a method of rlcap's own ends with `register(Method(...))`, run when rlcap.methods imports it ---


def use_toy() -> None:
    """Register the toy method in this process (a test's own method: registered only where a test wants it)."""
    register(TOY)


if __name__ == "__main__":  # python -m tests.methods.toy_method train RECIPE key=value ...: rlcap with the toy method
    from rlcap.cli import main

    use_toy()
    sys.exit(main(sys.argv[1:]))
