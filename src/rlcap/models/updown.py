"""Bottom-up and top-down attention captioner (UpDown; Anderson et al. 2018, Sec. 3.2).

Two LSTMs per word:

* the top-down attention LSTM reads ``[h_lang_{t-1}; v_mean; W_e x_t]`` (Eq. 2);
* additive attention over the region features ``a_i = w_a^T tanh(W_va v_i + W_ha h_att_t)``,
  ``alpha = softmax(a)`` over the real regions only (``att_mask``), ``v_hat = sum_i alpha_i v_i``
  (Eq. 3-5);
* the language LSTM reads ``[v_hat_t; h_att_t]`` (Eq. 6) and its output gives the word
  distribution (Eq. 7).

As in self-critical.pytorch, the pooled and region features are first embedded to ``hidden_dim``
with a ReLU. The attention LSTM's input matrix is split by input so that the image term and
``W_va v_i`` are computed once per image in ``encode`` and not at every step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlcap.models.attention import additive_scores, weighted_sum
from rlcap.models.base import Feats, Tensors
from rlcap.models.grid_boxes import BOX_DIM, grid_boxes
from rlcap.models.model_config import ModelConfig
from rlcap.models.linear import Linear, addmm
from rlcap.models.lstm import WordGates, lstm_update


class UpDown(nn.Module):
    """Memory ``(fc_gates (B, 4H), att (I, N, H), p_att2 (I, N, A), att_bias (I, N))``, I images with
    B = I * n rows (n = 1 after ``encode``; ``expand_memory`` repeats only ``fc_gates``);
    state ``(h_att, c_att, h_lang, c_lang)``, each (B, H)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        hid, emb, att_hid = cfg.hidden_dim, cfg.embed_dim, cfg.att_hidden_dim
        self.vocab_size = vocab_size
        self.hidden_dim = hid
        self.fc_embed = nn.Sequential(Linear(fc_dim, hid), nn.ReLU(), nn.Dropout(cfg.dropout))
        self.att_embed = nn.Sequential(Linear(att_dim, hid), nn.ReLU(), nn.Dropout(cfg.dropout))
        # each grid cell's box, embedded apart and added to its embedded vector (rlcap.models.grid_boxes)
        self.box_embed = Linear(BOX_DIM, hid) if cfg.grid_boxes else None
        self.drop = nn.Dropout(cfg.dropout)
        # Attention LSTM (Eq. 2), gates (i, f, o, g), input split by part; its bias sits in att_fc.
        self.att_word = WordGates(vocab_size, emb, 4 * hid, cfg.dropout, bias=False)  # W_e Pi_t
        self.att_fc = Linear(hid, 4 * hid)
        self.att_hid = Linear(2 * hid, 4 * hid, bias=False)  # [h_lang_{t-1}; h_att_{t-1}]
        # Additive attention (Eq. 3-4).
        self.ctx2att = Linear(hid, att_hid)  # W_va
        self.h2att = Linear(hid, att_hid, bias=False)  # W_ha
        # w_a (no bias: it cancels in the softmax); its weight is used by additive_scores
        self.alpha = nn.Linear(att_hid, 1, bias=False)
        # Language LSTM (Eq. 6); its bias sits in lang_ctx.
        self.lang_ctx = Linear(hid, 4 * hid)  # v_hat_t
        self.lang_hid = Linear(2 * hid, 4 * hid, bias=False)  # [h_att_t; h_lang_{t-1}]
        self.logit = Linear(hid, vocab_size)  # Eq. 7

    def encode(self, feats: Feats) -> Tensors:
        fc_gates = self.att_fc(self.fc_embed(feats.fc))  # (B, 4H) image term of Eq. 2, once per image
        att = self.att_embed(feats.att)  # (B, N, H)
        if self.box_embed is not None:
            att = att + self.box_embed(grid_boxes(att.size(1), att.device, att.dtype))  # (+ (N, H))
        p_att2 = 2.0 * self.ctx2att(att)  # (B, N, A) 2 W_va v_i, once per image (see _advance)
        att_bias = torch.zeros_like(att[..., 0]).masked_fill(~feats.att_mask, float("-inf"))  # (B, N)
        return fc_gates, att, p_att2, att_bias

    def expand_memory(self, memory: Tensors, n: int) -> Tensors:
        """n rows per image: the gate term is repeated, the regions stay once per image (I = B / n)."""
        fc_gates, att, p_att2, att_bias = memory
        return fc_gates.repeat_interleave(n, dim=0, output_size=fc_gates.size(0) * n), att, p_att2, att_bias

    def init_state(self, memory: Tensors) -> Tensors:
        fc_gates = memory[0]
        zeros = fc_gates.new_zeros(fc_gates.size(0), self.hidden_dim)  # (B, H)
        return zeros, zeros, zeros, zeros

    def _advance(self, memory: Tensors, state: Tensors, word_gates: torch.Tensor) -> Tensors:
        fc_gates, att, p_att2, att_bias = memory
        h_att, c_att, h_lang, c_lang = state  # (B, H) each
        gates = addmm(word_gates + fc_gates, torch.cat([h_lang, h_att], 1), self.att_hid.weight)  # (B, 4H)
        h_att, c_att = lstm_update(gates, c_att)  # (B, H)
        # w_a^T tanh(z_i) = 2 w_a^T sigmoid(2 z_i) - sum(w_a): the constant cancels in the softmax, and
        # sigmoid is ~5x cheaper than tanh on CPU (see lstm.tanh). p_att2 = 2 W_va v_i, from encode.
        # The regions are kept once per image (expand_memory): rows are grouped n per image.
        images, rows = att.size(0), h_att.size(0)
        query = 2.0 * self.h2att(h_att).view(images, rows // images, -1)  # (I, n, A)
        scores = 2.0 * additive_scores(p_att2, query, self.alpha.weight[0])  # (I, n, N)
        weights = torch.softmax(scores + att_bias.unsqueeze(1), dim=2)  # (I, n, N); 0 at padded regions
        v_hat = weighted_sum(weights, att).view(rows, -1)  # (B, H)
        gates = addmm(self.lang_ctx(v_hat), torch.cat([h_att, h_lang], 1), self.lang_hid.weight)  # (B, 4H)
        h_lang, c_lang = lstm_update(gates, c_lang)  # (B, H)
        return h_att, c_att, h_lang, c_lang

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        word_gates = self.att_word(tokens)  # (B, 4H)
        state = self._advance(memory, state, word_gates)
        logprobs = F.log_softmax(self.logit(self.drop(state[2])).float(), dim=-1)  # (B, V)
        return logprobs, state

    def hidden(self, state: Tensors) -> torch.Tensor:
        """The language LSTM's output h_lang (B, H) the next word's logits are computed from (Eq. 7)."""
        return state[2]

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing. tokens (B*seq_per_img, T) from BOS -> logits (B*seq_per_img, T, V)."""
        memory = self.expand_memory(self.encode(feats), seq_per_img)
        state = self.init_state(memory)
        word_gates = self.att_word(tokens)  # (B, T, 4H) one matmul for all steps
        hs = []
        for t in range(tokens.size(1)):
            state = self._advance(memory, state, word_gates[:, t])
            hs.append(state[2])
        out = torch.stack(hs, dim=1)  # (B, T, H)
        return self.logit(self.drop(out))  # (B, T, V)
