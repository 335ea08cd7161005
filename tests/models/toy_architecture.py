"""An architecture (a model.arch) written outside src/, as docs/ARCHITECTURE.md's worked example: a GRU captioner whose
initial state is the projected pooled image vector. Adding it is this module and one registry line; the test
(tests/models/test_architectures.py) writes that line where it wants the architecture, ``ARCHITECTURES["toy"] = TOY``
(``monkeypatch.setitem``), then trains, saves, resumes and evaluates ``model.arch=toy`` through the CLI."""

from __future__ import annotations

# --- the architecture: docs/ARCHITECTURE.md shows it from here ---
import torch
import torch.nn.functional as F
from torch import nn

from rlcap.models.base import Feats, Tensors, expand_batch
from rlcap.models.model_config import ModelConfig
from rlcap.models.own_architectures import OwnArchitecture


class ToyGRU(nn.Module):
    """Memory ``(img (B, H),)``, the projected pooled vector; state ``(h (B, H),)``. Built, as every captioner of
    an :class:`OwnArchitecture`, from the model section, the vocabulary's size and the feature sizes."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        del att_dim  # it reads the pooled vector only
        self.vocab_size = vocab_size  # (rlcap.models.base.Captioner: what decoding reads)
        self.img = nn.Linear(fc_dim, cfg.hidden_dim)
        self.embed = nn.Embedding(vocab_size, cfg.embed_dim)
        self.cell = nn.GRUCell(cfg.embed_dim, cfg.hidden_dim)
        self.logit = nn.Linear(cfg.hidden_dim, vocab_size)

    def encode(self, feats: Feats) -> Tensors:
        return (torch.tanh(self.img(feats.fc)),)  # (B, H)

    def init_state(self, memory: Tensors) -> Tensors:
        return (memory[0],)  # h_0 (B, H): the image

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        h = self.cell(self.embed(tokens), state[0])  # (B, H)
        return F.log_softmax(self.logit(h).float(), dim=-1), (h,)  # (B, V) log-probabilities

    def hidden(self, state: Tensors) -> torch.Tensor:
        return state[0]  # (B, H)

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing: tokens (B*seq_per_img, T) from BOS -> logits (B*seq_per_img, T, V)."""
        (h,) = self.init_state(expand_batch(self.encode(feats), seq_per_img))
        words = self.embed(tokens)  # (B, T, E)
        states = []
        for t in range(tokens.size(1)):
            h = self.cell(words[:, t], h)
            states.append(h)
        return self.logit(torch.stack(states, dim=1))  # (B, T, V)


# its architecture: built from the model section, reading the model keys named here (what --help-config lists for
# model.arch=toy), its vocabulary from the training captions, nothing beside its weights in a checkpoint (an architecture
# with a folder of its own implements Architecture in full: models/hf/architecture.py)
TOY = OwnArchitecture(ToyGRU, ("embed_dim", "hidden_dim"))
# the registry line, in src/rlcap/models/architectures.py's ARCHITECTURES: "toy": TOY,
# --- to here ---
