"""Value network v(image, partial caption) for actor-critic training.

../shared/papers/000_45a29dab880026f9.txt sec. 3.2.2 (Fig. 3) and 4.1: a CNN feature of the image,
an RNN over the partially generated caption and a three-layer perceptron giving one value. Here
the pooled image vector is projected and fed as the LSTM's first input (as in the policy network),
and the perceptron reads each hidden state together with the image projection.

It shares nothing with the policy: its inputs are image features and word ids, so no gradient of
its loss can reach the policy.
"""

from __future__ import annotations

import torch
from torch import nn

from rlcap.models.base import Feats, Tensors
from rlcap.models.config import ModelConfig


class ValueNetwork(nn.Module):
    """``values = net(feats, tokens)``: tokens (B, T) from BOS -> values (B, T), where
    ``values[:, t]`` estimates the return of the state holding the prefix ``tokens[:, :t+1]``
    (``v(s_t)``, the state the word ``tokens[:, t+1]`` is chosen from).

    Word by word (lookahead decoding): ``state = net.start(feats)``, then
    ``values, state = net.step(state, tokens)`` with BOS first; the state ``(img, h, c)`` is
    batch first, so rows are reordered with :func:`rlcap.models.select_batch`."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int):
        super().__init__()
        emb, hid = cfg.embed_dim, cfg.hidden_dim
        self.img_embed = nn.Linear(fc_dim, emb)
        self.embed = nn.Embedding(vocab_size, emb)
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = nn.LSTM(emb, hid, batch_first=True)
        # the three-layer perceptron of 000 sec. 4.1
        self.head = nn.Sequential(nn.Linear(hid + emb, hid), nn.ReLU(), nn.Linear(hid, hid), nn.ReLU(),
                                  nn.Linear(hid, 1))

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        img = self.drop(self.img_embed(feats.fc)).repeat_interleave(seq_per_img, dim=0)  # (B, E)
        x = torch.cat([img[:, None], self.drop(self.embed(tokens))], dim=1)  # (B, 1+T, E)
        out, _ = self.rnn(x)  # (B, 1+T, H)
        out = out[:, 1:]  # (B, T, H): states after BOS, w_1, ...
        img = img[:, None].expand(-1, out.size(1), -1)  # (B, T, E)
        return self.head(torch.cat([out, img], dim=2)).squeeze(2)  # (B, T)

    def start(self, feats: Feats) -> Tensors:
        """The state after reading the image: ``(img (B, E), h (B, H), c (B, H))``."""
        img = self.drop(self.img_embed(feats.fc))  # (B, E)
        _, (h, c) = self.rnn(img[:, None])  # (1, B, H) each
        return img, h[0], c[0]

    def step(self, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """Read one word per row, ``tokens`` (R,): the value of the new state (R,) and the state."""
        img, h, c = state
        out, (h, c) = self.rnn(self.drop(self.embed(tokens))[:, None], (h[None], c[None]))  # out (R, 1, H)
        value = self.head(torch.cat([out[:, 0], img], dim=1)).squeeze(1)  # (R,)
        return value, (img, h[0], c[0])
