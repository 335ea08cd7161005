"""Checkpoints of runs with several learned parts: one safetensors file per named module.

A checkpoint is a folder::

    policy.safetensors   the weights of each named part (policy, value, discriminator, ...)
    config.json          the full run config (rebuilds the models) plus feature sizes
    vocab.json           the vocabulary
    trainer.pt           optimizers and schedulers by part name, random-generator state,
                         progress and the loop's own state (baseline statistics, phase counters)
    checkpoint.json      written last: format, part names, each part's spec (class, architecture, settings), step,
                         epoch, metrics
    hf/                  what the policy's architecture keeps beside its weights (model.arch=hf: the policy as a
                         complete transformers folder, rlcap.models.hf.architecture)

Every path a checkpoint needs is found from the checkpoint itself, wherever the command runs: its data
paths are stored relative to it (``paths_relative_to: checkpoint``), and its model's paths as its architecture
writes and reads them (:class:`rlcap.models.architecture.Architecture`: an hf policy's ``model.path`` is its own
``hf/``). The engine asks the architecture through the registry (:mod:`rlcap.models.architectures`), never importing it.

Atomic by folder (never by file): a checkpoint is written into a sibling temporary folder
``NAME.tmp-PID``, fsynced, then swapped in by two renames (``NAME`` -> ``NAME.old``, temporary
-> ``NAME``) and the old one removed. At every instant either ``NAME`` or ``NAME.old`` is a
complete checkpoint; :func:`recover` (run at the start of every run) puts ``NAME.old`` back when
a kill landed between the renames, and removes leftover temporary folders.

Format 1 (rlcap 0.1: a single ``model.safetensors`` and trainer keys ``optimizer`` and
``scheduler``) still loads: its model is the part ``policy``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rlcap.data.hf_text import load_vocab
from rlcap.data.vocab import Vocab
from rlcap.errors import ConfigError, RlcapError
from rlcap.files import write_error
from rlcap.models.base import DescribesItself, Shardable
from rlcap.models.architectures import architecture

log = logging.getLogger(__name__)

MANIFEST = "checkpoint.json"
FORMAT = 2
POLICY = "policy"  # the captioner every method trains
VALUE = "value"  # actor-critic's value network ([Shi18]), which lookahead inference reads
_OLD_WEIGHTS = "model.safetensors"  # format 1


def rng_state() -> dict[str, Any]:
    """Every random generator a run draws from: torch's CPU one (and each CUDA device's when there
    are any), NumPy's and Python's."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpoint(NamedTuple):
    weights: dict[str, dict[str, torch.Tensor]]  # part name -> state dict
    config: dict[str, Any]
    vocab: Vocab
    trainer: dict[str, Any] | None  # {"optimizers", "schedulers", "rng", "progress", "state"}
    manifest: dict[str, Any]


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_save(path: Path, obj: Any) -> None:
    """``torch.save`` of ``obj`` straight into ``path`` (a tensor at a time: the trainer state, which holds a DDP
    run's optimizer moments, is not made whole in memory first), then fsynced."""
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def _write_weights(path: Path, weights: dict[str, torch.Tensor]) -> None:
    """``weights`` into the safetensors file ``path`` by safetensors' own writer, which writes from the tensors'
    memory (the whole file is never made in memory beside them: a rank that saves a policy's weights holds them
    once, docs/SCALING.md), then fsynced. Its I/O errors are OSError, with the system's error number."""
    try:
        save_file(weights, str(path))
    except SafetensorError as exc:
        found = re.search(r"os error (\d+)", str(exc))
        if found is None:
            raise OSError(str(exc)) from None
        raise OSError(int(found.group(1)), os.strerror(int(found.group(1)))) from None
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folders(folder: Path) -> None:
    """fsync every file in the folders under ``folder`` (written by others than :func:`_fsync_write`), then them."""
    for sub in sorted(p for p in folder.rglob("*") if p.is_dir()):
        for path in sorted(p for p in sub.iterdir() if p.is_file()):
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(sub)


def _set_aside(folder: Path, old: Path) -> None:
    """The first of the two renames: the complete checkpoint at ``folder`` becomes ``old`` (a stale ``old``,
    left by a kill, removed first). Until the second rename, ``old`` is the complete one (:func:`recover`)."""
    if old.exists():
        shutil.rmtree(old)
    os.replace(folder, old)


def temporary_folder(folder: Path, fresh: bool = False) -> Path:
    """The sibling folder a save of ``folder`` writes into before it swaps it in (this process's); ``fresh``:
    made empty now (a stale one, left by a kill, removed first)."""
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    if fresh:
        folder.parent.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    return tmp


class Gathered(Protocol):
    """The sharded parts' whole weights, each gathered as a save takes it (rlcap.train.optimizer.WholeWeights)."""

    def __contains__(self, name: object) -> bool: ...

    def take(self, name: str) -> dict[str, torch.Tensor]: ...


def save_checkpoint(folder: str | Path, modules: dict[str, torch.nn.Module], config: dict[str, Any], vocab: Vocab,
                    trainer: dict[str, Any] | None, manifest: dict[str, Any], tmp: Path | None = None,
                    whole: Gathered | None = None) -> Path:
    """Write a complete checkpoint at ``folder``, atomically (see the module docstring). A write
    that fails (a full disk, a folder made read-only) is one line, :class:`rlcap.files.WriteError`,
    and leaves no temporary folder; the previous checkpoint stays (or ``recover`` restores it). ``tmp``: the
    temporary folder, made already and holding what the ranks wrote into it (FSDP2's shards:
    :mod:`rlcap.train.optimizer`); ``whole``: the weights of the parts sharded, each gathered as it is written."""
    folder = Path(folder)
    tmp = tmp or temporary_folder(folder, fresh=True)
    try:
        return _save(folder, tmp, modules, config, vocab, trainer, manifest, whole)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(folder, exc) from None


def _save(folder: Path, tmp: Path, modules: dict[str, torch.nn.Module], config: dict[str, Any], vocab: Vocab,
          trainer: dict[str, Any] | None, manifest: dict[str, Any], whole: Gathered | None) -> Path:
    for name, module in modules.items():
        sharded = whole is not None and name in whole
        state = whole.take(name) if sharded else module.state_dict()  # (one part whole at a time)
        weights = {k: v.detach().contiguous().cpu() for k, v in state.items()}
        _write_weights(tmp / f"{name}.safetensors", weights)  # a failed write: OSError
        if name == POLICY:  # what its architecture keeps beside the weights (a transformers captioner: its own folder)
            with module.consolidated(state) if sharded and isinstance(module, Shardable) else nullcontext():
                architecture(config["model"]["arch"]).export(module, tmp, config,
                                                             folder if is_complete(folder) else None)
        del state, weights  # (before the next part is gathered: never two parts whole at once)
    _fsync_write(tmp / "config.json", json.dumps(config, indent=2).encode())
    _fsync_write(tmp / "vocab.json", vocab.to_json().encode())
    if trainer is not None:
        _fsync_save(tmp / "trainer.pt", trainer)
    _fsync_folders(tmp)  # what an architecture exported (hf/): on disk before the manifest says the checkpoint is whole
    specs = {name: part_spec(name, module, config) for name, module in modules.items()}
    full = {"format": FORMAT, "parts": sorted(modules), "specs": specs, **manifest}
    _fsync_write(tmp / MANIFEST, json.dumps(full, indent=2).encode())
    _fsync_dir(tmp)
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        _set_aside(folder, old)
    os.replace(tmp, folder)
    _fsync_dir(folder.parent)
    if old.exists():
        shutil.rmtree(old)
    return folder


def part_spec(name: str, module: torch.nn.Module, config: dict[str, Any]) -> dict[str, Any]:
    """What part ``name`` was built as, recorded in the manifest's ``specs``: its class, and its architecture and the
    settings it was built with: its own (:class:`DescribesItself`), or, for the policy, the run's model section."""
    spec: dict[str, Any] = {"class": f"{type(module).__module__}.{type(module).__qualname__}"}
    if isinstance(module, DescribesItself):
        return {**spec, **module.part_spec()}
    if name == POLICY:
        return {**spec, "family": config["model"]["arch"], "settings": config["model"]}  # (its model.arch, under the key checkpoints have always written)
    return spec


def recover(run_dir: str | Path) -> list[str]:
    """Tidy a run folder after a kill: restore ``NAME.old`` where ``NAME`` is missing, remove
    temporary folders and stale ``.old`` copies. Returns what was done, one line each."""
    run_dir = Path(run_dir)
    done: list[str] = []
    if not run_dir.is_dir():
        return done
    for path in sorted(run_dir.iterdir()):
        if ".tmp-" in path.name:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            done.append(f"removed the unfinished checkpoint {path}")
    for old in sorted(run_dir.glob("*.old")):
        live = old.with_name(old.name[: -len(".old")])
        if not is_complete(live) and is_complete(old):
            if live.exists():
                shutil.rmtree(live)
            os.replace(old, live)
            done.append(f"restored {live} from {old.name} (a save was interrupted between its renames)")
        else:
            shutil.rmtree(old)
            done.append(f"removed the superseded checkpoint {old}")
    return done


def is_complete(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def _read_weights(folder: Path, manifest: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    if "format" not in manifest:  # format 1
        files = {POLICY: folder / _OLD_WEIGHTS}
    elif manifest["format"] == FORMAT:
        files = {name: folder / f"{name}.safetensors" for name in manifest["parts"]}
    else:
        raise RlcapError(f"{folder}: checkpoint format {manifest['format']!r} is newer than this rlcap reads "
                         f"(format {FORMAT}); upgrade rlcap")
    weights = {}
    for name, path in files.items():
        try:
            weights[name] = load_file(str(path))
        except (OSError, SafetensorError, ValueError) as exc:
            raise RlcapError(f"cannot read checkpoint {folder}: {path.name} is missing or corrupt ({exc})") from exc
    return weights


def _upgrade_trainer(trainer: dict[str, Any]) -> dict[str, Any]:
    """Format 1's trainer state (one optimizer, one scheduler) in format 2's shape."""
    if "optimizers" in trainer:
        return trainer
    return {"optimizers": {POLICY: trainer["optimizer"]}, "schedulers": {POLICY: trainer["scheduler"]},
            "rng": trainer["rng"], "progress": trainer["progress"], "state": {}}


@runtime_checkable
class AdaptsWeights(Protocol):
    """A module that reads saved weights its own way first: a LoRA policy from plain weights, a plain one from a
    LoRA checkpoint's (its adapters merged). ``saved``: the model section of the checkpoint the weights come from."""

    def adapt_weights(self, state: dict[str, torch.Tensor],
                      saved: dict[str, Any] | None = None) -> dict[str, torch.Tensor]: ...


def load_weights(module: torch.nn.Module, weights: dict[str, torch.Tensor], folder: str | Path, name: str,
                 saved: dict[str, Any] | None = None) -> None:
    """``module.load_state_dict(weights)``, with one line naming the first difference when the
    checkpoint's weights of part ``name`` do not fit the model its part spec (checkpoint.json) or, for a
    checkpoint without specs, its config describes (a damaged or edited checkpoint) instead of torch's list of every tensor. A module that reads saved
    weights its own way first (:class:`AdaptsWeights`) is given them with ``saved``, the model section of the
    checkpoint they come from (its config's ``model``)."""
    if isinstance(module, AdaptsWeights):
        weights = module.adapt_weights(weights, saved)
    own = module.state_dict()
    missing = [key for key in own if key not in weights]
    unexpected = [key for key in weights if key not in own]
    resized = [key for key in own if key in weights and tuple(own[key].shape) != tuple(weights[key].shape)]
    problems = []
    if resized:
        key = resized[0]
        problems.append(f"{key} is {tuple(weights[key].shape)} there but {tuple(own[key].shape)} in the model"
                        + (f", and {len(resized) - 1} more tensors differ in shape" if len(resized) > 1 else ""))
    if missing:
        problems.append(f"{len(missing)} tensors of the model are missing there ({missing[0]}, ...)")
    if unexpected:
        problems.append(f"{len(unexpected)} tensors there are not in the model ({unexpected[0]}, ...)")
    if problems:
        raise RlcapError(f"{folder}: the weights of part {name!r} do not fit the model the checkpoint describes: "
                         f"{'; '.join(problems)} (a damaged checkpoint, or an edited {MANIFEST} or config.json)")
    module.load_state_dict(weights)


def last_checkpoint_line(run_dir: str | Path) -> str:
    """Where a stopped run continues from, for its message: its last checkpoint's step and folder, or none."""
    last = Path(run_dir) / "last"
    if not is_complete(last):
        return "it has no checkpoint yet"
    return f"its last checkpoint is step {load_checkpoint(last, with_trainer=False).manifest['step']} in {last}"


def check_world_size(run_dir: str | Path, world: int) -> None:
    """ConfigError when ``run_dir/last``, which the run will continue, was written by another number of
    processes than ``world``: each process takes its share of the same global batches."""
    last = Path(run_dir) / "last"
    if not is_complete(last):
        return
    try:
        was = json.loads((last / MANIFEST).read_text(encoding="utf-8")).get("world_size", 1)
    except (OSError, ValueError) as exc:
        raise RlcapError(f"cannot read checkpoint {last}: {exc}") from exc
    if was != world:
        raise ConfigError(f"{run_dir} was trained by {was} process{'es' if was != 1 else ''} and is resumed by "
                          f"{world}: resume it with as many, nproc={was} (each takes its share of the same global "
                          "batches)")


def check_strategy(folder: Path, strategy: str) -> None:
    """ConfigError when the checkpoint ``folder`` a run resumes was written under the other strategy (a DDP
    checkpoint's optimizer state is whole in trainer.pt, an FSDP2 one's in shards/); nothing when there is none."""
    if not (folder / MANIFEST).is_file():
        return
    was = json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("strategy", "ddp")
    if was != strategy:
        raise ConfigError(f"{folder} was written with distributed.strategy={was} and is resumed with "
                          f"distributed.strategy={strategy}: resume it with distributed.strategy={was}")


def load_checkpoint(folder: str | Path, with_trainer: bool = True) -> Checkpoint:
    """Read a checkpoint folder (format 1 or 2); one clear error for a missing or corrupt file. The config's
    ``model.path`` comes back absolute, found from the checkpoint (the module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RlcapError(f"checkpoint folder not found: {folder}")
    if not is_complete(folder):
        raise RlcapError(f"{folder} is not a complete checkpoint (no {MANIFEST})")
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RlcapError(f"cannot read checkpoint {folder}: {exc}") from exc
    config = _found_model_path(folder, config)
    weights = _read_weights(folder, manifest)
    vocab = load_vocab(folder / "vocab.json")
    trainer = None
    if with_trainer and (folder / "trainer.pt").is_file():
        try:
            # on the CPU whatever device wrote it: optimizers move their state to their parameters' device
            trainer = _upgrade_trainer(torch.load(folder / "trainer.pt", map_location="cpu", weights_only=False))
        except Exception as exc:  # torch.load raises many types for a damaged pickle
            raise RlcapError(f"cannot read checkpoint {folder}: trainer.pt is corrupt ({type(exc).__name__})") from exc
    return Checkpoint(weights, config, vocab, trainer, manifest)


def relative_data_paths(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The data section with its file paths relative to the checkpoint ``folder``, so that the
    checkpoint can be evaluated from any working directory (``paths_relative_to: checkpoint``)."""
    out = dict(data)
    from rlcap.data.loader import DATA_PATHS

    for key in DATA_PATHS:
        if out.get(key):
            out[key] = os.path.relpath(Path(out[key]).resolve(), folder.resolve())
    return out


def own_model_path(config: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's ``config`` as it records it: its model's paths found from the checkpoint itself (its
    architecture's :meth:`~rlcap.models.architecture.Architecture.saved_section`: an hf policy's ``model.path`` its own ``hf/``),
    so that it opens from any working directory and after the folder the run started from has moved or gone."""
    return architecture(config["model"]["arch"]).saved_section(config)


def _found_model_path(folder: Path, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` read from checkpoint ``folder`` with its model's paths absolute (its architecture's
    :meth:`~rlcap.models.architecture.Architecture.found_section`); a config with no model section (a retriever's) as
    it is."""
    model = config.get("model")
    if not isinstance(model, dict) or "arch" not in model:
        return config
    return architecture(model["arch"]).found_section(folder, config)
