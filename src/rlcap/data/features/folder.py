"""Feature stores made of one file per image.

* rlcap folder: ``<dir>/<id>.npz`` holding ``att`` (N, D) and optionally ``fc`` (D,); without
  ``fc`` the pooled vector is the mean of ``att``.
* self-critical.pytorch layout (``scripts/prepro_feats.py``): two sibling folders
  ``<prefix>_fc/<id>.npy`` (D,) and ``<prefix>_att/<id>.npz`` with key ``feat`` shaped (N, D) or
  (g, g, D). Opened by the ``_att`` folder or by the prefix; without a ``_fc`` folder the
  pooled vector is the mean of ``att`` (bottom-up features ship only ``_att``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rlcap.data.features.store import FeatureStore
from rlcap.errors import DataError


def _list_ids(folder: Path, suffix: str) -> list[str]:
    with os.scandir(folder) as entries:
        return sorted(e.name[: -len(suffix)] for e in entries if e.name.endswith(suffix) and e.is_file())


def _read_npz(path: Path, key: str) -> np.ndarray | None:
    """Array ``key`` of an .npz file (None when absent); DataError naming a broken file."""
    try:
        with np.load(path) as data:
            return data[key] if key in data.files else None
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"cannot read feature file {path}: {exc}") from exc


def _as_regions(att: np.ndarray, path: Path) -> np.ndarray:
    if att.ndim == 3:  # (g, g, D) grid from self-critical's ResNet extraction
        att = att.reshape(-1, att.shape[-1])
    if att.ndim != 2:
        raise DataError(f"expected att of shape (N, D) in {path}, got {att.shape}")
    return att


class _FolderBase(FeatureStore):
    def __init__(self, path: Path, att_dir: Path, att_suffix: str):
        self.path = path
        self._att_dir = att_dir
        self._att_suffix = att_suffix
        self._ids = _list_ids(att_dir, att_suffix)
        if not self._ids:
            raise DataError(f"no '*{att_suffix}' feature files in {att_dir}")
        self._id_set = set(self._ids)
        fc, att = self.get(self._ids[0])
        self._fc_dim, self._att_dim = fc.shape[0], att.shape[1]

    def __contains__(self, id: object) -> bool:
        return id in self._id_set

    def _read_att(self, id: str, key: str) -> tuple[Path, np.ndarray]:
        """The file of ``id`` and its region array under ``key``, as (N, D)."""
        if id not in self._id_set:
            raise self.missing(id)
        file = self._att_dir / f"{id}.npz"
        att = _read_npz(file, key)
        if att is None:
            raise DataError(f"feature file {file} has no '{key}' array")
        return file, _as_regions(att, file)


class NpzFolderStore(_FolderBase):
    """``<dir>/<id>.npz`` with ``att`` (N, D) and optional ``fc`` (D,)."""

    def __init__(self, path: str | Path):
        path = Path(path)
        super().__init__(path, path, ".npz")

    def get(self, id: str) -> tuple[np.ndarray, np.ndarray]:
        file, att = self._read_att(id, "att")
        fc = _read_npz(file, "fc")
        return (att.mean(axis=0) if fc is None else fc.reshape(-1)), att


class SelfCriticalFolderStore(_FolderBase):
    """self-critical.pytorch's ``<prefix>_fc/<id>.npy`` + ``<prefix>_att/<id>.npz`` (key ``feat``)."""

    def __init__(self, att_dir: str | Path):
        att_dir = Path(att_dir)
        prefix = att_dir.name[: -len("_att")]
        fc_dir = att_dir.with_name(f"{prefix}_fc")
        self._fc_dir = fc_dir if fc_dir.is_dir() else None
        super().__init__(att_dir, att_dir, ".npz")

    def get(self, id: str) -> tuple[np.ndarray, np.ndarray]:
        _, att = self._read_att(id, "feat")
        if self._fc_dir is None:
            return att.mean(axis=0), att
        fc_file = self._fc_dir / f"{id}.npy"
        try:
            fc = np.load(fc_file)
        except FileNotFoundError as exc:
            raise DataError(f"feature id '{id}' has att features but no {fc_file}") from exc
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read feature file {fc_file}: {exc}") from exc
        return fc.reshape(-1), att
