"""Image feature stores: read features by image id, write them in batches.

``open_feature_store(path)`` picks the layout from the path (see docs/FEATURES.md):

* a file ending in ``.h5``/``.hdf5``: :class:`HDF5FeatureStore` (what ``rlcap features`` writes);
* a file ending in ``.tsv``, or a folder holding ``*.tsv`` files and no ``*.npz``: bottom-up-attention
  TSV lines (:class:`TsvFeatureStore`);
* a folder named ``<prefix>_att``, or a ``<prefix>`` whose ``<prefix>_att`` folder exists:
  self-critical.pytorch's ``_fc``/``_att`` folders (:class:`SelfCriticalFolderStore`);
* any other folder: one ``<id>.npz`` per image (:class:`NpzFolderStore`).
"""

from __future__ import annotations

from pathlib import Path

from rlcap.data.features.folder import NpzFolderStore, SelfCriticalFolderStore
from rlcap.data.features.hdf5 import DTYPES, HDF5FeatureStore, HDF5FeatureWriter
from rlcap.data.features.hdf5_writer import open_h5, read_skipped
from rlcap.data.features.store import FeatureStore, LoadedFeatures, pad_features
from rlcap.data.features.tsv import TsvFeatureStore, is_tsv_folder
from rlcap.errors import DataError

HDF5_SUFFIXES = (".h5", ".hdf5")

__all__ = [
    "DTYPES", "FeatureStore", "HDF5FeatureStore", "HDF5FeatureWriter", "LoadedFeatures",
    "NpzFolderStore", "SelfCriticalFolderStore", "TsvFeatureStore", "open_feature_store", "pad_features",
    "skipped_images",
]


def skipped_images(path: str | Path) -> dict[str, str]:
    """The ids ``rlcap features --skip-bad`` left out of the store at ``path`` as unreadable, and why: an HDF5
    store records them; other stores, and a path that names none, give {}. Reads only that record."""
    path = Path(path)
    if path.suffix.lower() not in HDF5_SUFFIXES or not path.is_file():
        return {}
    with open_h5(path, "r") as file:
        return read_skipped(file)


def open_feature_store(path: str | Path) -> FeatureStore:
    """Open the features at ``path``; :class:`DataError` if nothing usable is there."""
    path = Path(path)
    if path.suffix.lower() in HDF5_SUFFIXES:
        if not path.is_file():
            raise DataError(f"feature file not found: {path}")
        return HDF5FeatureStore(path)
    if path.suffix.lower() == ".tsv":
        if not path.is_file():
            raise DataError(f"feature file not found: {path}")
        return TsvFeatureStore(path)
    if path.is_dir() and path.name.endswith("_att"):
        return SelfCriticalFolderStore(path)
    sc_att = path.with_name(f"{path.name}_att")
    if not path.exists() and sc_att.is_dir():
        return SelfCriticalFolderStore(sc_att)
    if path.is_dir():
        return TsvFeatureStore(path) if is_tsv_folder(path) else NpzFolderStore(path)
    raise DataError(
        f"no features at {path}: expected an .h5/.hdf5 file, a bottom-up-attention .tsv file or folder of .tsv "
        "files, a folder of <id>.npz files, or self-critical <prefix>_fc/<prefix>_att folders"
    )
