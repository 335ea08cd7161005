"""Progress in a redirected log is plain lines (no carriage returns); on a terminal, log lines are
written above the bar, not inside it."""

from __future__ import annotations

import io
import logging

from tqdm import tqdm

from rlcap.cli import _BarSafeHandler, main
from rlcap.progress import LogProgress, progress
from tests.encoders.conftest import write_images


def test_log_progress_every_tenth_and_at_the_end(caplog):
    caplog.set_level(logging.INFO, logger="rlcap.progress")
    counter = LogProgress(25, "decode", "img", seconds=1e9)
    for _ in range(25):
        counter.update(1)
    counter.close()
    shares = [m.split(" img")[0] for m in caplog.messages]
    # every 10% of 25 is every 2 or 3 images (the step is round(2.5) = 2): 2, 4, ..., 24, then 25 at close
    assert shares == [f"decode: {n}/25" for n in range(2, 25, 2)] + ["decode: 25/25"]
    assert caplog.messages[-1].startswith("decode: 25/25 img (100%), ")


def test_log_progress_by_time(caplog, monkeypatch):
    import rlcap.progress as module

    caplog.set_level(logging.INFO, logger="rlcap.progress")
    now = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    counter = LogProgress(1000, "features", "img", seconds=30)
    counter.update(1)
    now[0] = 31.0
    counter.update(1)
    assert caplog.messages == ["features: 2/1000 img (0%), 0.1 img/s"]


def test_no_bar_when_stderr_is_not_a_terminal(capsys):
    with progress(3, "x") as bar:
        assert isinstance(bar, LogProgress)
        bar.update(3)
    assert "\r" not in capsys.readouterr().err


def test_features_and_data_log_progress_as_lines(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO)
    write_images(tmp_path / "im", 3)
    assert main(["features", str(tmp_path / "im"), "--out", str(tmp_path / "f.h5"), "--image-size", "64"]) == 0
    assert main(["data", "shapes", "--out", str(tmp_path / "shapes"), "--n-train", "4", "--n-val", "1",
                 "--n-test", "1", "--workers", "1"]) == 0
    assert "\r" not in capsys.readouterr().err
    lines = [m for m in caplog.messages if m.startswith(("features:", "shapes:"))]
    assert lines[0].startswith("features: 3/3 img (100%)") and lines[-1].startswith("shapes: 6/6 img (100%)")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_log_lines_go_above_the_bar_on_a_terminal():
    terminal = _Terminal()
    handler = _BarSafeHandler()
    handler.setStream(terminal)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("rlcap.test_bar")
    log.addHandler(handler)
    log.propagate = False
    try:
        with tqdm(total=10, file=terminal, desc="work", mininterval=0) as bar:
            bar.update(3)
            log.warning("a log line")
            bar.update(3)
    finally:
        log.removeHandler(handler)
        log.propagate = True
    out = terminal.getvalue()
    # tqdm.write clears the bar (\r, blanks, \r), writes the line, then redraws the bar below it
    before, after = out.split("a log line\n")
    assert before.endswith("\r") and "work" in after
