"""A method registered from outside src/: REINFORCE with a constant baseline (Williams 1992) and a config
section of its own, on the shared helpers. ``register()`` adds it as ``algorithm=toy``; a child process
imports this module and calls it before ``rlcap train`` (tests/methods/test_method_registry.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from rlcap.config import help_field
from rlcap.errors import ConfigError
from rlcap.rl.losses import reinforce_loss
from rlcap.methods.registry import METHODS, Method
from rlcap.run_config import SequenceRunConfig, algorithm_field
from rlcap.methods.samples import rollout
from rlcap.rewards.combine import score
from rlcap.methods.sequence import train_reward
from rlcap.train.optimizer import optimizer_step
from rlcap.train.session import finish_run, finish_step, start_session, train_batches


@dataclass
class ToyConfig:
    baseline: float = help_field(1.0, "the constant subtracted from every reward")

    def validate(self) -> None:
        if self.baseline < 0:
            raise ConfigError(f"toy.baseline: expected >= 0, got {self.baseline}")


@dataclass
class ToyRunConfig(SequenceRunConfig):
    """``algorithm: toy``: the shared sections, ``rl`` and ``reward``, and the method's own ``toy:``."""

    algorithm: str = algorithm_field("toy")
    toy: ToyConfig = help_field(ToyConfig, "REINFORCE with a constant baseline (a test's own method)")


def train_toy(cfg: ToyRunConfig):
    s = start_session(cfg, ("train", cfg.val.split))
    with train_reward(s) as reward:
        for batch in train_batches(s, cfg.rl.epochs, cfg.rl.batch_size):
            roll = rollout(s.model, batch, s.data.vocab, cfg.rl, cfg.decode)         # 1. sample
            rewards = score(reward, roll.captions, roll.reward_batch)                 # 2. score
            loss = reinforce_loss(roll.logprobs, roll.mask, rewards - cfg.toy.baseline)  # 3. baseline, 4. loss
            optimizer_step(s, loss)
            if finish_step(s, {"loss": loss.item(), "reward": float(rewards.mean())}):
                break
    return finish_run(s)


TOY = Method("toy", train_toy, ToyRunConfig, "REINFORCE with a constant baseline (a test's own method)")


def register() -> None:
    """``register(TOY)`` is what a method's file does when it is imported; the tests add and remove it."""
    METHODS["toy"] = TOY


if __name__ == "__main__":  # python -m tests.methods.toy_method train RECIPE key=value ...: rlcap with the toy method
    from rlcap.cli import main

    register()
    sys.exit(main(sys.argv[1:]))
