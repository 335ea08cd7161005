"""The host part of computing image tokens online (decoding a batch's pictures, running the model's processor) in
worker processes, one batch ahead of the step: ``data.workers`` (docs/MODELS.md, "Store or online").

When processes help: the processor is Python (the image processors transformers ships without torchvision are PIL
and NumPy), and on the loader's read-ahead thread it holds the interpreter's lock while it runs, in turn with the
training thread's own Python; a worker process has its own interpreter and the read-ahead thread only waits for it.
But it needs a core of its own: on 2 cores, both busy with the step's torch threads, the worker ran the shapes
VLM's XE at 0.80-0.81x the store's steps/s where the read-ahead thread ran it at 0.83-0.89x (docs/BENCHMARKS.md,
"Image tokens online against the store"), so ``data.workers`` is 0 by default: set it where cores are to spare
(a GPU run, whose CPU threads mostly wait).

:class:`HostSide` is that host part as a small callable (decoding, then a function of the processor, never of the
model), built in a worker as the encoder builds it (its processor loaded from the folder the same way), so the
read-ahead thread (``data.workers=0``) and the workers give the same tokens (tests/encoders/test_host_workers.py).
:class:`HostWorkers` starts its processes with ``spawn`` (the training process holds threads, which ``fork`` would
copy mid-flight) when first asked, and each worker leaves when its parent does, killed or not.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlcap.data.embedded import EmbeddedImage
from rlcap.encoders.images import load_image

Picture = Path | EmbeddedImage
PARENT_POLL_S = 1.0  # how often a worker looks whether the process that started it is still there


@dataclass(frozen=True)
class HostSide:
    """Pictures -> what the encoder's image side reads: each decoded (``draft_size``: see
    :func:`rlcap.encoders.images.load_image`), then ``read`` over them all (a captioner's image processor, or a
    vision-language model's processor: its tiles, grid and pixels, rlcap.encoders.hf_vlm.OnHost)."""

    read: Callable[[list[Any]], Any]
    draft_size: int | None = None

    def __call__(self, pictures: Sequence[Picture]) -> Any:
        return self.read([load_image(p, draft_size=self.draft_size) for p in pictures])


class HostWorkers:
    """``workers`` processes running the host part ``side()`` builds in each (``side``: picklable) on the pictures
    they are given (:meth:`__call__`, which waits for
    the result: the caller is the loader's read-ahead thread). Started on the first call; shut down when this
    object goes (or the process ends)."""

    def __init__(self, side: Callable[[], HostSide], workers: int):
        if workers < 1:
            raise ValueError(f"HostWorkers needs at least one worker, got {workers}")
        self.side, self.workers = side, workers
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def __call__(self, pictures: Sequence[Picture]) -> Any:
        return self._started().submit(_run, list(pictures)).result()

    def _started(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start, initargs=(self.side, os.getpid()))
                weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)
            return self._pool


_SIDE: HostSide | None = None  # (in a worker: its host part, set once as it starts)


def _start(side: Callable[[], HostSide], parent: int) -> None:
    """A worker's start: one thread for torch (the cores are the training process's), its host part built, and a
    watchdog that ends it when its parent is gone (a killed run leaves no worker behind)."""
    global _SIDE
    torch.set_num_threads(1)
    _SIDE = side()
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="rlcap-parent-watch").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def _run(pictures: list[Picture]) -> Any:
    assert _SIDE is not None, "a host worker runs only after its start"
    return _SIDE(pictures)
