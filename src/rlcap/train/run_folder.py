"""A run folder is never silently overwritten (docs/TRAINING.md, "Run folders").

``rlcap train`` into a folder that already holds a run compares the settings with the run's
``config.json``: the same settings continue the run (a finished run stays finished; a killed one
resumes from its last checkpoint); different settings are refused with one line naming them and
the three ways on. With ``resume=true`` the settings a run cannot change (architecture, data and
vocabulary, algorithm, seed, starting checkpoint) are still refused, and the others (learning
rate, epochs, batch size, validation, logging) are applied and recorded. ``resume=true`` with
``overwrite=true`` is refused.

``resume`` and ``overwrite`` say what this command does with the folder, not what the run trains:
they are options of ``rlcap train`` (``resume=true``, as ``nproc=N``) and of :func:`rlcap.api.train`,
not keys of the run config, and no ``config.json`` records them. ``api.train`` calls
:func:`open_run_folder` before the loop, on the process that holds the folder.

Nothing of the old run is lost to a run that fails to start (data, model or reward cannot be
built). ``overwrite=true`` moves the old run's files aside, into ``OUT/.replaced-<pid>/``, and
deletes them only once the new run has started: :func:`mark_started`, at its first training
step, which also writes ``config.json`` (a resume records its changed settings only then). A
failure before that puts the old run back (:func:`abandon_start`), and so does the next run into
the folder after a kill (:func:`recover_replaced`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from rlcap.config import flatten, key_matches, to_dict
from rlcap.errors import ConfigError
from rlcap.files import write_json
from rlcap.train.checkpoint import recover

log = logging.getLogger(__name__)

# Settings a resumed run cannot change: the weights, vocabulary and data order depend on them.
FIXED = ("algorithm", "seed", "init_from", "data.", "model.", "optim.name", "ac.value_features")
# Settings that say where and how to compute or log, not what to train.
IGNORED = ("out_dir", "threads", "tensorboard")
RUN_FILES = ("config.json", "log.jsonl", "last", "best", "tensorboard")
ASIDE = ".replaced-"  # OUT/.replaced-<pid>/: the run that overwrite=true replaces, until the new one has started


def changed_settings(previous: dict[str, Any], current: dict[str, Any], model_from_checkpoint: bool,
                     defaults: dict[str, Any] | None = None, unread: tuple[str, ...] = ()) -> dict[str, tuple]:
    """key -> (previous, current) for every setting that differs (the model's when it comes from a checkpoint).

    A setting the stored run does not have (added by a later release) is no change while it keeps
    its default (``defaults``, flat), which does what the run did before the setting existed; one that
    only the stored run has (removed by a later release, or a section the current method does not read)
    is no change either, nor is a key it never reads (``unread``: :attr:`RunConfig.UNREAD`)."""
    old, new, default = flatten(previous), flatten(current), flatten(defaults or {})
    old = {k: v for k, v in old.items() if k in new}
    keys = sorted(set(old) | set(new))
    return {k: (old.get(k), new.get(k)) for k in keys
            if old.get(k) != new.get(k) and not key_matches(k, (*IGNORED, *unread))
            and not (model_from_checkpoint and k.startswith("model."))
            and not (k not in old and k in default and new.get(k) == default[k])}


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
    try:
        previous = json.loads(stored.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"{stored} is not valid JSON ({exc}); give overwrite=true to start the run afresh") from exc
    changes = changed_settings(previous, to_dict(cfg), model_from_checkpoint=bool(cfg.init_from),
                               defaults=to_dict(type(cfg)()), unread=cfg.UNREAD)
    fixed = {k: v for k, v in changes.items() if key_matches(k, FIXED)}
    if resume and fixed:
        raise ConfigError(f"{out} holds a run whose {_describe(fixed)} cannot change on resume; "
                          f"train into a new out_dir, or give overwrite=true to replace it")
    if not resume and changes:
        raise ConfigError(f"{out} already holds a run with other settings ({_describe(changes)}); give resume=true "
                          f"to continue it with the new settings, a new out_dir, or overwrite=true to replace it")
    if changes:
        log.info("resuming %s with changed settings: %s", out, _describe(changes))
    elif not resume:
        log.info("%s already holds a run with these settings: continuing it (overwrite=true starts afresh)", out)


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


def mark_started(out: Path, config: dict[str, Any]) -> None:
    """The run has started (data, model and reward built; one step taken): record its settings in
    ``config.json`` and delete the run it replaces."""
    write_json(out / "config.json", config, indent=2)
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
