"""A sharded policy does not keep the pages of the file its weights were loaded from resident: ``from_pretrained``
leaves every weight a view of one memory map of the folder's safetensors file, and the image side a policy keeps
aside (frozen, for its export) outlives the language model's loaded weights once FSDP2 has sharded them, holding the
whole map, and every page of it that sharding read, in the process. ``shard_parts`` lets those pages go
(rlcap.models.base.release_loaded_file, rlcap.models.file_pages): the side stays a view of the file, its values
the same, read again from the file when used; the export's read of it is let go again. A map with a written page is
never dropped (its writes would be lost): its weights are copied instead.

Residency is read page by page from ``/proc/self/pagemap`` (bit 63: the page is present in this process)."""

from __future__ import annotations

import gc
import mmap
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlcap.models.base import release_loaded_file
from rlcap.models.file_pages import drop_clean_pages, file_maps, maps_holding, span

pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not Path("/proc/self/pagemap").exists(), reason="Linux's /proc/self/pagemap")


def resident(start: int, end: int) -> int:
    """Bytes of the pages overlapping ``[start, end)`` present in this process."""
    page = mmap.PAGESIZE
    first, last = start // page, -(-end // page)
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = f.read((last - first) * 8)
    return page * sum(int.from_bytes(entries[i:i + 8], "little") >> 63 for i in range(0, len(entries), 8))


def resident_of(tensors) -> int:
    return sum(resident(*span(t)) for t in tensors)


def resident_within(tensors) -> int:
    """Bytes present of the pages that lie wholly within one of ``tensors`` (those a neighbour shares aside)."""
    page = mmap.PAGESIZE
    spans = [(-(-lo // page) * page, hi // page * page) for lo, hi in map(span, tensors)]
    return sum(resident(lo, hi) for lo, hi in spans if hi > lo)


def file_resident(folder: Path) -> int:
    """Bytes of ``folder``'s safetensors files present in this process (every map of them)."""
    return sum(resident(m.start, m.end) for m in file_maps() if str(folder) in m.path and ".safetensors" in m.path)


def side_weights(policy) -> list[torch.Tensor]:
    side = policy.frozen_aside()[0]
    return [*side.parameters(), *side.buffers()]


def _shard(rank: int, folder: Path, port: int, found: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=1)
    try:
        from rlcap.models.hf.vlm import HFVLMCaptioner
        from rlcap.train.optimizer import Part, shard_parts

        policy = HFVLMCaptioner(folder)
        before = {k: v.clone() for k, v in policy.frozen_aside()[0].state_dict().items()}
        found["read after loading"] = file_resident(folder) > 0
        session = type("Session", (), {"parts": {"policy": Part(policy)}})()
        shard_parts(session, "fp32")
        gc.collect()
        found["resident after sharding"] = file_resident(folder)
        found["side still the file's"] = len(maps_holding(side_weights(policy))) == 1
        after = policy.frozen_aside()[0].state_dict()
        found["same side"] = after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    finally:
        dist.destroy_process_group()


def test_sharding_lets_the_loaded_files_pages_go(tmp_path):
    from tests.models.vlm_matrix import tiny_vlm_run

    _, folder, _ = tiny_vlm_run(tmp_path)
    found = mp.Manager().dict()
    mp.spawn(_shard, args=(Path(folder).resolve(), 29500 + os.getpid() % 1000 + 7, found), nprocs=1)
    assert dict(found) == {"read after loading": True, "resident after sharding": 0, "side still the file's": True,
                           "same side": True}


def test_reading_the_side_again_and_letting_it_go(tmp_path):
    """After a reader of the side (the export), only the side's pages go: the language model's, in use, stay."""
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.models.vlm_matrix import tiny_vlm_run

    _, folder, _ = tiny_vlm_run(tmp_path)
    policy = HFVLMCaptioner(Path(folder).resolve())
    side, language = side_weights(policy), list(policy.parameters())
    values = [t.clone() for t in side] + [t.clone() for t in language]  # (every page read: all present)
    assert resident_within(side) > 0 and resident_of(language) > 0
    assert drop_clean_pages(policy.frozen_aside()[0], whole_maps=False) == []
    assert resident_within(side) == 0
    assert resident_of(language) > 0
    assert all(torch.equal(t, v) for t, v in zip(side + language, values, strict=True))


def test_a_map_with_a_written_page_is_copied_not_dropped(tmp_path):
    """A weight written in place made its pages the process's own: dropping the map would lose the write, so the
    side is copied into memory of its own instead, and the write stays."""
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.models.vlm_matrix import tiny_vlm_run

    _, folder, _ = tiny_vlm_run(tmp_path)
    policy = HFVLMCaptioner(Path(folder).resolve())
    side = side_weights(policy)
    written = next(p for p in policy.parameters() if p.numel() * p.element_size() >= 4 * mmap.PAGESIZE)
    with torch.no_grad():
        written.add_(1.0)
    expected = written.detach().clone()
    values = [t.clone() for t in side]
    assert not next(iter(maps_holding([written]))).clean
    release_loaded_file(policy.frozen_aside()[0])
    assert maps_holding(side_weights(policy)) == {}  # (copied: in no file map)
    assert torch.equal(written, expected)
    assert all(torch.equal(t, v) for t, v in zip(side_weights(policy), values, strict=True))


@pytest.mark.parametrize("family", ["qwen2_vl", "florence2"])
def test_a_checkpoints_export_lets_the_sides_pages_go_again(tmp_path, family):
    """The export reads the image side kept aside to write ``hf/``, and lets its pages go: a decoder-only VLM's
    tower file one weight at a time (rlcap.models.file_pages.save_dropping_pages), Florence-2's whole model through
    ``save_pretrained``, after which the architecture's export lets them go (rlcap.models.base.let_go_of_aside)."""
    from rlcap import api
    from rlcap.config import to_dict
    from rlcap.data.hf_text import TokenizerVocab
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from rlcap.train.checkpoint import own_model_path, save_checkpoint
    from tests.models.vlm_matrix import tiny_vlm_run

    _, folder, _ = tiny_vlm_run(tmp_path, family)
    policy = (Seq2SeqVLMCaptioner if family == "florence2" else HFVLMCaptioner)(Path(folder).resolve())
    config = own_model_path({**to_dict(api.load_run_config(None, ["model.arch=hf", f"model.path={folder}"])),
                             "feature_dims": {"fc": 0, "att": 0, "image_size": None}})
    side = side_weights(policy)
    assert resident_within(side) > 0  # (read when loaded)
    saved = save_checkpoint(tmp_path / "last", {"policy": policy}, config, TokenizerVocab.from_folder(folder), None,
                            {"step": 1})
    assert (saved / "hf").is_dir()
    assert resident_within(side) == 0
