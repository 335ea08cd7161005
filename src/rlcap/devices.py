"""Where a run computes: ``device: auto | cpu | cuda | cuda:N | mps``, and on how many CPU threads (``threads``).

``auto`` is the first CUDA device when torch sees one, else the CPU. A device that this machine's
torch cannot use is refused in one line (``resolve_device``) before any work starts.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import re
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

from rlcap.errors import ConfigError

log = logging.getLogger(__name__)

AUTO = "auto"
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check_device_name(name: str, key: str = "device") -> None:
    """ConfigError unless ``name`` is auto, cpu, cuda, cuda:N or mps."""
    if not isinstance(name, str) or not DEVICE_PATTERN.fullmatch(name):
        raise ConfigError(f"{key}: {name!r} is not one of auto, cpu, cuda, cuda:N, mps")


def resolve_device(name: str, key: str = "device") -> torch.device:
    """The torch device ``name`` stands for on this machine; one line when it cannot be used."""
    check_device_name(name, key)
    cpu = f"{key} cpu" if key.startswith("--") else f"{key}=cpu"  # as the command takes it
    if name == AUTO:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{key}: {name} asked for, but this torch ({torch.__version__}) sees no CUDA device; "
                              f"give {cpu}, or install a CUDA build of torch (README)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key}: {name} asked for, but there are {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{key}: mps asked for, but this torch sees no Apple GPU; give {cpu}")
    return device


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's parameters (the CPU for one without any)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))


PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def check_precision(name: str) -> None:
    if name not in PRECISIONS:
        raise ConfigError(f"precision: {name!r} is not one of {', '.join(PRECISIONS)}")


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` at ``precision`` on ``device`` (nothing for fp32): under it the matrix products run
    in bf16 or fp16 while softmaxes stay in fp32 (autocast's own op lists). A run enters it around its
    forward passes only (:class:`Precision`)."""
    check_precision(precision)
    dtype = PRECISIONS[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


@dataclass(frozen=True)
class Precision:
    """The precision of a run's forward passes, which the engine owns (nanoGPT's ``ctx``): the session hands a
    method each learned part as an :class:`InPrecision`, whose calls (and the decoding or teacher forcing of a
    policy, :func:`in_precision`) enter :meth:`forward`, and nothing else runs under autocast: rewards, losses,
    the optimizer step and checkpoints compute in fp32. Leaving the region drops autocast's low-precision
    copies of the weights, so the next forward reads the weights the optimizer has just changed."""

    name: str = "fp32"
    device_type: str = "cpu"

    def __post_init__(self) -> None:
        check_precision(self.name)

    def forward(self) -> contextlib.AbstractContextManager:
        """The context of one forward pass (or one decoding): autocast at this precision, nothing for fp32."""
        return autocast(torch.device(self.device_type), self.name)


class InPrecision:
    """A learned part as the engine hands it to a method: calling it, or one of its model's own methods
    (``step``, ``encode``, ``embed_images``, a value head...), runs under its run's :class:`Precision`, so a
    method's body never enters autocast itself. What ``torch.nn.Module`` defines (``train``, ``parameters``,
    ``state_dict``...) and plain attributes pass through untouched, a submodule comes wrapped in turn, and
    setting an attribute sets the module's. ``module``: the module itself (for ``isinstance`` checks, copies
    and checkpoints). A function that drives the module over many calls (a decode) takes it through
    :func:`in_precision` instead: one region for the whole decode, as autocast caches the weights' casts
    within one region (per-call regions would cast them, and keep a copy for the backward pass, at every step)."""

    __slots__ = ("module", "precision")

    def __init__(self, module: torch.nn.Module, precision: Precision):
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "precision", precision)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.precision.forward():
            return self.module(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.module, name)
        if isinstance(value, torch.nn.Module):
            return InPrecision(value, self.precision)
        if inspect.ismethod(value) and name not in _MODULE_MACHINERY:
            return _entering(value, self.precision)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.module, name, value)

    def __repr__(self) -> str:
        return f"InPrecision({type(self.module).__name__}, {self.precision.name})"


# torch.nn.Module's own methods (mode, parameters, state, hooks), which run no forward pass
_MODULE_MACHINERY = frozenset(dir(torch.nn.Module)) - {"forward"}


def _entering(method: Callable, precision: Precision) -> Callable:
    """``method`` called under ``precision``."""
    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        with precision.forward():
            return method(*args, **kwargs)
    return run


F = TypeVar("F", bound=Callable[..., Any])


def in_precision(fn: F) -> F:
    """``fn(model, ...)``, a function that drives a model (decoding, teacher forcing), run under the model's
    precision when the model comes as an :class:`InPrecision`, and given the module itself: one autocast region
    for the whole call, as the caller's region was before the engine owned it. A plain module is passed as is
    (a caller that enters its own precision: validation, ``rlcap eval``)."""
    @functools.wraps(fn)
    def run(model: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(model, InPrecision):
            return fn(model, *args, **kwargs)
        with model.precision.forward():
            return fn(model.module, *args, **kwargs)
    return run  # type: ignore[return-value]


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16's loss scaler (gradients of fp16 activations underflow without it); None otherwise."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def other_runnable_threads(samples: int = 5, pause: float = 0.01) -> int:
    """How many threads of other processes are running or waiting for a core now: the kernel's count of runnable
    threads (/proc/loadavg's fourth field) less the one reading it, the least of ``samples`` reads ``pause``
    seconds apart (a passing spike is not a job); 0 where the system does not say (no /proc)."""
    counts = []
    for k in range(samples):
        try:
            fields = Path("/proc/loadavg").read_text(encoding="ascii").split()
            counts.append(max(0, int(fields[3].split("/")[0]) - 1))
        except (OSError, IndexError, ValueError):
            return 0
        if k + 1 < samples:
            time.sleep(pause)
    return min(counts)


def cpu_threads(threads: int | str, others: Callable[[], int] = other_runnable_threads) -> int:
    """``threads`` as a number: ``auto`` is the cores this process may use (its CPU affinity), divided among the
    processes torchrun starts on this machine (``LOCAL_WORLD_SIZE``), less the cores other jobs keep busy as it
    starts (``others()``: threads of other processes runnable now), at least 1. Measured (docs/TRAINING.md,
    "Devices and threads"): beside one other 2-thread job on 2 cores, a VLM policy's sampling step with 2 threads
    took 4-15x its time alone, with 1 thread 1.1-1.6x (every thread of a parallel region waits for the slowest,
    which another job's threads keep from a core)."""
    if threads != AUTO:
        return int(threads)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))  # torchrun's: ranks sharing the cores
    free = max(1, min(share, cores - others()))
    if free < share:
        log.info("threads=auto: %d of this process's %d cores, as other jobs keep %d busy (set threads to choose)",
                 free, share, cores - free)
    return free


HOST_MEMORY = (AUTO, "release", "keep")
RELEASE_FROM = 1 << 20  # bytes: freed blocks from this size go back to the system at once (glibc's M_MMAP_THRESHOLD)
_M_MMAP_THRESHOLD = -3  # (malloc.h)


def host_memory_policy(setting: str, strategy: str) -> str:
    """``host_memory`` as release or keep: ``auto`` is release under FSDP2 (large policies: a rank's peak is then
    its tensors', not what the allocator keeps of freed ones), keep otherwise (small models: see
    :func:`release_freed_host_memory`)."""
    if setting not in HOST_MEMORY:
        raise ConfigError(f"host_memory: {setting!r} is not one of {', '.join(HOST_MEMORY)}")
    if setting != AUTO:
        return setting
    return "release" if strategy == "fsdp2" else "keep"


def release_freed_host_memory(threshold: int = RELEASE_FROM) -> bool:
    """Have the C library's allocator (glibc) serve every block of ``threshold`` bytes or more by its own mapping,
    given back to the system when freed. glibc's default raises that threshold (up to 32 MiB) each time a large
    block is freed, after which activations and gathered layers come from its heaps, which keep freed memory (a
    heap a thread) and fragment. What it saves a rank of a 323M-parameter policy, and what it costs small models
    (every block of a MiB or more mapped anew): docs/BENCHMARKS.md, "FSDP2 against DDP". Whether it was set
    (False where the C library has no ``mallopt``: not glibc)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.info("host_memory=release: this C library (%s) has no mallopt; its allocator is left as it is", name)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, int(threshold)))
