"""``rlcap`` in a child process whose checkpoint saves pause, so that a kill lands inside a save.

    python -m tests.train.slow_save SECONDS train RECIPE KEY=VALUE ...   (from the repository root)

Each save pauses ``SECONDS`` after its files are on disk and before its manifest is written, and again between
its two renames (:mod:`rlcap.train.checkpoint`): the two moments a kill must be survived at. The product has no
such pause and no switch for one; this child wraps the checkpoint module's own steps before it runs the command
line (test_faults.py and test_locks.py start it).
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable


def pausing_after(step: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    """``step``, then a pause of ``seconds``."""

    def paused(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        time.sleep(seconds)
        return out

    return paused


def main(argv: list[str]) -> int:
    from rlcap.cli import main as rlcap_main
    from rlcap.train import checkpoint

    seconds = float(argv[0])
    checkpoint._fsync_folders = pausing_after(checkpoint._fsync_folders, seconds)  # before the manifest
    checkpoint._set_aside = pausing_after(checkpoint._set_aside, seconds)  # between the two renames
    return rlcap_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
