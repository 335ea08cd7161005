"""Writing files so that a crash never leaves half of one: the text goes to ``NAME.tmp`` first and
is moved into place (an atomic rename on POSIX)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: str | Path, obj: Any, indent: int | None = None) -> None:
    """``obj`` as JSON at ``path`` (its folder created): compact without ``indent``, else indented."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, separators=(",", ":")) if indent is None else json.dumps(obj, indent=indent)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
