"""Method name -> :class:`Method`: its training loop and its run config class, in the plain dict :data:`METHODS`.

Each of rlcap's methods registers itself in its own file (``rlcap/methods/<name>.py``) with :func:`register`;
``rlcap/methods/__init__.py`` imports every one of them, so that importing :mod:`rlcap.methods` (or anything
in it) registers them all. A user's or a test's own method is one more :func:`register` call::

    register(Method("toy", train_toy, ToyRunConfig, "a toy method"))

``algorithm=toy`` then parses ``ToyRunConfig`` (the shared sections plus a ``toy:`` section) and runs
``train_toy(cfg)``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlcap.command_options import OPTION_HELP
from rlcap.config import apply_overrides, flatten, from_dict, key_matches, read_yaml, to_dict
from rlcap.errors import ConfigError
from rlcap.run_config import RunConfig, SequenceRunConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Method:
    """One training method: its ``name`` (``algorithm: NAME``), its loop ``train(cfg) -> TrainResult``, its run
    config class (:class:`~rlcap.run_config.RunConfig` and the method's own section) and a line of help."""

    name: str
    train: Callable[[Any], Any]
    config: type[RunConfig]
    help: str = ""

    def __post_init__(self) -> None:
        algorithm = self.config.__dataclass_fields__["algorithm"].default
        if algorithm != self.name:
            raise ValueError(f"method {self.name!r}: its run config {self.config.__name__} has algorithm "
                             f"{algorithm!r} by default, not {self.name!r}")

    @property
    def section(self) -> type | None:
        """The dataclass of the method's own section (named as the method), or None when it has none."""
        field = self.config.__dataclass_fields__.get(self.name)
        return field.default_factory if field is not None and isinstance(field.default_factory, type) else None


METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` to :data:`METHODS` under its name (a name given twice is an error)."""
    if method.name in METHODS and METHODS[method.name] != method:
        raise ValueError(f"a method named {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def method(name: str) -> Method:
    """The method registered as ``name``; one clear line for an unknown name."""
    if name not in METHODS:
        raise ConfigError(f"algorithm: {name!r} is not one of {sorted(METHODS)}")
    return METHODS[name]


def section_names(config: type[RunConfig]) -> set[str]:
    """The names of the sections a run config class has beyond those every run has."""
    return set(config.__dataclass_fields__) - set(RunConfig.__dataclass_fields__)


def other_method_sections(algorithm: str) -> set[str]:
    """The section names of the registered methods' run configs that ``algorithm``'s has not."""
    others = set().union(*(section_names(m.config) for m in METHODS.values()))
    return others - section_names(method(algorithm).config)


def load_run_config(path: str | Path | None = None, overrides: list[str] | None = None,
                    shared: bool = False) -> RunConfig:
    """A recipe (YAML) and ``key=value`` overrides as the run config of its ``algorithm`` (default xe).

    Only the method's own sections are parsed: the sections of other registered methods are left
    out with a warning naming them (overrides given to several runs at once, as ``rlcap bench --rl``
    and ``rlcap demo`` give them, reach the runs that read them; ``shared``: such overrides, left out
    without a warning), and any other unknown key is an error listing the valid ones. A shared key the
    method never reads (:attr:`RunConfig.UNREAD`, e.g. ``decode.temperature`` for xe) is named in a warning too;
    ``rl.kl_coef`` for a method without a KL term, and a key of its own section the run does not read, are refused
    when set to another value than the default (:func:`check_settings_read`; not for ``shared`` overrides).
    The keys the recipe and the overrides set are recorded in the config's :attr:`RunConfig.set_keys`."""
    data = apply_overrides(read_yaml(path) if path is not None else {}, list(overrides or []))
    options = sorted(set(data) & set(OPTION_HELP))
    if options:
        key = options[0]
        elsewhere = (f"or api.train(cfg, {key}=True)" if key != "nproc" else
                     "or torchrun --nproc-per-node N -m rlcap train RECIPE (api.train runs in the process that "
                     "calls it)")
        raise ConfigError(f"{key} is not a setting of the run but an option of the command: {key}=... on the "
                          f"rlcap train command line, {elsewhere} ({OPTION_HELP[key]})")
    algorithm = data.get("algorithm", "xe")
    if not isinstance(algorithm, str):
        raise ConfigError(f"algorithm: expected a method name, got {algorithm!r}")
    config = method(algorithm).config
    stray = sorted(set(data) & other_method_sections(algorithm))
    if stray and not shared:
        log.warning("algorithm=%s does not read the section%s %s (left out)", algorithm, "s" * (len(stray) > 1),
                    ", ".join(stray))
    unread = [key for key in flatten(data) if key_matches(key, config.UNREAD)]
    if unread and not shared:
        log.warning("algorithm=%s does not read %s (set, but without effect on this run)", algorithm,
                    ", ".join(unread))
    cfg = from_dict(config, {k: v for k, v in data.items() if k not in stray})
    # what the recipe and the overrides set, defaults included: a run from a checkpoint takes those as its own
    # (rlcap.train.init_source.model_section), where "equal to the default" cannot tell set from not set
    cfg.set_keys = frozenset(key for key in flatten(data) if key.partition(".")[0] not in stray)
    if not shared:
        check_settings_read(cfg)
    return cfg


def check_settings_read(cfg: RunConfig) -> None:
    """ConfigError, in one line, for a setting the recipe or the overrides give a value of its own (not the default)
    that the run does not read: ``rl.kl_coef`` for a method whose loss has no KL term (its run config's
    ``KL_TERM``), or a key of the method's own section that the run's other settings leave unread
    (``scst.running_mean_decay`` beside another ``scst.baseline``, ``grpo.kl_ratio`` without ``rl.kl_coef``).
    The shared sections' keys a run leaves unread (:attr:`RunConfig.UNREAD`, another architecture's model keys,
    model keys beside ``init_from``) are named in a warning instead: one list of sizes often serves several runs
    (an XE run and the RL run from its checkpoint, whose model keys are compared with the checkpoint's)."""
    values, defaults = flatten(to_dict(cfg)), flatten(to_dict(type(cfg)()))
    for key in sorted(cfg.set_keys or ()):
        own = key == "rl.kl_coef" or key.partition(".")[0] == cfg.algorithm
        if not own or key not in values or values[key] == defaults.get(key) or cfg.reads(key):
            continue
        if key == "rl.kl_coef":
            with_term = ", ".join(sorted(name for name, m in METHODS.items()
                                         if issubclass(m.config, SequenceRunConfig) and m.config.KL_TERM))
            raise ConfigError(f"rl.kl_coef={values[key]}: algorithm={cfg.algorithm} has no KL term in its loss, so "
                              f"nothing would read it: leave it out (the methods with one: {with_term})")
        raise ConfigError(f"{key}={values[key]!r}: algorithm={cfg.algorithm} does not read it beside the run's other "
                          "settings, so it would have no effect: leave it out (rlcap train --help-config with the "
                          "same settings lists the keys the run reads)")
