"""A checkpoint's weights are written by safetensors' own writer from the tensors' memory, and its trainer state
(a DDP run's optimizer moments) by torch.save straight into its file: read back equal (float32 and bf16), the
process's memory not growing by the file's size as it writes (a rank saving a policy holds its weights and
optimizer state once), and a full disk one line naming the checkpoint, with no temporary folder left."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from rlcap.data.vocab import SPECIALS, Vocab
from rlcap.files import WriteError
from rlcap.train import checkpoint
from tests.conftest import REPO
from tests.mounts import CAN_MOUNT, NO_MOUNT, tmpfs


def test_weights_read_back_equal(tmp_path):
    weights = {"a.weight": torch.randn(7, 5), "b.bias": torch.randn(3).to(torch.bfloat16),
               "c": torch.arange(6, dtype=torch.int64).reshape(2, 3)}
    checkpoint._write_weights(tmp_path / "w.safetensors", weights)
    back = load_file(tmp_path / "w.safetensors")
    assert set(back) == set(weights)
    for name, tensor in weights.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor)


MEASURE = """
import json, sys, torch
from pathlib import Path
from rlcap.train import checkpoint

def hwm():
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')) * 1024

weights = {f"w{i}": torch.randn(16, 1024, 1024) for i in range(4)}  # 256 MiB
before = hwm()
if sys.argv[2] == "weights":
    checkpoint._write_weights(Path(sys.argv[1]), weights)
else:  # a trainer state: the optimizer's moments under their parameters' indices
    checkpoint._fsync_save(Path(sys.argv[1]), {"optimizer": {"state": {0: {"exp_avg": weights}}}, "step": 3})
print(json.dumps({"weights": sum(w.numel() * 4 for w in weights.values()), "grew": hwm() - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("what", ["weights", "trainer"])
def test_writing_does_not_copy_the_tensors_in_memory(tmp_path, what):
    """The save's peak resident memory grows by far less than the file: the whole file is never made in memory
    (safetensors' ``save``, used before for the weights, built it as bytes beside them: 2x the file at its peak;
    the trainer state went through a BytesIO: 1x)."""
    path = tmp_path / ("w.safetensors" if what == "weights" else "trainer.pt")
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), what], capture_output=True,
                          text=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
                          check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    assert path.stat().st_size > found["weights"]
    assert found["grew"] < found["weights"] / 8, found
    if what == "trainer":
        back = torch.load(path, weights_only=True)
        assert back["step"] == 3 and back["optimizer"]["state"][0]["exp_avg"]["w3"].shape == (16, 1024, 1024)


@pytest.mark.skipif(not CAN_MOUNT, reason=NO_MOUNT)
def test_a_full_disk_is_one_line_and_leaves_no_temporary_folder(tmp_path):
    modules = {"value": torch.nn.Linear(512, 1024)}  # 2 MiB of weights on a 1 MiB file system
    with tmpfs(tmp_path / "small", size="1m") as small:
        with pytest.raises(OSError) as raised:
            checkpoint._write_weights(small / "w.safetensors", modules["value"].state_dict())
        assert raised.value.errno == errno.ENOSPC
        with pytest.raises(WriteError, match=f"^cannot write {small / 'best'}: no space left on device$"):
            checkpoint.save_checkpoint(small / "best", modules, {"model": {"arch": "updown"}},
                                       Vocab([*SPECIALS, "a"]), None, {"step": 1})
        assert not list(small.iterdir())


def test_the_sharded_parts_are_gathered_one_at_a_time(tmp_path):
    """A save takes each sharded part's whole weights as it writes that part (rlcap.train.optimizer.WholeWeights):
    the previous part's are freed before the next is gathered, so rank 0 never holds a policy and its KL reference
    whole together; both are written whole."""
    import weakref

    from rlcap.train.optimizer import Part, WholeWeights

    alive = []

    class Gathered(WholeWeights):
        def take(self, name):
            alive.append([r() is not None for r in held])  # what earlier takes returned, still held by the save
            state = {k: v.clone() for k, v in self.parts[name].module.state_dict().items()}
            held.extend(weakref.ref(t) for t in state.values())
            return state

    held: list = []
    parts = {"value": Part(torch.nn.Linear(3, 2), sharded=True), "reference": Part(torch.nn.Linear(2, 2), sharded=True)}
    vocab = Vocab(list(SPECIALS) + ["a"])
    checkpoint.save_checkpoint(tmp_path / "last", {n: p.module for n, p in parts.items()}, {"model": {"arch": "fc"}},
                               vocab, None, {"step": 1}, whole=Gathered(parts))
    assert alive == [[], [False, False]]
    for name, part in parts.items():
        back = load_file(tmp_path / "last" / f"{name}.safetensors")
        assert all(torch.equal(back[k], v) for k, v in part.module.state_dict().items())
