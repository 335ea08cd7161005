"""The discriminator of distinctive captioning ([Chaffin24 sec. 3.2]): a 3-layer MLP
on the frozen retriever's caption embedding (and, by default, its image's), giving the logit of
"written by a human". p_D = sigmoid(logit) is the regulariser r_regu of eq. 3; the retriever's
text encoder is never fine-tuned through it (sec. 3.2)."""

from __future__ import annotations

import torch
from torch import nn


class Discriminator(nn.Module):
    def __init__(self, dim: int, hidden: int = 512, with_image: bool = True):
        super().__init__()
        self.with_image = with_image
        inputs = 2 * dim if with_image else dim
        self.mlp = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, texts: torch.Tensor, images: torch.Tensor | None = None) -> torch.Tensor:
        """texts (N, D) caption embeddings, images (N, D) their images' -> (N,) logits of "human"."""
        x = torch.cat([texts, images], dim=1) if self.with_image else texts
        return self.mlp(x).squeeze(1).float()
