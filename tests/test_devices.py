"""Devices: the names a run accepts, every tensor made on the device of its inputs (a static check of
the training code), batches moved whole, and every method's first steps with the device given
explicitly (tests/methods/test_same_losses.py runs them with device=cpu). No GPU can be had here, so the CUDA path itself is exercised by benchmarks/gpu_check.py
where CUDA is present."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rlcap.data.feats import Feats
from rlcap.data.loader import Batch
from rlcap.devices import model_device, resolve_device
from rlcap.errors import ConfigError
from rlcap.methods import load_run_config

SRC = Path(__file__).resolve().parents[1] / "src" / "rlcap"
FACTORY = re.compile(r"torch\.(zeros|ones|full|arange|tensor|empty|rand|randn|randint|randperm|eye|linspace)\(")


def factory_calls_without_device(source: str) -> list[int]:
    """Lines of ``source`` that create a tensor with no ``device=`` and no ``# cpu`` reason (on the line
    or the one above): such a tensor lands on the CPU whatever the run's device."""
    lines, found = source.splitlines(), []
    for m in FACTORY.finditer(source):
        depth, i = 0, m.end() - 1
        while i < len(source):
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            if depth == 0:
                break
            i += 1
        line_no = source.count("\n", 0, m.start()) + 1
        nearby = lines[line_no - 1] + (lines[line_no - 2] if line_no > 1 else "")
        if "device" not in source[m.start():i + 1] and "# cpu" not in nearby:
            found.append(line_no)
    return found


def test_the_check_finds_a_tensor_made_without_a_device():
    assert factory_calls_without_device("x = torch.zeros(3)\ny = torch.zeros(3, device=z.device)\n") == [1]
    assert factory_calls_without_device("# cpu: data\nx = torch.arange(\n    4)\n") == []
    assert factory_calls_without_device("x = torch.full((2, 3), 0)  # cpu: a reason\n") == []
    assert factory_calls_without_device("x = torch.full((2,\n 3), 0)  # cpu: on the wrong line\n") == [1]


@pytest.mark.parametrize("package", ["models", "decoding", "rl", "rewards", "train", "methods"])
def test_every_tensor_is_made_on_a_device(package):
    missing = [f"{path.relative_to(SRC)}:{line}" for path in sorted((SRC / package).rglob("*.py"))
               for line in factory_calls_without_device(path.read_text(encoding="utf-8"))]
    assert missing == [], "tensors made without device= (or a '# cpu: why' comment): " + ", ".join(missing)


def test_device_names():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match=r"device: 'gpu' is not one of auto, cpu, cuda, cuda:N, mps"):
        load_run_config(None, ["device=gpu"])
    assert load_run_config(None, ["device=cuda:1"]).device == "cuda:1"  # checked against the machine at start
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device: cuda asked for, but this torch .* sees no CUDA device"):
            resolve_device("cuda")


def test_a_batch_moves_whole_but_its_index():
    feats = Feats(torch.ones(2, 3), torch.ones(2, 4, 3), torch.ones(2, 4, dtype=torch.bool))
    batch = Batch(torch.tensor([5, 6]), ["a", "b"], feats, torch.ones(2, 4, dtype=torch.long), [["x"], ["y"]])
    moved = batch.to("meta")
    assert moved.feats.fc.device.type == moved.tokens.device.type == "meta" and moved.index.device.type == "cpu"
    assert model_device(torch.nn.Linear(2, 2)) == torch.device("cpu") and model_device(torch.nn.ReLU()).type == "cpu"


def test_eval_and_caption_take_a_device(tiny_xe, tmp_path, capsys):
    from rlcap.cli import main

    _, _, best = tiny_xe(1)
    assert main(["eval", str(best), "--device", "cpu", "--out", str(tmp_path / "eval")]) == 0
    assert (tmp_path / "eval" / "scores.json").is_file()
    capsys.readouterr()
    assert main(["eval", str(best), "--device", "gpu", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err == "rlcap eval: error: --device: 'gpu' is not one of auto, cpu, cuda, cuda:N, mps\n"


def test_features_take_a_device(tmp_path, capsys):
    from PIL import Image

    from rlcap.cli import main

    for i in range(2):
        Image.new("RGB", (40, 40), (40 * i, 90, 200)).save(tmp_path / f"{i}.png")
    assert main(["features", str(tmp_path), "--out", str(tmp_path / "f.h5"), "--image-size", "32",
                 "--device", "cpu"]) == 0
    assert "encoded 2 images" in capsys.readouterr().out
    assert main(["features", str(tmp_path), "--out", str(tmp_path / "g.h5"), "--image-size", "32",
                 "--device", "tpu"]) == 2
    assert capsys.readouterr().err.strip().endswith("--device: 'tpu' is not one of auto, cpu, cuda, cuda:N, mps")
