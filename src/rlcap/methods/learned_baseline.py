"""The set-up of a sequence-level loop with a learned baseline: parts ``policy`` and ``baseline``.

PG-SPIDEr ([Liu17]) and MIXER (Ranzato et al. 2016) both regress the expected
reward from the decoder's hidden state with a small network that has its own optimizer. The
baseline reads ``hidden.detach()``: its loss never reaches the captioner ([Liu17]: "to avoid a feedback
loop").
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator

from rlcap.errors import ConfigError
from rlcap.models import hidden_size
from rlcap.models.baseline_mlp import BaselineMLP
from rlcap.rewards import WeightedReward
from rlcap.run_config import RunConfig
from rlcap.methods.reference import add_reference
from rlcap.methods.sequence import conventions, train_reward
from rlcap.train.session import Session, add_part, open_session, resume_or_start

BASELINE = "baseline"


@contextmanager
def baseline_run(cfg: RunConfig, lr: float, width: int, samples: int,
                 settings: str) -> Iterator[tuple[Session, WeightedReward]]:
    """Session with the policy and a :class:`BaselineMLP` of ``width`` units trained at ``lr``
    (the run's optimizer settings otherwise), resumed when asked; the reward (closed on exit); the
    conventions line with ``samples`` captions per image (PG-SPIDEr's ``rl.n_samples``, MIXER's
    ``mixer.references``), recorded as the run's samples per image; the policy in its sampling mode."""
    if cfg.rl.sample_method != "sample":
        raise ConfigError(f"{cfg.algorithm} samples its captions: rl.sample_method must be 'sample', "
                          f"got {cfg.rl.sample_method!r}")
    session = open_session(cfg, splits=("train", cfg.val.split))
    # hidden(state)'s width: hidden_dim for rlcap's captioners (the model section is the checkpoint's), the text
    # decoder's for a transformers one
    state_width = hidden_size(session.model.module, session.cfg.model)
    add_part(session, BASELINE, BaselineMLP(state_width, width), replace(cfg.optim, lr=lr))
    add_reference(session)  # rl.kl_coef > 0: the KL term's reference policy
    resume_or_start(session)
    with train_reward(session) as reward:
        stated = replace(cfg, rl=replace(cfg.rl, n_samples=samples))
        conventions_line = conventions(stated, len(session.data.splits["train"]), "learned (MLP on the hidden state)")
        session.logger.note(f"{conventions_line}; {settings}", samples_per_image=samples,
                            learns_from=cfg.reward.weights)
        session.model.train(cfg.rl.rollout_dropout)
        yield session, reward
