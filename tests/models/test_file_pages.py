"""rlcap.models.file_pages: the maps /proc/self/smaps lists, and safetensors files written one weight at a time
(read back equal by safetensors, in its writer's layout), dropping the pages of weights that are views of a file."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from rlcap.models.file_pages import drop, file_maps, maps_holding, save_dropping_pages

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's /proc/self/smaps")


def weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"b.weight": torch.randn(300, 70, generator=g), "a.half": torch.randn(33, generator=g).half(),
            "c.bf16": torch.randn(5, 7, generator=g).bfloat16(), "d.ids": torch.arange(9),
            "e.flag": torch.tensor([True, False, True]), "f.scalar": torch.tensor(2.5), "g.empty": torch.zeros(0, 4)}


def test_written_one_at_a_time_reads_back_as_safetensors_writes(tmp_path):
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    save_dropping_pages(weights(), ours, metadata={"format": "pt"})
    save_file(weights(), str(theirs), metadata={"format": "pt"})
    read = load_file(str(ours))
    assert read.keys() == weights().keys()
    assert all(read[k].dtype == v.dtype and torch.equal(read[k], v) for k, v in weights().items())
    with safe_open(str(ours), "pt") as a, safe_open(str(theirs), "pt") as b:
        assert a.metadata() == b.metadata() == {"format": "pt"}
        assert list(a.keys()) == list(b.keys())
    assert ours.stat().st_size == theirs.stat().st_size  # (the same layout: the header's length aside, its bytes)


def test_views_of_a_file_are_written_and_their_pages_dropped(tmp_path):
    """Weights read from a file's map (as from_pretrained leaves them) are written, their pages then not present."""
    source = tmp_path / "source.safetensors"
    big = {f"w{i}": torch.randn(64, 1024) for i in range(4)}  # 256 KiB each
    save_file(big, str(source))
    storage = torch.UntypedStorage.from_file(str(source), shared=False, nbytes=source.stat().st_size)
    header_len = int.from_bytes(source.read_bytes()[:8], "little")
    header = json.loads(source.read_bytes()[8:8 + header_len])
    views = {k: torch.empty(0).set_(storage, (8 + header_len + header[k]["data_offsets"][0]) // 4, (64, 1024))
             for k in big}
    assert all(torch.equal(views[k], big[k]) for k in big)  # (every page read)
    (m,) = maps_holding(views.values())
    assert m.clean and m.path == str(source)
    save_dropping_pages(views, tmp_path / "out.safetensors")
    after = next(x for x in file_maps() if x.start == m.start)
    assert after.rss <= 2 * mmap.PAGESIZE * len(views)  # (each weight's pages dropped once written, but those it
    # shares with a neighbour)
    assert all(torch.equal(load_file(str(tmp_path / "out.safetensors"))[k], big[k]) for k in big)
    assert all(torch.equal(views[k], big[k]) for k in big)  # (the values read again from the file)


def test_a_map_with_a_written_page_is_never_dropped(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(bytes(4 * mmap.PAGESIZE))
    storage = torch.UntypedStorage.from_file(str(source), shared=False, nbytes=4 * mmap.PAGESIZE)
    t = torch.empty(0, dtype=torch.uint8).set_(storage)
    t[0] = 7  # (the page becomes the process's own)
    (m,) = maps_holding([t])
    assert not m.clean
    with pytest.raises(ValueError, match="written pages"):
        drop(m)
    assert int(t[0]) == 7
