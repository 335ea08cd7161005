"""What every benchmark script shares: the machine line, timing, and its section of docs/BENCHMARKS.md.

Each script owns one section between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``; a rerun
replaces that section only.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "BENCHMARKS.md"
HEADER = ("# Benchmarks\n\nEvery figure below was measured by the command shown with it, on the machine "
          "named with it. Runs on this 2-core machine vary by 10-15% from session to session (compare figures of one run).\n")


def load_note(load: tuple[float, float], threads: int = 1) -> str:
    """The machine's 1-minute load average at a benchmark's start and end, and what it means for its
    wall-clock figures (a benchmark alone keeps it near its ``threads`` on these 2 cores)."""
    figures = f"1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end"
    if max(load) > threads + 0.5:
        return f"The 2 cores were shared with other jobs ({figures}), so wall-clock figures can be 2x off."
    return f"No other job ran ({figures})."


def cpu_model() -> str:
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def machine(**versions: str) -> str:
    """One line: CPU, cores, Python and the given library versions, today's date."""
    libs = "".join(f", {name} {version}" for name, version in versions.items())
    return (f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}{libs}, "
            f"{datetime.date.today().isoformat()}")


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def replace_section(name: str, body: str, doc: Path = DOC) -> None:
    """Put ``body`` between this benchmark's markers, creating the file or the section as needed."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    section = f"{start}\n{body.strip()}\n{end}"
    text = doc.read_text(encoding="utf-8") if doc.exists() else HEADER
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")


def run_bench(benchmark: str, methods: str, out: str, max_train_images: int = 0,
              rl: list[str] | None = None, xe: list[str] | None = None, image_size: int = 128
              ) -> tuple[list[str], float]:
    """Run ``rlcap bench`` from the repository (its training budget ``max_train_images``, 0: all;
    ``rl``: KEY=VALUE overrides of every stage that is not XE, e.g. ``rl.epochs=2``; ``xe``: of the XE stages;
    ``image_size``: the encoder's input side, 128 the default); return the command as a user would type it and the
    seconds it took."""
    import subprocess
    import sys
    import time

    command = ["rlcap", "bench", "--benchmark", benchmark, "--methods", methods, "--out", out]
    if max_train_images:
        command += ["--max-train-images", str(max_train_images)]
    if image_size != 128:
        command += ["--image-size", str(image_size)]
    if rl:
        command += ["--rl", *rl]
    if xe:
        command += ["--xe", *xe]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rlcap.cli", *command[1:]], check=True, cwd=REPO)
    return command, time.perf_counter() - start
