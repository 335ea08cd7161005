"""METEOR 1.5 through the official jar (shipped in the pycocoevalcap wheel).

One long-lived ``java -jar meteor-1.5.jar - - -stdio -l en -norm`` process is started on
first use and reused across calls (:func:`shared_meteor`); it is closed at interpreter exit.
The protocol is pycocoevalcap's: one ``SCORE ||| ref ||| ... ||| hyp`` line per image gives
its statistics, then one ``EVAL ||| stats ||| ...`` line gives a score per image and the
corpus score (METEOR aggregates statistics; the corpus score is not the mean).
"""

from __future__ import annotations

import atexit
import logging
import subprocess
import tempfile
import threading
from collections.abc import Sequence

from rlcap.errors import RlcapError
from rlcap.metrics.java import java_executable, packaged_jar

log = logging.getLogger(__name__)
_CHUNK = 200  # SCORE lines written before reading their answers (keeps pipes from filling)


class Meteor:
    """A running METEOR 1.5 process; ``score`` may be called many times."""

    def __init__(self) -> None:
        jar = packaged_jar("meteor/meteor-1.5.jar")
        cmd = [java_executable(), "-jar", "-Xmx2G", str(jar), "-", "-", "-stdio", "-l", "en", "-norm"]
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            cmd, cwd=jar.parent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
        )
        self._lock = threading.Lock()
        log.debug("started METEOR: %s", " ".join(cmd))

    def score(self, cands: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, list[float]]:
        """Corpus METEOR and one score per candidate; captions are tokenized strings."""
        if not cands:
            return 0.0, []
        with self._lock:
            stats: list[str] = []
            for start in range(0, len(cands), _CHUNK):
                lines = [
                    " ||| ".join(("SCORE", " ||| ".join(r), c.replace("|||", "").replace("  ", " ")))
                    for c, r in zip(cands[start : start + _CHUNK], refs[start : start + _CHUNK], strict=True)
                ]
                self._write(lines)
                stats.extend(self._read() for _ in lines)
            self._write(["EVAL ||| " + " ||| ".join(stats)])
            per_caption = [float(self._read()) for _ in cands]
            return float(self._read()), per_caption

    def _write(self, lines: list[str]) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(("\n".join(lines) + "\n").encode("utf-8"))
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise RlcapError(f"METEOR stopped: {self._error_text()}") from None

    def _read(self) -> str:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RlcapError(f"METEOR stopped: {self._error_text()}")
        return line.decode("utf-8").strip()

    def _error_text(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return text[-1] if text else "no error output"

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()


_shared: Meteor | None = None


def shared_meteor() -> Meteor:
    """The process-wide METEOR scorer, started on first use."""
    global _shared
    if _shared is None:
        _shared = Meteor()
        atexit.register(_shared.close)
    return _shared


def meteor(cands: Sequence[str], refs: Sequence[Sequence[str]]) -> tuple[float, list[float]]:
    """Corpus and per-caption METEOR 1.5 of tokenized caption strings."""
    return shared_meteor().score(cands, refs)
