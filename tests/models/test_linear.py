"""The hot-path matrix products equal F.linear / torch.addmm with and without autograd."""

import pytest
import torch
import torch.nn.functional as F

from rlcap.models.linear import Linear, addmm, linear


@pytest.mark.parametrize("grad", [True, False])
def test_linear_and_addmm_match_torch(grad):
    gen = torch.Generator().manual_seed(0)
    x3 = torch.randn(4, 5, 8, generator=gen)
    x = torch.randn(8, 6, generator=gen).t()  # (6, 8), not contiguous
    w, b = torch.randn(20, 8, generator=gen), torch.randn(20, generator=gen)
    acc = torch.randn(6, 40, generator=gen)[:, ::2]  # (6, 20), not contiguous
    with torch.set_grad_enabled(grad):
        torch.testing.assert_close(linear(x3, w, b), F.linear(x3, w, b))
        torch.testing.assert_close(linear(x, w), F.linear(x, w))
        torch.testing.assert_close(addmm(acc, x, w), torch.addmm(acc, x, w.t()))


def test_linear_module_keeps_nn_linear_parameters_and_gradients():
    layer = Linear(8, 3)
    assert set(layer.state_dict()) == {"weight", "bias"}
    layer(torch.randn(2, 8)).sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None
