"""optimizer_step: gradient clipping by global norm or by value, by hand."""

from types import SimpleNamespace

import pytest
import torch

from rlcap.errors import ConfigError
from rlcap.train.config import OptimConfig
from rlcap.train.session import optimizer_step


def _step(mode: str, clip: float) -> list[float]:
    model = torch.nn.Linear(2, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    cfg = SimpleNamespace(optim=OptimConfig(grad_clip=clip, grad_clip_mode=mode))
    session = SimpleNamespace(cfg=cfg, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1.0))
    loss = model(torch.tensor([[10.0, 0.01]])).sum()  # gradient (10, 0.01)
    optimizer_step(session, loss)
    return model.weight.detach().view(-1).tolist()


def test_value_clipping_clamps_every_element():
    assert _step("value", 0.1) == pytest.approx([-0.1, -0.01])


def test_norm_clipping_scales_the_whole_gradient():
    scale = 0.1 / (10.0**2 + 0.01**2) ** 0.5
    assert _step("norm", 0.1) == pytest.approx([-10.0 * scale, -0.01 * scale], rel=1e-5)


def test_no_clipping():
    assert _step("norm", 0.0) == pytest.approx([-10.0, -0.01])


def test_unknown_clip_mode_is_rejected():
    with pytest.raises(ConfigError, match="grad_clip_mode"):
        OptimConfig(grad_clip_mode="sign").validate()
