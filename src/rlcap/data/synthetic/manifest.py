"""The manifest a synthetic generator writes beside its data (``manifest.json``): which generator,
which version and which output settings. Before generating into a folder that already holds data,
:func:`check_settings` refuses one generated with other settings (regenerating would replace a
user's data) unless the user asked for exactly that (``--regenerate``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlcap.errors import DataError

MANIFEST_FILE = "manifest.json"


def read_manifest(out_dir: str | Path, generator: str, what: str) -> dict[str, Any] | None:
    """The folder's manifest of ``generator`` (a module name); None when it has none. DataError when
    its ``manifest.json`` was not written by that generator (unreadable, or another tool's);
    ``what`` names the data in the message ("shapes", "moving-shapes")."""
    path = Path(out_dir) / MANIFEST_FILE
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is not a {what} manifest ({exc}): give a folder of its own to the {what} "
                        f"data") from exc
    if not isinstance(manifest, dict) or manifest.get("generator") != generator:
        raise DataError(f"{path} was not written by rlcap's {what} generator: give a folder of its own to the "
                        f"{what} data")
    return manifest


def other_settings(manifest: dict[str, Any] | None, version: int,
                   settings: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """setting -> (the manifest's, ``settings``') for every output setting (and the generator's
    ``version``) that differs; empty when there is no manifest or nothing differs."""
    if manifest is None:
        return {}
    old = {"version": manifest.get("version"), **(manifest.get("config") or {})}
    new = {"version": version, **settings}
    return {k: (old.get(k), new.get(k)) for k in new if old.get(k) != new.get(k)}


def refuse_other_settings(out_dir: str | Path, what: str, changes: dict[str, tuple[Any, Any]],
                          flag: str = "--regenerate") -> None:
    """DataError (one line naming the differing settings and ``flag``) when ``changes`` is not empty."""
    if changes:
        listed = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())
        raise DataError(f"{out_dir} holds {what} data generated with other settings ({listed}); give {flag} to "
                        f"replace it (only the files rlcap generated there are removed), or another data folder")
