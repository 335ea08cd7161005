"""Locating Java and the jars shipped in the pycocoevalcap wheel (METEOR 1.5, SPICE 1.0)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from rlcap.errors import RlcapError


def java_executable() -> str:
    java = shutil.which("java")
    if java is None:
        raise RlcapError("METEOR and SPICE need Java 8 or newer: `java` is not on PATH (e.g. apt-get install default-jre)")
    return java


def pycocoevalcap_dir() -> Path:
    """The installed pycocoevalcap package folder (located without importing it)."""
    spec = importlib.util.find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        raise RlcapError("METEOR and SPICE use the jars of pycocoevalcap: pip install 'rlcap[java]'")
    return Path(list(spec.submodule_search_locations)[0])


def packaged_jar(relative: str) -> Path:
    jar = pycocoevalcap_dir() / relative
    if not jar.is_file():
        raise RlcapError(f"{jar} is missing: reinstall pycocoevalcap==1.2")
    return jar
