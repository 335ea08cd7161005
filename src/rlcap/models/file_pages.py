"""Weights that are views of the file they were loaded from, and the pages of that file a process holds.

``from_pretrained`` (transformers 5) leaves every weight a view of one private memory map of the folder's
safetensors file; the map lives while any weight of it does, and every page of it that was read stays resident
in the process (counted in its RSS) until the map goes. A frozen image side kept aside for the export
(rlcap.models.base.KeepsFrozenAside) is such a view, and outlives the language model's loaded weights once those
are sharded or moved to an accelerator. Nothing reads it between the exports, so its pages, and those of the
language model that loading and sharding read, need not be resident: :func:`drop_clean_pages` tells the kernel
(``madvise(MADV_DONTNEED)``) to drop them. The weights keep their values: a page of a private file map that was
never written is the file's, and the next read takes it from the file again (the page cache, one copy for every
process on the machine). A map one of whose pages was written (a weight trained in place: its page became the
process's own) is never dropped, which would lose the write: :func:`file_maps` reads each map's ``Anonymous``
count from ``/proc/self/smaps``.

:func:`save_dropping_pages` writes such weights into a safetensors file one at a time, dropping each one's pages
once written, so that a process never holds more than one of them read (the export of an image side kept aside:
rlcap.models.hf.export).

Linux only (``/proc/self/smaps`` and ``madvise``); elsewhere :func:`file_maps` finds no map and callers copy."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import mmap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SMAPS = Path("/proc/self/smaps")


@dataclass(frozen=True)
class FileMap:
    """One memory map of a file in this process: its addresses ``[start, end)``, the file, and how many of its
    bytes are resident (``rss``) and written (``anonymous``: pages that became the process's own)."""

    start: int
    end: int
    path: str
    rss: int
    anonymous: int

    @property
    def clean(self) -> bool:
        """Whether every page of the map is the file's (none written): dropping them loses nothing."""
        return self.anonymous == 0


def file_maps() -> list[FileMap]:
    """This process's memory maps of regular files (``/proc/self/smaps``); none where there is no such file."""
    if not SMAPS.exists():
        return []
    found: list[FileMap] = []
    head: list[str] | None = None
    sizes: dict[str, int] = {}

    def close() -> None:
        if head is not None and len(head) >= 6 and head[5].startswith("/"):
            start, end = (int(a, 16) for a in head[0].split("-"))
            found.append(FileMap(start, end, " ".join(head[5:]), sizes.get("Rss", 0), sizes.get("Anonymous", 0)))

    for line in SMAPS.read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            close()
            head, sizes = fields, {}
        elif len(fields) >= 2 and fields[0].endswith(":") and fields[1].isdigit():
            sizes[fields[0][:-1]] = int(fields[1]) * 1024
    close()
    return found


def maps_holding(tensors: Iterable[torch.Tensor], maps: list[FileMap] | None = None) -> dict[FileMap, list[torch.Tensor]]:
    """The file maps that hold the data of ``tensors`` (on the CPU), each with its tensors; tensors in memory of
    their own are in none."""
    maps = file_maps() if maps is None else maps
    held: dict[FileMap, list[torch.Tensor]] = {}
    for tensor in tensors:
        if tensor.device.type != "cpu" or tensor.numel() == 0:
            continue
        address = tensor.data_ptr()
        for m in maps:
            if m.start <= address < m.end:
                held.setdefault(m, []).append(tensor)
                break
    return held


def span(t: torch.Tensor) -> tuple[int, int]:
    """The addresses ``[start, end)`` of a contiguous tensor's data."""
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


@functools.cache
def _madvise() -> Any:
    """libc's ``madvise``, found once (``find_library`` runs ``ldconfig``: milliseconds a call)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc.madvise


def drop(m: FileMap, start: int | None = None, end: int | None = None) -> None:
    """Drop the resident pages of the clean map ``m`` (``madvise(MADV_DONTNEED)``), or those of its pages that lie
    within ``[start, end)``: read again from its file when next used. (Within: a page that a neighbouring weight
    shares stays, else reading that neighbour would fault it in, and the kernel maps the pages around a fault
    with it, the dropped ones too.)"""
    if not m.clean:
        raise ValueError(f"the map of {m.path} at {m.start:#x} holds written pages: dropping them would lose them")
    page = mmap.PAGESIZE
    lo = m.start if start is None else max(m.start, -(-start // page) * page)
    hi = m.end if end is None else min(m.end, end // page * page)
    if hi > lo and _madvise()(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.MADV_DONTNEED) != 0:
        raise OSError(ctypes.get_errno(), f"madvise(MADV_DONTNEED) of the map of {m.path}")


def drop_clean_pages(modules: torch.nn.Module, whole_maps: bool = True) -> list[torch.Tensor]:
    """Drop the resident pages of every clean file map that holds a weight of ``modules`` (module docstring): the
    whole map (``whole_maps``: the other weights once loaded from it let go already), or only the pages of
    ``modules``' weights (what a reader of them just read). The weights keep their values. Returns the weights left
    in a map that could not be dropped (one with written pages, or anywhere without ``/proc/self/smaps``: there,
    every weight on the CPU is returned), for a caller to copy if it must."""
    tensors = [*modules.parameters(), *modules.buffers()]
    if not SMAPS.exists():
        return [t for t in tensors if t.device.type == "cpu"]
    left: list[torch.Tensor] = []
    for m, held in maps_holding(tensors).items():
        if not m.clean:
            left.extend(held)
        elif whole_maps:
            drop(m)
        else:
            for t in held:
                drop(m, *span(t))
    return left


SAFETENSORS_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
                      torch.bool: "BOOL"}


def save_dropping_pages(weights: Mapping[str, torch.Tensor], path: str | Path,
                        metadata: Mapping[str, str] | None = None) -> None:
    """Write ``weights`` (contiguous, on the CPU) into the safetensors file ``path`` in safetensors' layout (the
    header's length, its JSON, the weights' bytes in the order safetensors' own writer gives them: larger elements
    first, then by name, so each is aligned to its element), one weight at a time from its own memory; a weight
    that is a view of a clean file map (module docstring) has its pages dropped once written, so the writer holds
    one such weight read at a time, not all of them (safetensors' ``save_file`` reads every one before the first
    is written). ``safetensors.torch.load_file`` reads the file back equal (tests/models/test_file_pages.py)."""
    order = sorted(weights, key=lambda k: (-weights[k].element_size(), k))
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in order:
        t = weights[name]
        if t.dtype not in SAFETENSORS_DTYPES or t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"{name}: a contiguous CPU tensor of {sorted(map(str, SAFETENSORS_DTYPES))} is written, "
                             f"not {t.dtype} on {t.device}")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset,
                                                                                                       offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # (the data starts 8-aligned, as safetensors' writer pads it)
    maps = maps_holding(weights.values())
    clean = {t.data_ptr(): m for m, held in maps.items() if m.clean for t in held}
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in order:
            t = weights[name]
            if t.numel():
                f.write(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
            if (m := clean.get(t.data_ptr())) is not None:
                f.flush()
                drop(m, *span(t))
