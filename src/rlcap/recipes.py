"""Where rlcap's YAML recipes are, for the commands that train from them (``rlcap bench``, ``rlcap
demo``): the folder given (``--configs``), else the ``configs/`` folder of the checkout the package
runs from (``CHECKOUT/src/rlcap`` -> ``CHECKOUT/configs``), else ``configs`` in the working
directory. The recipes are checked before any data is generated or any stage trains."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlcap.errors import ConfigError


def checkout_configs() -> Path:
    """``configs/`` beside the package's source tree (an editable install or a checkout on PYTHONPATH)."""
    return Path(__file__).resolve().parents[2] / "configs"


def find_recipes(configs: str | Path | None, names: Sequence[str]) -> Path:
    """The folder holding every recipe in ``names`` (file names such as ``shapes_xe.yaml``)."""
    if configs is not None:
        folder = Path(configs)
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            raise ConfigError(f"--configs {configs}: {missing[0]} is not there (needed: {', '.join(names)}); "
                              "give the folder of rlcap's recipes, configs/ in an rlcap checkout")
        return folder
    candidates = [checkout_configs(), Path("configs")]
    for folder in candidates:
        if all((folder / name).is_file() for name in names):
            return folder
    raise ConfigError(f"the recipes {', '.join(names)} are neither in {candidates[0]} (beside rlcap's source) "
                      f"nor in {candidates[1].resolve()} (the working directory): give --configs DIR, "
                      "configs/ in an rlcap checkout")
