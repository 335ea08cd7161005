"""Show and Tell / "FC" captioner (Vinyals et al. 2015).

The policy network of [Shi18] (Sec. 3.2.1, Eq. 1-4):

    x_{-1} = W_e CNN(I)          the projected image vector is the LSTM's first input
    x_t    = phi(w_{t-1})        then BOS and the words, embedded
    h_t    = RNN(h_{t-1}, x_t)
    q(a_t | s_t) = varphi(h_t)   a linear layer and a softmax over the vocabulary

Image and words share the LSTM's input-to-gates matrix; the image only sets the initial state,
so ``init_state`` runs the image step and ``step`` runs one word.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlcap.models.base import Feats, Tensors, expand_batch
from rlcap.models.model_config import ModelConfig
from rlcap.models.linear import Linear, addmm
from rlcap.models.lstm import WordGates, lstm_update


class ShowTell(nn.Module):
    """FC captioner: memory ``(img_gates (B, 4H),)``; state ``(h (B, H), c (B, H))``."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        del att_dim  # the FC model sees only the pooled image vector
        self.vocab_size = vocab_size
        self.hidden_dim = cfg.hidden_dim
        self.img_embed = Linear(fc_dim, cfg.embed_dim)  # W_e of Eq. 2
        self.drop = nn.Dropout(cfg.dropout)
        # phi of Eq. 3 and the input -> gates (i, f, o, g) matrix with the LSTM's bias
        self.word = WordGates(vocab_size, cfg.embed_dim, 4 * cfg.hidden_dim, cfg.dropout)
        self.w_hh = Linear(cfg.hidden_dim, 4 * cfg.hidden_dim, bias=False)  # hidden -> gates
        self.logit = Linear(cfg.hidden_dim, vocab_size)  # varphi of Eq. 4

    def encode(self, feats: Feats) -> Tensors:
        x = self.drop(self.img_embed(feats.fc))  # (B, E) x_{-1}
        return (self.word.proj(x),)  # (B, 4H): the image step's input gates, computed once per image

    def init_state(self, memory: Tensors) -> Tensors:
        (img_gates,) = memory  # (B, 4H)
        c = img_gates.new_zeros(img_gates.size(0), self.hidden_dim)  # (B, H)
        return lstm_update(img_gates, c)  # h_{-2} = 0, so the hidden term vanishes: (h, c) (B, H)

    def _advance(self, word_gates: torch.Tensor, state: Tensors) -> Tensors:
        h, c = state  # (B, H)
        gates = addmm(word_gates, h, self.w_hh.weight)  # (B, 4H)
        return lstm_update(gates, c)

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        word_gates = self.word(tokens)  # (B, 4H)
        h, c = self._advance(word_gates, state)  # (B, H)
        logprobs = F.log_softmax(self.logit(self.drop(h)).float(), dim=-1)  # (B, V)
        return logprobs, (h, c)

    def hidden(self, state: Tensors) -> torch.Tensor:
        """The LSTM output h (B, H) the next word's logits are computed from."""
        return state[0]

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing. tokens (B*seq_per_img, T) from BOS -> logits (B*seq_per_img, T, V)."""
        state = self.init_state(expand_batch(self.encode(feats), seq_per_img))
        word_gates = self.word(tokens)  # (B, T, 4H) one matmul for all steps
        hs = []
        for t in range(tokens.size(1)):
            state = self._advance(word_gates[:, t], state)
            hs.append(state[0])
        out = torch.stack(hs, dim=1)  # (B, T, H)
        return self.logit(self.drop(out))  # (B, T, V)
