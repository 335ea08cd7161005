"""Transformer captioner over grid or region features (Vaswani et al. 2017, pre-norm).

Projected att features pass through optional encoder layers (self-attention honouring
``att_mask``). The decoder has causal self-attention over the words, cross-attention to the
encoded regions and a feed-forward block. Words get learned position embeddings, so a
caption is at most ``max_len`` words after BOS.

Incremental decoding keeps a key/value cache: the state is ``(k_0, v_0, k_1, v_1, ...)``, one pair
per decoder layer, each (B, heads, t, head_dim), batch first so beam search can reorder it. The
cross-attention keys and values of every layer are computed once in ``encode``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rlcap.errors import ConfigError
from rlcap.models.base import Feats, Tensors, expand_batch
from rlcap.models.config import ModelConfig


class MultiHeadAttention(nn.Module):
    """Keys/values and queries are projected separately so keys can be cached."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)  # (B, h, T, d/h)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv(x).chunk(2, dim=2)  # (B, S, d) each
        return self._split(k), self._split(v)  # (B, h, S, d/h) each

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        """x (B, T, d) queries; k, v (B, h, S, d/h); mask (B, 1, 1, S) True where attended."""
        q = self._split(self.q(x))  # (B, h, T, d/h)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                           dropout_p=self.dropout if self.training else 0.0)  # (B, h, T, d/h)
        return self.out(y.transpose(1, 2).reshape(x.shape))  # (B, T, d)


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, ff_dim: int, dropout: float):
        super().__init__(nn.Linear(dim, ff_dim), nn.GELU(), nn.Linear(ff_dim, dim), nn.Dropout(dropout))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_dim
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MultiHeadAttention(d, cfg.num_heads, cfg.dropout)
        self.mlp = FeedForward(d, cfg.ff_dim, cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)  # (B, N, d)
        x = x + self.attn.attend(h, *self.attn.keys_values(h), mask=mask)  # (B, N, d)
        return x + self.mlp(self.ln2(x))  # (B, N, d)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_dim
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = MultiHeadAttention(d, cfg.num_heads, cfg.dropout)
        self.cross_attn = MultiHeadAttention(d, cfg.num_heads, cfg.dropout)
        self.mlp = FeedForward(d, cfg.ff_dim, cfg.dropout)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor],
                cross: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """x (B, T, d) new positions; past keys/values (B, h, t0, d/h); cross (k, v, mask).

        Returns x (B, T, d) and the keys/values extended to t0 + T positions.
        """
        h = self.ln1(x)
        k, v = self.self_attn.keys_values(h)  # (B, h, T, d/h)
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, h, t0+T, d/h)
        # Causal only over a whole sequence (t0 = 0); one new position may see every cached one.
        x = x + self.self_attn.attend(h, k, v, causal=x.size(1) > 1)
        x = x + self.cross_attn.attend(self.ln2(x), *cross)
        x = x + self.mlp(self.ln3(x))
        return x, k, v


class TransformerCaptioner(nn.Module):
    """Memory ``(att_mask (B, N), ck_0, cv_0, ck_1, cv_1, ...)``; state ``(k_0, v_0, ...)``."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        del fc_dim  # attends over att features only
        d = cfg.hidden_dim
        self.vocab_size, self.max_len, self.heads = vocab_size, cfg.max_len, cfg.num_heads
        self.att_proj = nn.Sequential(nn.Linear(att_dim, d), nn.ReLU(), nn.Dropout(cfg.dropout))
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_enc_layers))
        self.ln_mem = nn.LayerNorm(d)
        self.tok_emb = nn.Embedding(vocab_size, d)
        self.pos_emb = nn.Embedding(cfg.max_len + 1, d)  # BOS + max_len words
        self.drop = nn.Dropout(cfg.dropout)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(d)
        self.logit = nn.Linear(d, vocab_size)

    def encode(self, feats: Feats) -> Tensors:
        x = self.att_proj(feats.att)  # (B, N, d)
        mask = feats.att_mask[:, None, None, :]  # (B, 1, 1, N)
        for layer in self.encoder:
            x = layer(x, mask)
        x = self.ln_mem(x)
        cross = [t for layer in self.decoder for t in layer.cross_attn.keys_values(x)]  # (B, h, N, d/h) each
        return (feats.att_mask, *cross)

    def init_state(self, memory: Tensors) -> Tensors:
        k = memory[1]  # (B, h, N, d/h)
        empty = k.new_zeros(k.size(0), k.size(1), 0, k.size(3))  # (B, h, 0, d/h)
        return (empty,) * (2 * len(self.decoder))

    def _decode(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """tokens (B, T) at positions t0..t0+T-1 (t0 = cached length) -> hidden (B, T, d), new state."""
        t0, t = state[0].size(2), tokens.size(1)
        if t0 + t > self.max_len + 1:
            raise ConfigError(f"transformer: a caption of {t0 + t - 1} words exceeds model.max_len {self.max_len}")
        pos = torch.arange(t0, t0 + t, device=tokens.device)  # (T,)
        x = self.drop(self.tok_emb(tokens) + self.pos_emb(pos))  # (B, T, d)
        mask = memory[0][:, None, None, :]  # (B, 1, 1, N)
        new_state: list[torch.Tensor] = []
        for i, layer in enumerate(self.decoder):
            x, k, v = layer(x, state[2 * i : 2 * i + 2], (memory[1 + 2 * i], memory[2 + 2 * i], mask))
            new_state += [k, v]
        return self.ln_f(x), tuple(new_state)

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        h, state = self._decode(memory, state, tokens[:, None])  # (B, 1, d)
        return F.log_softmax(self.logit(h[:, 0]), dim=-1), state  # (B, V)

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing. tokens (B*seq_per_img, T) from BOS -> logits (B*seq_per_img, T, V)."""
        memory = expand_batch(self.encode(feats), seq_per_img)
        h, _ = self._decode(memory, self.init_state(memory), tokens)  # (B, T, d)
        return self.logit(h)  # (B, T, V)
