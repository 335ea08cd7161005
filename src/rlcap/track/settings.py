"""The run's settings as the trackers record them (their config or params): the resolved run config by dotted key,
the versions of rlcap and of the main libraries, and the machine."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

from rlcap.config import flatten

LIBRARIES = ("rlcap", "torch", "transformers", "peft", "numpy", "pycocoevalcap")


def run_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (``to_dict`` of a run config) flat, plus ``versions.<library>`` and ``machine.*``."""
    import torch

    versions = {}
    for name in LIBRARIES:
        try:
            versions[f"versions.{name}"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    machine = {"machine.python": platform.python_version(), "machine.platform": platform.platform(),
               "machine.cpus": os.cpu_count() or 0,
               "machine.gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"}
    return {**flatten(config), **versions, **machine}
