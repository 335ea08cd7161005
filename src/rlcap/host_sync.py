"""Host synchronisations: counting them, and the one way values cross between the host and the device.

On a GPU, every read of a tensor's value on the host (``.item()``, ``float(t)``, ``bool(t)``, ``.tolist()``,
``nonzero``, a boolean index, a copy to the CPU) stops the CPU until the device's queue has drained: the
kernels queued behind it cannot be launched ahead. A training step that makes none, but for the one
transfer of the sampled tokens to the CPU rewards, keeps the GPU fed (docs/TRAINING.md).

:func:`count_host_syncs` counts those reads in a block of code, on any device, the CPU included (where
they cost nothing but are the same calls): a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
sees the dispatches whose output size or value the host must know, and the Python-level reads that
bypass the dispatcher (``tolist``, ``numpy``, ``cpu``) are wrapped while it is active. Work on values
already on the host (a CPU reward scoring decoded captions, between :func:`to_host` and
:func:`to_device`) runs under :func:`on_host`, which pauses the count: on a GPU it touches no device
tensor.
"""

from __future__ import annotations

import functools
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# dispatches whose result the host must read: a value, or a size that depends on values
_READS_VALUE = {
    "aten._local_scalar_dense",  # .item(), float(t), int(t), bool(t)
    "aten.item", "aten.is_nonzero",  # the same under inference_mode, where they reach the mode undecomposed
    "aten.nonzero", "aten.nonzero_static", "aten.masked_select", "aten._unique", "aten._unique2",
    "aten.unique_dim", "aten.unique_consecutive", "aten.argwhere",
}
_PY_READS = ("tolist", "numpy", "__array__", "cpu")


@dataclass
class SyncCount:
    """What :func:`count_host_syncs` saw: the number of synchronising reads, by kind, and where each came from."""

    by_kind: Counter = field(default_factory=Counter)
    sites: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def add(self, kind: str) -> None:
        self.by_kind[kind] += 1
        frames = [f for f in traceback.extract_stack()[:-1] if "host_sync.py" not in f.filename
                  and "torch/" not in f.filename]
        self.sites.append(f"{kind} at " + " < ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}"
                                                      for f in reversed(frames[-4:])))

    def __str__(self) -> str:
        return f"{self.total} host synchronisations: " + "; ".join(self.sites)


_active: list[SyncCount] = []
_paused = [0]


def _bool_index(func_name: str, args: tuple) -> bool:
    """aten.index / index_put with a boolean mask: the kernel finds the mask's true positions on the host."""
    if func_name not in ("aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


class _CountMode(TorchDispatchMode):
    def __init__(self, host_resident: Callable[[], Iterable[torch.Tensor]]) -> None:
        super().__init__()
        self.host_resident = host_resident

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.replace("::", ".")
        if not _paused[0] and _active:
            if name == "aten._local_scalar_dense" and any(args[0] is t for t in self.host_resident()):
                pass  # a number that lives on the host on every device (an optimizer's step count)
            elif name in _READS_VALUE or _bool_index(name, args):
                _active[-1].add(name)
            elif name == "aten.repeat_interleave" and (kwargs or {}).get("output_size") is None \
                    and isinstance(args[0], torch.Tensor):
                _active[-1].add(name)
        return func(*args, **(kwargs or {}))


def _wrap(name: str):
    original = getattr(torch.Tensor, name)

    @functools.wraps(original)
    def read(self, *args, **kwargs):
        if not _paused[0] and _active:
            _active[-1].add(f"Tensor.{name}")
        _paused[0] += 1  # the read's own dispatches are this one read
        try:
            return original(self, *args, **kwargs)
        finally:
            _paused[0] -= 1

    return original, read


def optimizer_host_state(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.Tensor]:
    """The step counts of optimizers that keep them on the host on a GPU too (Adam and AdamW unless
    ``capturable``): reading them waits for no device."""
    steps = []
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            if group.get("capturable", False):
                continue
            for param in group["params"]:
                step = optimizer.state.get(param, {}).get("step")
                if isinstance(step, torch.Tensor) and step.device.type == "cpu":
                    steps.append(step)
    return steps


@contextmanager
def count_host_syncs(host_resident: Iterable[torch.Tensor] | Callable[[], Iterable[torch.Tensor]] = ()
                     ) -> Iterator[SyncCount]:
    """Count the host synchronisations of the code run inside: ``with count_host_syncs() as n: ...; n.total``.

    ``host_resident``: tensors that stay on the host whatever the device (:func:`optimizer_host_state`), or a
    function giving them at each read (an optimizer makes its state at its first step); their reads are not
    counted."""
    count = SyncCount()
    originals = {}
    if not _active:
        for name in _PY_READS:
            originals[name], wrapped = _wrap(name)
            setattr(torch.Tensor, name, wrapped)
    _active.append(count)
    try:
        resident = host_resident if callable(host_resident) else (lambda fixed=list(host_resident): fixed)
        with _CountMode(resident):
            yield count
    finally:
        _active.pop()
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


@contextmanager
def on_host() -> Iterator[None]:
    """Work on values already on the host (decoded captions, CPU rewards): not counted."""
    _paused[0] += 1
    try:
        yield
    finally:
        _paused[0] -= 1


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """The device -> host copy of ``tensor`` (one synchronisation on a GPU: it waits for the values)."""
    if _active and not _paused[0]:
        _active[-1].add("to_host")
    with on_host():
        return tensor.detach().cpu()


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A host -> device copy that does not wait for the device (``non_blocking``: the values are staged
    and the copy queued behind the kernels already launched)."""
    return tensor.to(device, non_blocking=True)


def device_check(failed: torch.Tensor, error: Callable[[], Exception], brief: str) -> None:
    """Raise when the 0-d bool ``failed`` is true, without stopping the host on a GPU.

    On the CPU, where reading it waits for nothing, ``error()`` is raised at once (its message may read
    the tensors it names). On a GPU the check is a device-side assertion (``torch._assert_async``) with
    the ``brief`` message: it fails the run at its next synchronisation instead of waiting here."""
    if failed.device.type == "cpu":
        with on_host():
            if bool(failed):
                raise error()
    else:
        torch._assert_async(~failed, brief)
