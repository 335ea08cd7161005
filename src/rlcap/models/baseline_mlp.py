"""The baseline B_phi of PG-SPIDEr ([Liu17]): an MLP on the decoder's hidden state.

``B_phi(g_1:t-1)`` estimates ``E_{g_t}[Q(g_1:t-1, g_t)]`` from the state the word ``g_t`` is
chosen from (``DecodeResult.hidden[:, t]``). [Liu17] stops its gradient at the RNN ("to avoid a
feedback loop"): the caller passes ``hidden.detach()``. MIXER's per-step reward regressor
(Ranzato et al. 2016, a linear map of the hidden state) is the same module with a wider role.
"""

from __future__ import annotations

import torch
from torch import nn


class BaselineMLP(nn.Module):
    """``baseline = mlp(hidden)``: hidden (R, T, H) -> (R, T), one expected reward per step.

    One hidden layer of ``width`` ReLU units. The output layer starts at zero, so the first steps
    see ``B = 0`` (plain Monte-Carlo Q) rather than a random offset while the baseline learns.
    """

    def __init__(self, hidden_dim: int, width: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden_dim, width), nn.ReLU(), nn.Linear(width, 1))
        nn.init.zeros_(self.net[2].weight)
        nn.init.zeros_(self.net[2].bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net(hidden).squeeze(-1).float()  # (R, T)
