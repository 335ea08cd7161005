"""The LSTM update shared by the recurrent captioners.

Each model computes all four gates with as few matrix products as it can (one ``addmm`` per
input, gates stacked as ``(i, f, o, g)``); this function applies the non-linearities.
"""

from __future__ import annotations

import torch


def lstm_update(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM cell update from pre-activations.

    gates: (B, 4H) stacked (input, forget, output, cell-candidate); c: (B, H) previous cell.
    Returns (h, c), each (B, H).
    """
    hidden = c.size(1)
    ifo = torch.sigmoid(gates[:, : 3 * hidden])  # (B, 3H) one kernel for the three sigmoid gates
    g = torch.tanh(gates[:, 3 * hidden :])  # (B, H)
    i, f, o = ifo.chunk(3, dim=1)  # (B, H) each
    c = torch.addcmul(f * c, i, g)  # (B, H)
    h = o * torch.tanh(c)  # (B, H)
    return h, c
