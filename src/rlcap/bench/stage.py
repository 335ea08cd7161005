"""The parts a benchmark row is made of: :class:`Stage` (one training run) and :class:`BenchRow` (a row of the
table, its stages in order), and :data:`XE`, the cross-entropy stage nearly every row starts from. The rows
themselves are in :mod:`rlcap.bench.registry` and :mod:`rlcap.bench.qa_rows`."""

from __future__ import annotations

from dataclasses import dataclass

from rlcap.errors import ConfigError


@dataclass(frozen=True)
class Stage:
    """One training run: ``name`` is its folder and identity, ``recipe`` the config it runs,
    ``init_from`` the stage whose best checkpoint it starts from (None: from scratch), ``paths``
    (name, stage) pairs: a learned reward loads that stage's best checkpoint
    (``reward.paths.<name>``), or, for a dotted name, that config key is set to it (e.g.
    ``model.critic_from``); ``overrides``: KEY=VALUE settings over the recipe (a variant of a method
    that differs from its recipe in one key, e.g. ``ac.value_features=att``)."""

    name: str
    recipe: str
    init_from: str | None = None
    paths: tuple[tuple[str, str], ...] = ()
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchRow:
    """One row of the table, a method trained and decoded: ``stages`` in order, the last one's checkpoint
    is the row's: ``checkpoint`` "best" (the validation CIDEr-D's choice) or "last" (the end of the
    budget); ``decoder`` how its beam column is decoded: "beam" (beam search) or "lookahead" ([Shi18]'s
    lookahead inference at the lambda its ``ac`` stage chose on validation, lookahead.json)."""

    stages: tuple[Stage, ...]
    description: str = ""
    decoder: str = "beam"
    checkpoint: str = "best"

    def __post_init__(self) -> None:
        if self.decoder not in ("beam", "lookahead"):
            raise ConfigError(f"method decoder must be 'beam' or 'lookahead', got {self.decoder!r}")
        if self.checkpoint not in ("best", "last"):
            raise ConfigError(f"method checkpoint must be 'best' or 'last', got {self.checkpoint!r}")


XE = Stage("xe", "xe")
