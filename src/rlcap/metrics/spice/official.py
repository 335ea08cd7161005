"""SPICE 1.0 through the official jar (``spice_impl: official-jar``), with the user's Stanford CoreNLP 3.6.0 jars.

pycocoevalcap ships ``spice-1.0.jar`` and its libraries but downloads CoreNLP at first use.
rlcap never downloads: name the folder holding ``stanford-corenlp-3.6.0.jar`` and
``stanford-corenlp-3.6.0-models.jar`` with the ``corenlp_dir`` argument (``rlcap score --corenlp-dir``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rlcap.errors import RlcapError
from rlcap.metrics.java import java_executable, packaged_jar

log = logging.getLogger(__name__)
CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
_HOW = (
    f"SPICE needs the Stanford CoreNLP 3.6.0 jars {' and '.join(CORENLP_JARS)} "
    "(from https://nlp.stanford.edu/software/stanford-corenlp-full-2015-12-09.zip): "
    "pass --corenlp-dir FOLDER (rlcap score) or corenlp_dir=FOLDER (score_captions)"
)


def corenlp_jars(corenlp_dir: Path | str | None = None) -> list[Path]:
    """The two CoreNLP jars in the folder ``corenlp_dir``; one clear error if it is not given or lacks them."""
    if corenlp_dir is None or not str(corenlp_dir):
        raise RlcapError(_HOW)
    jars = [Path(corenlp_dir) / name for name in CORENLP_JARS]
    missing = [str(j) for j in jars if not j.is_file()]
    if missing:
        raise RlcapError(f"{', '.join(missing)} not found. {_HOW}")
    return jars


def spice(
    cands: Sequence[str], refs: Sequence[Sequence[str]], corenlp_dir: Path | str | None = None
) -> tuple[float, list[float]]:
    """Mean SPICE F-score and one per caption (NaN where SPICE gives none)."""
    jars = corenlp_jars(corenlp_dir)
    spice_jar = packaged_jar("spice/spice-1.0.jar")
    classpath = os.pathsep.join([str(spice_jar), str(spice_jar.parent / "lib" / "*"), *map(str, jars)])
    with tempfile.TemporaryDirectory(prefix="rlcap-spice-") as tmp:
        in_file, out_file = Path(tmp) / "in.json", Path(tmp) / "out.json"
        items = [{"image_id": i, "test": c, "refs": list(r)} for i, (c, r) in enumerate(zip(cands, refs, strict=True))]
        in_file.write_text(json.dumps(items), encoding="utf-8")
        cmd = [java_executable(), "-Xmx8G", "-cp", classpath, "edu.anu.spice.SpiceScorer",
               str(in_file), "-out", str(out_file), "-subset", "-silent"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no error output"])[-1]
            raise RlcapError(f"SPICE failed (exit {done.returncode}): {last}")
        results = json.loads(out_file.read_text(encoding="utf-8"))
    by_index = {int(r["image_id"]): _as_float(r["scores"]["All"]["f"]) for r in results}
    scores = [by_index[i] for i in range(len(cands))]
    finite = [s for s in scores if not math.isnan(s)]
    return (sum(finite) / len(finite) if finite else math.nan), scores


def _as_float(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]
