"""Value network V(image, partial caption) for actor-critic training.

../shared/papers/000_45a29dab880026f9.txt Sec. 3.2.2 (Fig. 3): a CNN feature of the image, an RNN
over the partially generated caption and a linear mapping to one value. Here the pooled image
vector is projected and fed as the LSTM's first input (as in the policy network), and a small
MLP reads each hidden state together with the image projection.
"""

from __future__ import annotations

import torch
from torch import nn

from rlcap.models.base import Feats
from rlcap.models.config import ModelConfig


class ValueNetwork(nn.Module):
    """``values = net(feats, tokens)``: tokens (B, T) from BOS -> values (B, T), where
    ``values[:, t]`` estimates the return of the state holding the prefix ``tokens[:, :t+1]``."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int):
        super().__init__()
        emb, hid = cfg.embed_dim, cfg.hidden_dim
        self.img_embed = nn.Linear(fc_dim, emb)
        self.embed = nn.Embedding(vocab_size, emb)
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = nn.LSTM(emb, hid, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hid + emb, hid), nn.ReLU(), nn.Linear(hid, 1))

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        img = self.drop(self.img_embed(feats.fc)).repeat_interleave(seq_per_img, dim=0)  # (B, E)
        x = torch.cat([img[:, None], self.drop(self.embed(tokens))], dim=1)  # (B, 1+T, E)
        out, _ = self.rnn(x)  # (B, 1+T, H)
        out = out[:, 1:]  # (B, T, H): states after BOS, w_1, ...
        img = img[:, None].expand(-1, out.size(1), -1)  # (B, T, E)
        return self.head(torch.cat([out, img], dim=2)).squeeze(2)  # (B, T)
