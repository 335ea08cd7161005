"""Transformer captioner over grid or region features (Vaswani et al. 2017, pre-norm).

Projected att features pass through optional encoder layers (self-attention honouring
``att_mask``). The decoder has causal self-attention over the words, cross-attention to the
encoded regions and a feed-forward block. Words get learned position embeddings, so a
caption is at most ``max_len`` words after BOS.

Memory is ``(att_mask, ck_0, cv_0, ck_1, cv_1, ...)``: the cross-attention keys and values of
every decoder layer, computed once in ``encode``. ``expand_memory`` repeats only ``att_mask``
(which counts the rows); the keys and values stay once per image and the n rows (samples or
beams) of an image attend to them together, as one matrix product per image and head. Copying
them to every row instead (``expand_batch``, still accepted) made the backward pass sum the
copies' gradients at full size at every decoding step, and the attention a batch of
matrix-vector products.

Incremental decoding keeps a key/value cache: the state is ``(kv_0, kv_1, ..., hidden)``, one
(B, t, 2d) tensor per decoder layer (the self-attention keys and values of the t words so far,
position first so that a new word is appended with one ``cat``) and ``hidden`` (B, d), the top
layer's output at the last word (:meth:`TransformerCaptioner.hidden`). All are batch first so
beam search can reorder them.

The decoder's projections are :class:`rlcap.models.linear.Linear` (the parameters of ``nn.Linear``):
oneDNN's kernel without autograd, and one weight-gradient product per decode when sampling.

Sampling with autograd (``scores_decoded``): :func:`rlcap.decoding.sample` decodes word by word
without autograd while a :class:`DropoutTape` keeps every dropout mask the decoder draws, then
scores the decoded words in one teacher-forced pass (:meth:`TransformerCaptioner.score_decoded`)
under those same masks, laid out for whole sequences. The words, log-probabilities, entropies and
gradients are those of the word-by-word decode with autograd (tested with dropout on), so the
policy gradient is unchanged; the backward pass runs over (rows x words, d) matrices instead of
one thin product per word.

An SCST step at self-critical.pytorch's size (6 + 6 layers, d 512, 36 regions, 10 images x 5
samples, 16 words) used 1.22x less CPU time than with per-row copies of the memory and
``F.scaled_dot_product_attention`` (median of 10 paired single-thread runs on a loaded machine)
and peaked at 1.86 GB RSS instead of 2.35 GB; tests/models/test_transformer.py checks the model
against a plain reference.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from rlcap.errors import ConfigError
from rlcap.models.base import Feats, Tensors
from rlcap.models.grid_boxes import BOX_DIM, grid_boxes
from rlcap.models.model_config import ModelConfig
from rlcap.models.linear import Linear


class Dropout(nn.Dropout):
    """``nn.Dropout`` with the mask drawn as ``uniform >= p``: the same distribution, drawn 3-4x
    faster on CPU than the Bernoulli draws of ``F.dropout`` (a mask of 25k values per decoder
    layer and step)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _dropout(x, self.p if self.training else 0.0)


class DropoutTape:
    """The decoder's dropout masks of one word-by-word decode, kept call by call, and the same masks
    laid out for one teacher-forced pass over the decoded words (:meth:`TransformerCaptioner.score_decoded`).

    A step makes the same calls in the same order as the whole-sequence pass: the word embedding
    (``seq``), then per layer the self-attention weights (``self``), the cross-attention weights
    (``cross``) and the feed-forward output (``seq``). Step t's masks are a slice of the pass's:
    position t of a (R, T, d) ``seq`` mask; row t, keys 0..t of the (R, h, T, T) ``self`` weights
    (the causal mask zeroes the rest); rows j*T + t of the (I, h, n*T, S) ``cross`` weights.

    A decoder calls :meth:`end_step` after each step: the step's masks go to a list of their own, so that a
    step compiled by ``torch.compile`` finds the same (empty) list every time and its graph is reused.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, torch.Tensor]] = []  # the ended steps'
        self.step: list[tuple[str, torch.Tensor]] = []  # the current step's
        self.replay: list[torch.Tensor] | None = None

    def keep(self, x: torch.Tensor, p: float, kind: str) -> torch.Tensor:
        """The keep mask (1.0 kept, 0.0 dropped) for this call: drawn and kept, or the next laid-out one."""
        if self.replay is None:
            mask = torch.rand_like(x).ge_(p)
            self.step.append((kind, mask))
            return mask
        if not self.replay or self.replay[0].shape != x.shape:
            raise RuntimeError(f"dropout replay: expected a mask for {kind} of shape {tuple(x.shape)}, "
                               f"the tape holds {tuple(self.replay[0].shape) if self.replay else 'none'}")
        return self.replay.pop(0)

    def end_step(self) -> None:
        """The masks kept since the last call are one step's."""
        self.calls.extend(self.step)
        self.step = []

    def lay_out(self, steps: int) -> list[torch.Tensor]:
        """The masks of ``steps`` recorded steps as the whole-sequence pass calls for them."""
        self.end_step()
        if len(self.calls) % steps:
            raise RuntimeError(f"dropout tape: {len(self.calls)} calls do not split into {steps} steps")
        per_step = len(self.calls) // steps
        out = []
        for k in range(per_step):
            kind, masks = self.calls[k][0], [self.calls[t * per_step + k][1] for t in range(steps)]
            if kind == "seq":  # (R, 1, d) per step -> (R, T, d)
                out.append(torch.cat(masks, 1))
            elif kind == "cross":  # (I, h, n, S) per step -> (I, h, n*T, S), row j*T + t
                out.append(torch.stack(masks, 3).flatten(2, 3))
            else:  # self: (R, t+1, h) per step -> (R, h, T, T), zero above the diagonal
                rows, _, heads = masks[0].shape
                full = masks[0].new_zeros(rows, heads, steps, steps)
                for t, m in enumerate(masks):
                    full[:, :, t, : t + 1] = m.transpose(1, 2)
                out.append(full)
        return out


_TAPE: DropoutTape | None = None  # set while a decode records its masks or a pass replays them


def _dropout(x: torch.Tensor, p: float, kind: str = "seq") -> torch.Tensor:
    """Zero each value with probability p and scale the rest by 1 / (1 - p). ``kind``: the call's
    place in the decoder, for :class:`DropoutTape`."""
    if p == 0.0:
        return x
    if _TAPE is not None:
        return x * (_TAPE.keep(x, p, kind) * (1.0 / (1.0 - p)))
    return x * torch.rand_like(x).ge_(p).mul_(1.0 / (1.0 - p))


@contextmanager
def _taping(tape: DropoutTape) -> Iterator[DropoutTape]:
    global _TAPE
    previous, _TAPE = _TAPE, tape
    try:
        yield tape
    finally:
        _TAPE = previous


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
              p: float, kind: str = "cross") -> torch.Tensor:
    """softmax(q k^T / sqrt(d_h) + bias) v with dropout p on the weights (Vaswani et al. 2017, Eq. 1).

    q (B, h, T, d_h), k and v (B, h, S, d_h), bias broadcastable to (B, h, T, S), -inf where not
    attended -> (B, h, T, d_h). Written out rather than ``F.scaled_dot_product_attention``: on CPU
    with dropout that takes its reference path, which scales a copy of every key (the queries,
    fewer here, are scaled instead).
    """
    scores = torch.matmul(q * q.size(-1) ** -0.5, k.transpose(-1, -2))  # (B, h, T, S)
    if bias is not None:
        scores = scores + bias
    return torch.matmul(_dropout(scores.softmax(-1), p, kind), v)


class MultiHeadAttention(nn.Module):
    """Keys/values and queries are projected separately so keys can be cached."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q = Linear(dim, dim)
        self.kv = Linear(dim, 2 * dim)
        self.out = Linear(dim, dim)

    def _drop(self) -> float:
        return self.dropout if self.training else 0.0

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, S, d) -> keys and values (B, h, S, d/h) each, contiguous for the matrix products."""
        b, s, d = x.shape
        kv = self.kv(x).view(b, s, 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # (2, B, h, S, d/h)
        return kv[0].contiguous(), kv[1].contiguous()

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
               kind: str = "cross") -> torch.Tensor:
        """x (R, T, d) queries, rows grouped n per image; k, v (I, h, S, d/h) with R = I * n; bias
        broadcastable to (I, h, n*T, S) -> (R, T, d). The n rows of an image attend as one block."""
        rows, t, d = x.shape
        q = self.q(x).view(k.size(0), -1, self.heads, d // self.heads).transpose(1, 2)  # (I, h, n*T, d/h)
        y = attention(q, k, v, bias, self._drop(), kind)  # (I, h, n*T, d/h)
        return self.out(y.transpose(1, 2).reshape(rows, t, d))  # (R, T, d)

    def attend_cached(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One new position per row: x (R, 1, d), cache (R, t0, 2d) -> (R, 1, d), cache (R, t0+1, 2d).

        Each row has its own keys, so the products are per row: elementwise products and sums, which
        on CPU run much faster, forwards and backwards, than batched 1-row matrix products.
        """
        rows, _, d = x.shape
        cache = torch.cat([cache, self.kv(x)], dim=1)  # (R, t, 2d)
        k, v = cache.view(rows, -1, 2, self.heads, d // self.heads).unbind(2)  # (R, t, h, d/h) each
        q = self.q(x).view(rows, 1, self.heads, -1) * (d // self.heads) ** -0.5  # (R, 1, h, d/h)
        weights = _dropout((q * k).sum(-1).softmax(1), self._drop(), "self")  # (R, t, h)
        y = (weights.unsqueeze(-1) * v).sum(1)  # (R, h, d/h)
        return self.out(y.view(rows, 1, d)), cache


class FeedForward(nn.Sequential):
    def __init__(self, dim: int, ff_dim: int, dropout: float):
        super().__init__(Linear(dim, ff_dim), nn.GELU(), Linear(ff_dim, dim), Dropout(dropout))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_dim
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = MultiHeadAttention(d, cfg.num_heads, cfg.dropout)
        self.mlp = FeedForward(d, cfg.ff_dim, cfg.dropout)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x (B, N, d); bias (B, 1, 1, N) -inf at padded regions."""
        h = self.ln1(x)  # (B, N, d)
        x = x + self.attn.attend(h, *self.attn.keys_values(h), bias)  # (B, N, d)
        return x + self.mlp(self.ln2(x))  # (B, N, d)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_dim
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = MultiHeadAttention(d, cfg.num_heads, cfg.dropout)
        self.cross_attn = MultiHeadAttention(d, cfg.num_heads, cfg.dropout)
        self.mlp = FeedForward(d, cfg.ff_dim, cfg.dropout)

    def forward(self, x: torch.Tensor, cache: torch.Tensor | None,
                cross: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (R, T, d). With ``cache`` (R, t0, 2d): one new position (T = 1) after t0 cached ones,
        returns x and the cache (R, t0+1, 2d). Without: a whole sequence under a causal mask, no cache.
        cross: keys, values (I, h, N, d/h) and bias (I, 1, 1, N), R = I * n rows grouped by image."""
        h = self.ln1(x)
        if cache is None:
            t = x.size(1)
            causal = torch.full((t, t), float("-inf"), device=x.device).triu(1)  # (T, T)
            x = x + self.self_attn.attend(h, *self.self_attn.keys_values(h), causal, "self")
        else:
            y, cache = self.self_attn.attend_cached(h, cache)
            x = x + y
        x = x + self.cross_attn.attend(self.ln2(x), *cross)
        return x + self.mlp(self.ln3(x)), cache


class TransformerCaptioner(nn.Module):
    """Memory ``(att_mask (B, N), ck_0, cv_0, ...)`` with ck, cv (I, h, N, d/h), I images and
    B = I * n rows; state ``(kv_0, ..., kv_{L-1}, hidden)``. See the module docstring."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        del fc_dim  # attends over att features only
        d = cfg.hidden_dim
        self.vocab_size, self.max_len, self.heads = vocab_size, cfg.max_len, cfg.num_heads
        self.att_proj = nn.Sequential(nn.Linear(att_dim, d), nn.ReLU(), Dropout(cfg.dropout))
        # each grid cell's box, embedded apart and added to its projected vector (rlcap.models.grid_boxes)
        self.box_embed = nn.Linear(BOX_DIM, d) if cfg.grid_boxes else None
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_enc_layers))
        self.ln_mem = nn.LayerNorm(d)
        self.tok_emb = nn.Embedding(vocab_size, d)
        self.pos_emb = nn.Embedding(cfg.max_len + 1, d)  # BOS + max_len words
        self.drop = Dropout(cfg.dropout)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(d)
        self.logit = Linear(d, vocab_size)

    def encode(self, feats: Feats) -> Tensors:
        x = self.att_proj(feats.att)  # (B, N, d)
        if self.box_embed is not None:
            x = x + self.box_embed(grid_boxes(x.size(1), x.device, x.dtype))  # (+ (N, d))
        bias = _mask_bias(feats.att_mask, x.dtype)  # (B, 1, 1, N)
        for layer in self.encoder:
            x = layer(x, bias)
        x = self.ln_mem(x)
        cross = [t for layer in self.decoder for t in layer.cross_attn.keys_values(x)]  # (B, h, N, d/h) each
        return (feats.att_mask, *cross)

    def expand_memory(self, memory: Tensors, n: int) -> Tensors:
        """n rows per image: ``att_mask`` is repeated, the keys and values stay once per image."""
        return (memory[0].repeat_interleave(n, dim=0, output_size=memory[0].size(0) * n), *memory[1:])

    def init_state(self, memory: Tensors) -> Tensors:
        rows, d = memory[0].size(0), self.ln_f.normalized_shape[0]
        empty = memory[1].new_zeros(rows, 0, 2 * d)  # (B, 0, 2d): no words cached yet
        return (empty,) * len(self.decoder) + (memory[1].new_zeros(rows, d),)

    def hidden(self, state: Tensors) -> torch.Tensor:
        """The top layer's output at the last decoded word, (B, d): what its logits are computed from."""
        return state[-1]

    def _cross(self, memory: Tensors) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Each layer's (keys, values, bias), the bias from the first row of each image."""
        att_mask, images = memory[0], memory[1].size(0)
        bias = _mask_bias(att_mask[:: att_mask.size(0) // images], memory[1].dtype)  # (I, 1, 1, N)
        return [(memory[1 + 2 * i], memory[2 + 2 * i], bias) for i in range(len(self.decoder))]

    def _embed(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """tokens (B, T) at positions start.. -> (B, T, d)."""
        if start + tokens.size(1) > self.max_len + 1:
            raise ConfigError(f"transformer: a caption of {start + tokens.size(1) - 1} words exceeds "
                              f"model.max_len {self.max_len}")
        pos = torch.arange(start, start + tokens.size(1), device=tokens.device)  # (T,)
        return self.drop(self.tok_emb(tokens) + self.pos_emb(pos))  # (B, T, d)

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        x = self._embed(tokens[:, None], state[0].size(1))  # (B, 1, d)
        caches = []
        for layer, cache, cross in zip(self.decoder, state, self._cross(memory)):
            x, cache = layer(x, cache, cross)
            caches.append(cache)
        h = self.ln_f(x[:, 0])  # (B, d)
        return F.log_softmax(self.logit(h).float(), dim=-1), (*caches, h)  # (B, V)

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing. tokens (B*seq_per_img, T) from BOS -> logits (B*seq_per_img, T, V)."""
        return self.decode_all(self.expand_memory(self.encode(feats), seq_per_img), tokens)

    def decode_all(self, memory: Tensors, tokens: torch.Tensor) -> torch.Tensor:
        """The decoder over whole sequences: memory of R rows, tokens (R, T) from BOS -> logits (R, T, V)."""
        x = self._embed(tokens, 0)  # (R, T, d)
        for layer, cross in zip(self.decoder, self._cross(memory)):
            x, _ = layer(x, None, cross)
        return self.logit(self.ln_f(x))  # (R, T, V)

    # sampling with autograd decodes without it, then scores the words in one pass (module docstring)
    scores_decoded = True

    @contextmanager
    def record_dropout(self) -> Iterator[DropoutTape]:
        """Within the block, every dropout mask the decoder draws is kept on the yielded tape."""
        with _taping(DropoutTape()) as tape:
            yield tape

    def score_decoded(self, memory: Tensors, inputs: torch.Tensor, tape: DropoutTape) -> torch.Tensor:
        """Log-probabilities (R, T, V) of the steps that read ``inputs`` (R, T) (BOS, then each decoded
        word), under the dropout masks ``tape`` recorded while those T steps were decoded."""
        tape.replay = tape.lay_out(inputs.size(1))
        with _taping(tape):
            logprobs = F.log_softmax(self.decode_all(memory, inputs).float(), dim=-1)
        if tape.replay:
            raise RuntimeError(f"dropout replay: {len(tape.replay)} recorded masks were not used")
        return logprobs


def _mask_bias(att_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, N) bool, True where attended -> (B, 1, 1, N) additive: 0 there, -inf elsewhere."""
    bias = torch.zeros(att_mask.shape, dtype=dtype, device=att_mask.device)
    return bias.masked_fill(~att_mask, float("-inf"))[:, None, None]
