"""Typed configuration: dataclasses with help text, YAML recipes and ``key=value`` overrides.

Every field carries its help in ``field(metadata={"help": ...})``. Unknown keys and values of
the wrong type raise :class:`~rlcap.errors.ConfigError` naming the key and listing the valid
ones (nanoGPT/TRL style). Nested sections are dataclasses; overrides use dotted paths
(``model.hidden_dim=256``) and values are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import yaml

from rlcap.errors import ConfigError

T = TypeVar("T")


@runtime_checkable
class Validates(Protocol):
    """A config section that checks its allowed values and cross-field rules once loaded."""

    def validate(self) -> None: ...


def help_field(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with help text; mutable defaults go through a factory."""
    if isinstance(default, (list, dict)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata={"help": help}, **kwargs)
    if dataclasses.is_dataclass(default) and isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata={"help": help}, **kwargs)
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def _check_value(name: str, value: Any, tp: Any) -> Any:
    """Validate (and lightly coerce int->float) ``value`` against the annotation ``tp``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_value(name, value, arg)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{name}: expected {_type_name(tp)}, got {value!r}")
    if typing.get_origin(tp) is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{name}: {value!r} is not one of {list(allowed)}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return from_dict(tp, value, prefix=f"{name}.")
    if origin is dict:
        key_t, val_t = typing.get_args(tp) or (Any, Any)
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {value!r}")
        for key, item in value.items():
            if item is None and ":" in str(key) and type(None) not in typing.get_args(val_t):
                raise _colon_without_space(name, key)
        return {_check_value(f"{name} key", k, key_t): _check_value(f"{name}.{k}", v, val_t) for k, v in value.items()}
    if origin is list:
        (item_t,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, list):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        return [_check_value(f"{name}[{i}]", v, item_t) for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and _YAML11_EXPONENT.fullmatch(value.strip()):
        value = float(value)  # YAML 1.1 reads 2e-5 (no dot) as a string
    if tp is float and isinstance(value, float) and not math.isfinite(value):
        # YAML's .nan and .inf (a recipe's, or an override's): no setting of rlcap means them
        raise ConfigError(f"{name}: expected a finite number, got {value}")
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false, got {value!r}")
    if tp in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{name}: expected {tp.__name__}, got {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{name}: expected {tp.__name__}, got {value!r}")
    return value


_YAML11_EXPONENT = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


# settings of earlier releases that are no settings any more: what replaced each (a recipe that still sets one is
# told so, not that it misspelt a key)
REMOVED_KEYS = {
    "decode.compile": "decoding compiles its steps on CUDA and not on the CPU by itself (docs/TRAINING.md, "
                      "Compiled decoding); TORCHDYNAMO_DISABLE=1 turns it off, and the Python decoders' "
                      "compile=True compiles on the CPU too",
    "decode.exit_every": "decoding checks whether every caption has ended after each word on the CPU and never on "
                         "CUDA by itself (docs/TRAINING.md, Host synchronisations); the Python decoders' "
                         "exit_every=N checks every N words (0: never)",
    "pg.samples": "PG-SPIDEr samples rl.n_samples captions per image, the samples per image of every method that "
                  "samples (pg.samples: 1 is rl.n_samples: 1)",
    "tensorboard": "the trackers a run logs to are track.to (tensorboard=false is track.to=[]; docs/TRAINING.md, "
                   "Trackers)",
    "reward.device": "a run on CUDA scores CIDEr-D on the GPU and one on the CPU there, by itself, with the same "
                     "values (docs/RL.md, CIDEr-D on the device)",
}


def _unknown_key(key: str, value: Any, fields: dict[str, Any], prefix: str) -> ConfigError:
    """One line for a key ``cls`` does not have: a removed setting says what replaced it; a key that holds a
    colon and no value is YAML's reading of ``{name:value}`` without a space; anything else lists the valid keys."""
    if f"{prefix}{key}" in REMOVED_KEYS:
        return ConfigError(f"{prefix}{key} was removed: {REMOVED_KEYS[f'{prefix}{key}']}: remove it from the "
                           "recipe or the command")
    if value is None and ":" in str(key):
        return _colon_without_space(prefix.rstrip(".") or WHOLE, key)
    return ConfigError(f"unknown config key {prefix}{key}; valid keys{' in ' + prefix.rstrip('.') if prefix else ''}: "
                       + ", ".join(sorted(fields)))


WHOLE = "the config"  # what a top-level key belongs to, in messages


def _colon_without_space(name: str, key: Any) -> ConfigError:
    """YAML reads ``{a:b}`` (no space after the colon) as the key ``"a:b"`` without a value."""
    head, _, tail = str(key).partition(":")
    fixed = f"{{{head}: {tail}}}"
    return ConfigError(f"{name}: YAML reads {{{key}}} as one key {key!r} without a value, as it needs a space after "
                       f"the colon: write {fixed}" + (f" ({name}={fixed} on the command line)" if name != WHOLE else ""))


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys and wrong types."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise _unknown_key(unknown[0], data[unknown[0]], fields, prefix)
    hints = typing.get_type_hints(cls)
    kwargs = {name: _check_value(f"{prefix}{name}", value, hints[name]) for name, value in data.items()}
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from exc
    if isinstance(obj, Validates):
        obj.validate()
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as dotted keys (``reward.weights`` and ``reward.paths`` stay whole: their keys are names)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key not in ("weights", "paths"):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def key_matches(key: str, names: tuple[str, ...]) -> bool:
    """Whether the dotted ``key`` is one of ``names``: a key, or a section's prefix ending in ``.``."""
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in names)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` strings onto a nested dict (values parsed as YAML scalars)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw  # (whitespace as written: YAML reads it as null)
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: cannot parse value: {exc}") from exc
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part} is not a section")
        node[parts[-1]] = value
    return data


class _DuplicateKey(Exception):
    """A key given twice in one YAML mapping: (key, first line, second line)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's SafeLoader, except that a key given twice in one mapping is an error (SafeLoader keeps
    the last value without a word, so a recipe would train on a setting its reader overlooked)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by design
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.setdefault(key, line)
            except TypeError:
                continue  # an unhashable key: SafeLoader's own error follows
            if first != line:
                raise _DuplicateKey(key, first, line)
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping of a YAML recipe; an unreadable, non-UTF-8, empty or invalid file, or a key given
    twice, is a :class:`ConfigError` naming the file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"config {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}): "
                          "save it as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as exc:
        key, first, second = exc.args
        raise ConfigError(f"config {path}: key {key!r} is given twice (lines {first} and {second}); "
                          "YAML would keep only the last: remove one") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from exc
    if data is None:
        raise ConfigError(f"config {path} is empty: a recipe sets at least its algorithm (see configs/); "
                          "to train on the defaults, write `algorithm: xe`")
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping at the top level")
    return data


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Load ``cls`` from an optional YAML file plus ``key=value`` overrides."""
    data = read_yaml(path) if path is not None else {}
    return from_dict(cls, apply_overrides(data, list(overrides or [])))


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every field, nested sections flattened: for ``--help-config``."""
    rows: list[tuple[str, str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, prefix=f"{prefix}{f.name}."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
        rows.append((f"{prefix}{f.name}", repr(default), f.metadata.get("help", "")))
    return rows
