"""R^2 of a critic against the return, position by position (rl/credit.py), by hand."""

import math

import pytest
import torch

from rlcap.rl.credit import value_fit_by_position

NAN = float("nan")


def test_value_fit_by_position_by_hand():
    # three captions of 3, 2 and 1 steps; returns R = [1, 3, 2]; padding holds garbage
    values = torch.tensor([[1.0, 1.5, 0.5], [2.0, 2.5, NAN], [2.0, 9.0, 9.0]])
    returns = torch.tensor([1.0, 3.0, 2.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    fit = value_fit_by_position(values, returns, mask)
    # t = 0: mean R 2, residuals^2 0 + 1 + 0 = 1, deviations^2 1 + 1 + 0 = 2 -> 1 - 1/2
    # t = 1: rows 0 and 1, mean 2, residuals^2 0.25 + 0.25, deviations^2 1 + 1 -> 1 - 0.5/2
    # t = 2: one row, undefined
    assert fit.by_position[:2].tolist() == pytest.approx([0.5, 0.75])
    assert math.isnan(fit.by_position[2].item())
    assert fit.rows.tolist() == [3, 2, 1]
    # overall: the six valid steps, R = 1, 3, 2, 1, 3, 1 (mean 11/6): deviations^2 29/6, residuals^2 1.75
    assert fit.overall.item() == pytest.approx(1 - 1.75 / (29 / 6))


def test_perfect_mean_and_worse_critics():
    returns = torch.tensor([0.0, 1.0, 2.0, 3.0])
    mask = torch.ones(4, 2, dtype=torch.bool)
    perfect = value_fit_by_position(returns[:, None].expand(4, 2), returns, mask)
    assert perfect.by_position.tolist() == [1.0, 1.0] and perfect.overall.item() == 1.0
    mean = value_fit_by_position(torch.full((4, 2), 1.5), returns, mask)
    assert mean.by_position.tolist() == [0.0, 0.0] and mean.overall.item() == 0.0
    # a critic that predicts the reverse order: residuals^2 9 + 1 + 1 + 9 = 20 against deviations^2 5
    reverse = value_fit_by_position(returns.flip(0)[:, None].expand(4, 2), returns, mask)
    assert reverse.by_position.tolist() == [-3.0, -3.0]


def test_equal_returns_give_nan_and_bad_shapes_fail():
    fit = value_fit_by_position(torch.zeros(2, 2), torch.tensor([1.0, 1.0]), torch.ones(2, 2))
    assert all(math.isnan(x) for x in fit.by_position.tolist()) and math.isnan(fit.overall.item())
    with pytest.raises(ValueError, match="returns of shape"):
        value_fit_by_position(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="values of the mask's shape"):
        value_fit_by_position(torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="valid steps followed by padding"):
        value_fit_by_position(torch.zeros(2, 2), torch.zeros(2), torch.tensor([[0, 1], [1, 1]]))
