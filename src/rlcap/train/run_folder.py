"""A run folder is never silently overwritten (docs/TRAINING.md, "Run folders").

``rlcap train`` into a folder that already holds a run compares the settings with the run's
``config.json``: the same settings continue the run (a finished run stays finished; a killed one
resumes from its last checkpoint); different settings are refused with one line naming them and
the three ways on. With ``resume=true`` the settings a run cannot change (architecture, data and
vocabulary, algorithm, seed, starting checkpoint, how the model trains: a run from ``init_from`` too,
:func:`own_model_keys`) are still refused, and the others (learning rate, epochs, batch size, validation,
logging) are applied and recorded. ``resume=true`` with ``overwrite=true`` is refused.

``resume`` and ``overwrite`` say what this command does with the folder, not what the run trains:
they are options of ``rlcap train`` (``resume=true``, as ``nproc=N``) and of :func:`rlcap.api.train`,
not keys of the run config, and no ``config.json`` records them. ``api.train`` calls
:func:`open_run_folder` before the loop, on the process that holds the folder.

Nothing of the old run is lost to a run that fails to start (data, model or reward cannot be
built). ``overwrite=true`` moves the old run's files aside, into ``OUT/.replaced-<pid>/``, and
deletes them only once the new run has started: :func:`mark_started`, at its first training
step, which also writes ``config.json`` (a resume records its changed settings only then). A
failure before that puts the old run back (:func:`abandon_start`), and so does the next run into
the folder after a kill (:func:`recover_replaced`). A run that stops before its first checkpoint (a loss that
diverged at step 1, a kill) leaves nothing that blocks the next run there: the ``config.json`` and log of a
run folder that holds no checkpoint are not compared (:func:`saved_nothing`), and the next run replaces them.

``config.json`` records the settings that name files (:data:`PATH_SETTINGS`) as absolute paths, and a rerun
compares what they name: the same command run from another folder, its paths written from there, is the same run.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from rlcap.config import flatten, key_matches, to_dict
from rlcap.data.loader import DATA_PATHS
from rlcap.errors import ConfigError
from rlcap.files import write_json
from rlcap.models.architectures import archs, architecture
from rlcap.train.checkpoint import is_complete, recover

log = logging.getLogger(__name__)

# Settings a resumed run cannot change: the weights, vocabulary and data order depend on them.
FIXED = ("algorithm", "seed", "init_from", "data.", "model.", "optim.name", "ac.value_features")
# Settings that say where and how to compute or log, not what to train.
IGNORED = ("out_dir", "threads", "track.", "tensorboard")  # (tensorboard: a setting of earlier releases, track.to now)
# (the trackers' files: rlcap.track; trackers.json records their run ids)
RUN_FILES = ("config.json", "log.jsonl", "last", "best", "tensorboard", "trackers.json", "wandb", "mlflow.db",
             "mlartifacts")
ASIDE = ".replaced-"  # OUT/.replaced-<pid>/: the run that overwrite=true replaces, until the new one has started
CHECKPOINTS = ("last", "best")
# the settings that name a file or folder: recorded absolute, compared by what they name
PATH_SETTINGS = ("out_dir", "init_from", "model.path", "model.critic_from", *(f"data.{key}" for key in DATA_PATHS))


def _path(config: dict[str, Any], key: str) -> str | None:
    """The path the dotted ``key`` of ``config`` holds, or None (not set, or not a path)."""
    section, _, name = key.rpartition(".")
    node = config.get(section) if section else config
    value = node.get(name) if isinstance(node, dict) else None
    return value if isinstance(value, str) and value else None


def _set_path(config: dict[str, Any], key: str, value: str) -> None:
    section, _, name = key.rpartition(".")
    (config[section] if section else config)[name] = value


def run_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A run's settings (``to_dict`` of its config) as ``config.json`` records them: the paths of
    :data:`PATH_SETTINGS` absolute (what they name from the working directory; a folder that is gone too)."""
    out = copy.deepcopy(config)
    for key in PATH_SETTINGS:
        path = _path(out, key)
        if path is not None:
            _set_path(out, key, os.path.abspath(os.path.expanduser(path)))
    return out


def _moved_along(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``previous`` (recorded settings, :func:`run_settings`) with each path that names, from its run folder, what
    ``current``'s names from the current one taken as ``current``'s: a run folder moved or copied together with its
    data and model (a project on another disk) is the same run. A data file the record names that is gone, given
    now where it exists, has moved: its new place is taken too (the run's checkpoints hold the rest)."""
    out = copy.deepcopy(previous)
    old_dir, new_dir = _path(previous, "out_dir"), _path(current, "out_dir")
    for key in PATH_SETTINGS:
        old, new = _path(previous, key), _path(current, key)
        if old is None or new is None or old == new:
            continue
        moved_along = old_dir is not None and new_dir is not None and (
            os.path.relpath(old, old_dir) == os.path.relpath(new, new_dir))
        if moved_along:
            _set_path(out, key, new)
        elif key.startswith("data.") and not os.path.exists(old) and os.path.exists(new):
            log.info("%s %s is gone and given at %s: the run's data has moved there", key, old, new)
            _set_path(out, key, new)
    return out


def saved_nothing(out: Path) -> bool:
    """Whether ``out`` holds a run (its ``config.json`` and ``log.jsonl``) that stopped before its first checkpoint
    (no complete ``last`` or ``best``): nothing to continue or keep."""
    return ((out / "config.json").is_file() and (out / "log.jsonl").is_file()
            and not any(is_complete(out / name) for name in CHECKPOINTS))


def changed_settings(previous: dict[str, Any], current: dict[str, Any], model_from_checkpoint: bool,
                     defaults: dict[str, Any] | None = None, unread: tuple[str, ...] = (),
                     own_keys: tuple[str, ...] = ()) -> dict[str, tuple]:
    """key -> (previous, current) for every setting that differs (the model's when it comes from a checkpoint).

    A setting the stored run does not have (added by a later release) is no change while it keeps
    its default (``defaults``, flat), which does what the run did before the setting existed; one that
    only the stored run has (removed by a later release, or a section the current method does not read)
    is no change either, nor is a key it never reads (``unread``: :attr:`RunConfig.UNREAD`). With
    ``model_from_checkpoint``, the model keys are the checkpoint's and not compared, but for ``own_keys`` (dotted):
    those the run takes as its own (:func:`own_model_keys`), compared as any other."""
    old, new, default = flatten(previous), flatten(current), flatten(defaults or {})
    old = {k: v for k, v in old.items() if k in new}
    keys = sorted(set(old) | set(new))
    return {k: (old.get(k), new.get(k)) for k in keys
            if old.get(k) != new.get(k) and not key_matches(k, (*IGNORED, *unread))
            and not (model_from_checkpoint and k.startswith("model.") and k not in own_keys)
            and not (k not in old and k in default and new.get(k) == default[k])}


def own_model_keys(cfg: Any, previous: dict[str, Any]) -> tuple[str, ...]:
    """The model keys a run from ``init_from`` takes as its own rather than from the checkpoint (how its architecture
    trains it: ``model.train``, LoRA's rank, ...; :func:`rlcap.train.init_source.model_section`) where ``cfg``
    sets them, of the architecture the ``previous`` settings record. Its config.json records what it trained with, so a
    resume that sets another value changes the model as ``model.path`` would, and is refused as that is."""
    arch = previous.get("model", {}).get("arch")
    if not cfg.init_from or arch not in archs():
        return ()
    return tuple(f"model.{key}" for key in architecture(arch).training_keys if cfg.sets(f"model.{key}"))


def _describe(changes: dict[str, tuple]) -> str:
    return ", ".join(f"{k} {a!r} -> {b!r}" for k, a, b in ((k, *v) for k, v in changes.items()))


def open_run_folder(cfg: Any, resume: bool = False, overwrite: bool = False) -> None:
    """Make ``cfg.out_dir`` ready for the run: tidy it after a kill (:func:`rlcap.train.checkpoint.recover`,
    :func:`recover_replaced`), then :func:`prepare_run_folder`. After it, the run continues from
    ``OUT/last`` when that is a complete checkpoint and starts afresh otherwise."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for line in [*recover(out), *recover_replaced(out)]:
        log.info("%s", line)
    prepare_run_folder(cfg, resume, overwrite)


def prepare_run_folder(cfg: Any, resume: bool = False, overwrite: bool = False) -> None:
    """Decide how a run starts in ``cfg.out_dir``: ``overwrite`` sets the run there aside
    (:func:`set_aside`); ``resume`` continues it with changed settings, those a run may change; else
    only a run with the same settings continues.

    Raises ConfigError (one line) when the folder holds a run with other settings."""
    out = Path(cfg.out_dir)
    stored = out / "config.json"
    if resume and overwrite:
        raise ConfigError(f"resume=true continues the run in {out} and overwrite=true replaces it: give one of them")
    if overwrite:
        set_aside(out)
        return
    if not stored.is_file():
        return
    if saved_nothing(out):
        log.info("%s holds a run that stopped before its first checkpoint: this run starts afresh there", out)
        return
    try:
        previous = json.loads(stored.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{stored} is not valid JSON ({exc}); give overwrite=true to start the run afresh") from exc
    current = run_settings(to_dict(cfg))
    changes = changed_settings(_moved_along(run_settings(previous), current), current,
                               model_from_checkpoint=bool(cfg.init_from), defaults=to_dict(type(cfg)()),
                               unread=cfg.UNREAD, own_keys=own_model_keys(cfg, previous))
    fixed = {k: v for k, v in changes.items() if key_matches(k, FIXED)}
    if resume and fixed:
        raise ConfigError(f"{out} holds a run whose {_describe(fixed)} cannot change on resume; "
                          f"train into a new out_dir, or give overwrite=true to replace it")
    if not resume and changes:
        raise ConfigError(f"{out} already holds a run with other settings ({_describe(changes)}); give resume=true "
                          f"(rlcap bench: --resume) to continue it with the new settings, a new out_dir, or "
                          f"overwrite=true to replace it")
    if changes:
        log.info("resuming %s with changed settings: %s", out, _describe(changes))
    elif not resume:
        log.info("%s already holds a run with these settings: continuing it (overwrite=true starts afresh)", out)


def _kept_model(previous: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """The model section ``previous`` (the recorded settings) holds, its paths moved along with a run folder that
    moved since (``out_dir`` in ``previous`` and in ``record``, the settings recorded now): from the run folder, they
    name what they named."""
    model = dict(previous.get("model", record["model"]))
    old_dir, new_dir = _path(previous, "out_dir"), _path(record, "out_dir")
    for key in PATH_SETTINGS:
        section, _, name = key.partition(".")
        if section == "model" and model.get(name) and old_dir is not None and new_dir is not None:
            model[name] = os.path.normpath(os.path.join(new_dir, os.path.relpath(model[name], old_dir)))
    return model


def _aside(out: Path, pid: int | None = None) -> Path:
    return out / f"{ASIDE}{os.getpid() if pid is None else pid}"


def set_aside(out: Path) -> Path | None:
    """Move the run in ``out`` (its :data:`RUN_FILES`) into this process's aside folder; None when
    there is none. Other files in ``out`` stay where they are."""
    present = [out / name for name in RUN_FILES if (out / name).exists()]
    if not present:
        return None
    aside = _aside(out)
    aside.mkdir()
    for path in present:
        os.replace(path, aside / path.name)
    log.info("overwrite=true: the run in %s is kept in %s until the new run has started", out, aside)
    return aside


def mark_started(out: Path, config: dict[str, Any], resumed: bool = False) -> None:
    """The run has started (data, model and reward built; one step taken): record its settings ``config`` in
    ``config.json`` (:func:`run_settings`) and delete the run it replaces. ``resumed``: the run continues its
    folder's checkpoint, whose model it reads (from that checkpoint's own files), and the model section the
    folder recorded stays (it cannot change on resume; its paths moved along with a run folder that moved)."""
    record = run_settings(config)
    stored = out / "config.json"
    if resumed and stored.is_file():  # (valid JSON: prepare_run_folder read it)
        record["model"] = _kept_model(run_settings(json.loads(stored.read_text(encoding="utf-8"))), record)
    write_json(stored, record, indent=2)
    aside = _aside(out)
    if aside.is_dir():
        shutil.rmtree(aside)
        log.info("removed the run that overwrite=true replaced in %s", out)


def abandon_start(out: str | Path) -> None:
    """The run failed before it started: put back the run it was to replace (nothing when it replaced
    none, or had started)."""
    aside = _aside(Path(out))
    if aside.is_dir():
        _put_back(Path(out), aside)
        log.info("the run did not start: the run it was to replace is back in %s", out)


def recover_replaced(out: Path) -> list[str]:
    """After a kill: the aside folder of a process that is gone is put back when its new run had not
    started (no ``config.json``), else deleted. Returns what was done, one line each."""
    done: list[str] = []
    for aside in sorted(out.glob(f"{ASIDE}*")):
        pid = aside.name[len(ASIDE):]
        if not pid.isdigit() or (int(pid) != os.getpid() and _alive(int(pid))):
            continue
        if (out / "config.json").exists():
            shutil.rmtree(aside)
            done.append(f"removed {aside}: the run that replaced it had started")
        else:
            _put_back(out, aside)
            done.append(f"put the run in {aside} back into {out}: the run that was to replace it never started")
    return done


def _put_back(out: Path, aside: Path) -> None:
    for name in RUN_FILES:  # the files of the run that did not start
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for path in aside.iterdir():
        os.replace(path, out / path.name)
    aside.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
