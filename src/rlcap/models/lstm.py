"""LSTM pieces shared by the recurrent captioners: the gate update and the word-gate lookup.

Each model computes all four gates with as few matrix products as it can (one ``addmm`` per
input, gates stacked as ``(i, f, o, g)``); :func:`lstm_update` applies the non-linearities.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1, within 2e-7 of ``torch.tanh``.

    On CPU, ``torch.tanh`` is about 5x slower than ``torch.sigmoid`` (torch 2.13, AVX-512); this
    form is ~3x faster. (UpDown's attention goes further and needs only the sigmoid.)
    """
    return torch.sigmoid(x * 2.0).mul(2.0).sub_(1.0)


def lstm_update(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM cell update from pre-activations.

    gates: (B, 4H) stacked (input, forget, output, cell-candidate); c: (B, H) previous cell.
    Returns (h, c), each (B, H).
    """
    hidden = c.size(1)
    ifo = torch.sigmoid(gates[:, : 3 * hidden])  # (B, 3H) one kernel for the three sigmoid gates
    g = tanh(gates[:, 3 * hidden :])  # (B, H)
    i, f, o = ifo.chunk(3, dim=1)  # (B, H) each
    c = torch.addcmul(f * c, i, g)  # (B, H)
    h = o * tanh(c)  # (B, H)
    return h, c


class WordGates(nn.Module):
    """A word's contribution to LSTM gates: embedding, dropout, input projection. (...) ids -> (..., 4H).

    In evaluation (no dropout, no autograd) the projection depends on the word alone, so it is
    read from a (V, 4H) table instead of being multiplied out at every decoding step. The table is
    rebuilt whenever a parameter changes (new storage or in-place update, e.g. an optimizer step).
    A step compiled by ``torch.compile`` multiplies it out: whether the table is current is a question
    about the parameters' storage, which a graph cannot ask.
    """

    def __init__(self, vocab_size: int, embed_dim: int, gate_dim: int, dropout: float, bias: bool = True):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(embed_dim, gate_dim, bias=bias)
        self._table: torch.Tensor | None = None
        self._table_key: tuple[tuple[int, int], ...] = ()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.training or torch.is_grad_enabled() or torch.compiler.is_compiling():
            return self.proj(self.drop(self.embed(tokens)))  # (..., 4H)
        return F.embedding(tokens, self._gate_table())  # (..., 4H)

    def _gate_table(self) -> torch.Tensor:
        key = tuple((p.data_ptr(), p._version) for p in self.parameters())
        if self._table is None or key != self._table_key:
            with torch.no_grad():
                self._table = self.proj(self.embed.weight)  # (V, 4H)
            self._table_key = key
        return self._table


class LSTM(nn.LSTM):
    """``torch.nn.LSTM`` (same weights, same state dict) that runs in fp32 on the CPU under autocast.

    oneDNN, which runs ``nn.LSTM`` on the CPU, has no bf16 or fp16 LSTM on CPUs without native bf16
    instructions (AVX-512-BF16 or AMX): there autocast's cast makes every call fail ("could not create a
    primitive descriptor"). So on the CPU the layer leaves autocast and computes in fp32; on a GPU it
    runs under autocast as any layer.
    Packed sequences take another path, which works under autocast, and are left to it."""

    def forward(self, input, hx=None):  # noqa: A002 (nn.LSTM's own names)
        if (isinstance(input, torch.Tensor) and input.device.type == "cpu"
                and torch.is_autocast_enabled("cpu")):
            with torch.autocast("cpu", enabled=False):
                hx = None if hx is None else tuple(h.float() for h in hx)
                return super().forward(input.float(), hx)
        return super().forward(input, hx)
