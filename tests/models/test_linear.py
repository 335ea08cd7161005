"""The hot-path matrix products equal F.linear / torch.addmm with and without autograd, and
weight_grads_once gives the gradients of plain autograd."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from rlcap.models.linear import Linear, addmm, linear, weight_grads_once


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


def _grads(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _unrolled(model: torch.nn.Sequential, x: torch.Tensor, steps: int, once: bool) -> torch.Tensor:
    """A recurrence that calls every layer once per step, as a decoder does; the first layer is
    also called once outside the block, in the same graph."""
    h = model[0](x)
    ctx = weight_grads_once(model) if once else contextlib.nullcontext()
    outs = []
    with ctx:
        for t in range(steps):
            h = torch.tanh(model[1](model[0](h) * 0.5 + h))  # (R, 8)
            outs.append(h[:, :3] * (t + 1))
    return torch.stack(outs).pow(2).sum() + h.sum()


def test_weight_grads_once_gives_plain_autograd_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Linear(8, 8), Linear(8, 8, bias=False))
    x = torch.randn(5, 8, requires_grad=True)
    plain = _grads(model, _unrolled(model, x, 6, once=False))
    x_plain = x.grad.clone()
    x.grad = None
    once = _grads(model, _unrolled(model, x, 6, once=True))
    assert set(once) == set(plain) == {"0.weight", "0.bias", "1.weight"}
    for name in plain:
        torch.testing.assert_close(once[name], plain[name], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, x_plain)
    assert model[0]._stash is None, "the block leaves the layers as they were"


def test_weight_grads_once_skips_frozen_layers_and_no_grad():
    torch.manual_seed(0)
    model = torch.nn.Sequential(Linear(8, 8), Linear(8, 8))
    model[1].requires_grad_(False)
    x = torch.randn(5, 8)
    plain = _grads(model, _unrolled(model, x, 3, once=False))
    once = _grads(model, _unrolled(model, x, 3, once=True))
    assert set(once) == set(plain) == {"0.weight", "0.bias"}
    torch.testing.assert_close(once["0.weight"], plain["0.weight"], rtol=1e-5, atol=1e-6)
    with torch.no_grad(), weight_grads_once(model):
        assert model[0]._stash is None  # nothing to collect without autograd
        torch.testing.assert_close(model[0](x), F.linear(x, model[0].weight, model[0].bias))


def test_weight_grads_once_with_a_retained_graph_collects_each_backward():
    """Two backward passes through one retained graph give twice the gradient, as plain autograd."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(Linear(8, 8), Linear(8, 8))
    x = torch.randn(5, 8)
    loss = _unrolled(model, x, 4, once=True)
    loss.backward(retain_graph=True)
    first = model[1].weight.grad.clone()
    loss.backward()
    torch.testing.assert_close(model[1].weight.grad, 2 * first)
