"""The report in a real browser: headless Chromium (Debian's ``chromium`` package; ``.ci/run`` installs it) opens
the page from file:// with every network request sent to a closed port, runs its script, and we read the DOM
back: the metrics table, the gallery, the caption holding ``<script>`` shown as text, and no console message."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from rlcap.report import write_report
from tests.report.conftest import SCRIPT_CAPTION

pytestmark = pytest.mark.slow  # trains tiny runs (make test-fast leaves them out)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "no chromium on PATH: the browser tests need Debian's chromium package (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def open_page(page, tmp_path, *args) -> subprocess.CompletedProcess:
    """Chromium headless on ``page``, offline: a proxy on a closed port takes every request but file://."""
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
        capture_output=True, text=True, timeout=180, check=True)


class Dom(HTMLParser):
    """The parts of the page read back: title, the metrics table's cells, gallery items, caption texts, #shown."""

    VOID = {"meta", "img", "input", "br", "link", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.title = ""
        self.metric_rows: list[list[str]] = []
        self.items = 0
        self.captions: list[str] = []
        self.shown = ""
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in self.VOID:
            return
        self.stack.append((tag, attrs))
        classes = (attrs.get("class") or "").split()
        self.scripts += tag == "script"
        self.items += tag == "div" and "item" in classes
        if self._inside("table", "metrics-table") and self._inside("tbody"):
            if tag == "tr":
                self.metric_rows.append([])
            elif tag == "td":
                self.metric_rows[-1].append("")
        if tag == "span" and "text" in classes:
            self.captions.append("")

    def handle_endtag(self, tag):
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                return

    def handle_data(self, data):
        if self._inside("title"):
            self.title += data
        if self._inside("td") and self._inside("table", "metrics-table") and self._inside("tbody"):
            self.metric_rows[-1][-1] += data.strip()
        if self._inside("span", cls="text"):
            self.captions[-1] += data
        if self._inside("span", "shown"):
            self.shown += data

    def _inside(self, tag, id_=None, cls=None):
        return any(t == tag and (id_ is None or a.get("id") == id_) and (cls is None or cls in (a.get("class") or "").split())
                   for t, a in self.stack)


def dom_of(page, tmp_path) -> tuple[Dom, str]:
    done = open_page(page, tmp_path, "--dump-dom")
    dom = Dom()
    dom.feed(done.stdout)
    return dom, done.stderr


@pytest.mark.parametrize("layout", ["runs", "bench"])
def test_report_in_headless_chromium(reported, tmp_path, layout):
    page = write_report(reported[layout], tmp_path / f"{layout}.html")
    dom, log = dom_of(page, tmp_path)
    console = [line for line in log.splitlines() if "CONSOLE" in line]
    assert console == [], console  # no script error, no blocked request, no message at all
    assert dom.title.startswith("rlcap")  # the caption's script did not run (it would set the title)
    assert [row[0] for row in dom.metric_rows] == ["xe", "scst", "nearest_neighbour"]
    assert all(len(row) == len(dom.metric_rows[0]) > 5 for row in dom.metric_rows)
    assert dom.items == 6 and dom.shown.strip() == "6 of 6 shown"  # the gallery script ran
    assert dom.scripts == 1  # the page's own script only
    scst = json.loads((reported["runs"] / "scst" / "eval_test" / "scores.json").read_text())["model"]
    if layout == "runs":
        assert any(SCRIPT_CAPTION in text for text in dom.captions)  # shown as text, tags and all
        assert f"{scst['CIDEr']:.4f}" in dom.metric_rows[1] and f"{scst['SPICE']:.4f}" in dom.metric_rows[1]

    shot = tmp_path / f"{layout}.png"
    open_page(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", "--hide-scrollbars")
    from PIL import Image

    with Image.open(shot) as img:
        assert img.size == (1280, 1600)
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 50  # drawn: text, plots, thumbnails
