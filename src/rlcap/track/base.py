"""What every tracker does (:class:`Tracker`), what it is opened with (:class:`Opening`) and the rows of the caption
table (:class:`CaptionRow`)."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, NamedTuple, Protocol

from rlcap.errors import RlcapError

log = logging.getLogger(__name__)

CAPTION_COLUMNS = ("image", "id", "caption", "scores", "reference")


class CaptionRow(NamedTuple):
    """One validation picture at one validation: its greedy caption, that caption's scores and a reference.
    ``picture``: a PIL image, or None when the dataset holds no readable picture for it."""

    image_id: str
    picture: Any
    caption: str
    scores: dict[str, float]
    reference: str

    def scores_text(self) -> str:
        return ", ".join(f"{name} {value:.4f}" for name, value in self.scores.items())


@dataclass(frozen=True)
class Opening:
    """What a tracker is opened with: where the run is, its names, and the tracker's run id to continue (None: a
    new tracker run)."""

    out_dir: Path
    project: str
    name: str
    run_id: str | None
    wandb_mode: str = "offline"
    mlflow_uri: str = ""
    resume_step: int | None = None  # the checkpoint's step a resumed run continues from (None: a fresh run)


class Tracker(Protocol):
    """One tracker's run. ``run_id`` is recorded in the run folder and given back as :attr:`Opening.run_id` when the
    run resumes. Scalars are named ``split/key`` (``train/loss``, ``val/CIDEr``) at the run's optimizer step."""

    name: str
    run_id: str
    held: set[tuple[str, int]]  # (split, step) of the scalars a continued tracker run holds already (read at opening)

    def log_scalars(self, values: dict[str, float], step: int) -> None: ...

    def log_config(self, settings: dict[str, Any]) -> None:
        """The run's settings (dotted keys: the run config, versions, the machine), at each opening of the run."""

    def log_captions(self, rows: list[CaptionRow], step: int) -> None: ...

    def log_artifacts(self, files: dict[str, Path]) -> None:
        """Files or folders (name -> path) where the tracker keeps files; a tracker that keeps none ignores them."""

    def close(self) -> None: ...


def need(package: str, tracker: str) -> ModuleType:
    """Import ``package`` for ``tracker``, or one line naming rlcap's extra that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise RlcapError(f"track.to names {tracker}, which needs the {package} package: "
                         f"pip install 'rlcap[{tracker}]'") from None


@contextlib.contextmanager
def quiet(tracker: str) -> Iterator[None]:
    """A tracker's package prints what it does (Trackio's start, MLflow's run links); only rlcap's CLI prints: its
    lines go to the log instead."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        yield
    for line in out.getvalue().splitlines():
        if line.strip():
            log.info("%s: %s", tracker, line.strip())
