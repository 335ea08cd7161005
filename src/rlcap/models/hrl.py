"""The hierarchical captioner of [Wang18] (Wang et al. 2018, sec. 3.1-3.2): a manager
that sets latent goals, a worker that writes the words of each goal's segment, and an internal
critic that says when a segment is done.

Encoding (sec. 3.1): the frame features (the ``att`` rows of a video, in temporal order, ``att_mask``
for clips with fewer frames) pass through a low-level Bi-LSTM, whose outputs h^Ew the worker attends
over, and a high-level LSTM on top of it, whose outputs h^Em the manager attends over.

Decoding, one word per :meth:`HRLCaptioner.step` (the decoders' contract, ``models/base.py``):

1. the internal critic (eq. 9, :class:`InternalCritic`) reads the previous word a_{t-1}; p(z) > 0.5
   means the segment ended with it. At the first step a segment always starts.
2. where a segment starts, the manager attends over h^Em (eq. 1-3, with its own previous state)
   and steps its LSTM on [c^M_t, h^W_{t-1}] (eq. 4); the goal is g_t = u_M(h^M_t) (eq. 5), a linear
   map to ``model.goal_dim``, plus Gaussian exploration noise of standard deviation
   ``goal_noise`` when the manager is being trained (eq. 23). Elsewhere the goal and the
   manager's state are kept.
3. the worker attends over h^Ew (eq. 1-3), steps its LSTM on [c^W_t, g_t, a_{t-1}] (eq. 6) and
   gives the word distribution softmax(u_W(h^W_t)) (eq. 7-8).

State, all batch first: ``(h_W, c_W, h_M, c_M, goal, h_I, started, new_segment)``; ``new_segment``
(B, 1) is 1 where this step's goal was emitted (:meth:`segment_start`). The critic's parameters
are frozen (trained first by ``methods/critic.py``; [Wang18 sec. 3.2]).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from rlcap.data.vocab import Vocab
from rlcap.errors import RlcapError
from rlcap.host_sync import to_host
from rlcap.models.base import Feats, Tensors
from rlcap.models.model_config import ModelConfig


class AdditiveAttention(nn.Module):
    """Eq. 1-3: e_i = w^T tanh(W_a h_i + U_a s + b_a), alpha = softmax(e) over valid frames, c = sum alpha_i h_i."""

    def __init__(self, mem_dim: int, query_dim: int, att_dim: int):
        super().__init__()
        self.mem = nn.Linear(mem_dim, att_dim)  # W_a, b_a
        self.query = nn.Linear(query_dim, att_dim, bias=False)  # U_a
        self.score = nn.Linear(att_dim, 1, bias=False)  # w

    def forward(self, keys: torch.Tensor, projected: torch.Tensor, mask: torch.Tensor,
                query: torch.Tensor) -> torch.Tensor:
        """keys (B, N, M), projected = self.mem(keys) (B, N, A), mask (B, N), query (B, Q) -> (B, M)."""
        e = self.score(torch.tanh(projected + self.query(query)[:, None])).squeeze(2)  # (B, N)
        alpha = e.masked_fill(~mask, float("-inf")).softmax(1)  # (B, N)
        return torch.bmm(alpha[:, None], keys).squeeze(1)  # (B, M)


class InternalCritic(nn.Module):
    """Eq. 9: h^I_t = GRU(h^I_{t-1}, a_t), p(z_t) = sigmoid(W_z h^I_t + b_z): the segment ends after a_t."""

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.rnn = nn.GRUCell(embed_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, 1)

    def step(self, h: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h (B, H), tokens (B,) -> logit of z (B,) and the new h."""
        h = self.rnn(self.embed(tokens), h)
        return self.out(h).squeeze(1).float(), h

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) -> logits (B, T): after each word, has its segment ended?"""
        h = tokens.new_zeros(tokens.size(0), self.rnn.hidden_size, dtype=torch.float)
        logits = []
        for t in range(tokens.size(1)):
            logit, h = self.step(h, tokens[:, t])
            logits.append(logit)
        return torch.stack(logits, 1)


class HrlState(NamedTuple):
    """The decoding state of :class:`HRLCaptioner`, each (B, ...)."""

    h_w: torch.Tensor      # the worker LSTM's hidden and cell state
    c_w: torch.Tensor
    h_m: torch.Tensor      # the manager LSTM's
    c_m: torch.Tensor
    goal: torch.Tensor     # the current goal g ([Wang18 eq. 5])
    h_i: torch.Tensor      # the internal critic's GRU state ([Wang18 eq. 9])
    started: torch.Tensor  # (B, 1) 1 after the first step
    new: torch.Tensor      # (B, 1) 1 where the step that returned this state started a segment


class HRLCaptioner(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        del fc_dim  # reads the frame sequence only
        e, h, a, m, g = cfg.embed_dim, cfg.hidden_dim, cfg.att_hidden_dim, cfg.manager_dim, cfg.goal_dim
        self.vocab_size, self.goal_noise = vocab_size, 0.0
        self.frame_proj = nn.Sequential(nn.Linear(att_dim, e), nn.ReLU(), nn.Dropout(cfg.dropout))
        self.low = nn.LSTM(e, h // 2, batch_first=True, bidirectional=True)  # h^Ew: (B, N, h)
        self.high = nn.LSTM(h, h, batch_first=True)  # h^Em: (B, N, h)
        self.worker_att = AdditiveAttention(h, h, a)
        self.manager_att = AdditiveAttention(h, m, a)
        self.manager = nn.LSTMCell(h + h, m)  # [c^M_t, h^W_{t-1}] (eq. 4)
        self.goal = nn.Linear(m, g)  # u_M (eq. 5)
        self.embed = nn.Embedding(vocab_size, e)
        self.worker = nn.LSTMCell(h + g + e, h)  # [c^W_t, g_t, a_{t-1}] (eq. 6)
        self.drop = nn.Dropout(cfg.dropout)
        self.logit = nn.Linear(h, vocab_size)  # u_W (eq. 7)
        self.critic = InternalCritic(vocab_size, e, h)
        self.critic.requires_grad_(False)  # trained first, then fixed (sec. 3.2)

    def load_critic(self, folder: str | Path, vocab: Vocab) -> None:
        """The internal critic's weights from a checkpoint of ``algorithm: critic`` (its vocabulary must be ``vocab``)."""
        folder = Path(folder)
        weights = folder / "critic.safetensors"
        if not weights.is_file():
            raise RlcapError(f"model.critic_from={folder}: no critic.safetensors there; train the internal critic "
                             "first (algorithm=critic)")
        if Vocab.load(folder / "vocab.json").itos != vocab.itos:
            raise RlcapError(f"model.critic_from={folder}: the critic was trained with another vocabulary; train it "
                             "on this run's data and data.min_count")
        try:
            self.critic.load_state_dict(load_file(str(weights)))
        except RuntimeError as exc:
            raise RlcapError(f"model.critic_from={folder}: its sizes do not match model.embed_dim and "
                             f"model.hidden_dim ({exc.__class__.__name__})") from None

    def encode(self, feats: Feats) -> Tensors:
        x = self.frame_proj(feats.att)  # (B, N, e)
        mask = feats.att_mask
        # packed sequences take their lengths on the host: one read, and packing copies its order back (each
        # encode waits for the device: the frame encoder's cost; counted in tests/train/test_host_syncs.py)
        lengths = to_host(mask.sum(1).clamp(min=1))
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        low, _ = self.low(packed)
        low, _ = nn.utils.rnn.pad_packed_sequence(low, batch_first=True, total_length=x.size(1))  # (B, N, h)
        high, _ = self.high(nn.utils.rnn.pack_padded_sequence(low, lengths, batch_first=True, enforce_sorted=False))
        high, _ = nn.utils.rnn.pad_packed_sequence(high, batch_first=True, total_length=x.size(1))  # (B, N, h)
        return (low, self.worker_att.mem(low), high, self.manager_att.mem(high), mask)

    def init_state(self, memory: Tensors) -> HrlState:
        b, h = memory[0].size(0), self.worker.hidden_size
        z = memory[0].new_zeros
        return HrlState(z(b, h), z(b, h), z(b, self.manager.hidden_size), z(b, self.manager.hidden_size),
                        z(b, self.goal.out_features), z(b, self.critic.rnn.hidden_size), z(b, 1), z(b, 1))

    def hidden(self, state: HrlState) -> torch.Tensor:
        return state.h_w

    def segment_start(self, state: HrlState) -> torch.Tensor:
        """(B,) bool: the step that returned ``state`` started a segment (the manager emitted a goal)."""
        return state.new[:, 0] > 0.5

    def step(self, memory: Tensors, state: HrlState, tokens: torch.Tensor) -> tuple[torch.Tensor, HrlState]:
        low, low_proj, high, high_proj, mask = memory
        h_w, c_w, h_m, c_m, goal, h_i, started, _ = state
        # 1. the internal critic reads a_{t-1}: did the segment end with it? (a segment starts at t = 0)
        z_logit, h_i = self.critic.step(h_i, tokens)
        new = torch.maximum(1.0 - started, (z_logit > 0).float()[:, None])  # (B, 1)
        # 2. the manager emits a new goal where a segment starts (eq. 1-5, 23); elsewhere keeps it
        c_mgr = self.manager_att(high, high_proj, mask, h_m)
        h_m2, c_m2 = self.manager(torch.cat([c_mgr, h_w], 1), (h_m, c_m))
        goal2 = self.goal(h_m2)
        if self.goal_noise > 0:
            goal2 = goal2 + self.goal_noise * torch.randn_like(goal2)
        keep = new < 0.5  # (B, 1)
        h_m, c_m, goal = torch.where(keep, h_m, h_m2), torch.where(keep, c_m, c_m2), torch.where(keep, goal, goal2)
        # 3. the worker writes the next word under the goal (eq. 1-3, 6-8)
        c_wrk = self.worker_att(low, low_proj, mask, h_w)
        h_w, c_w = self.worker(torch.cat([c_wrk, goal, self.drop(self.embed(tokens))], 1), (h_w, c_w))
        logprobs = F.log_softmax(self.logit(self.drop(h_w)).float(), dim=-1)
        return logprobs, HrlState(h_w, c_w, h_m, c_m, goal, h_i, torch.ones_like(started), new)

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing (eq. 26): tokens (B*n, T) from BOS -> log-probabilities (B*n, T, V)."""
        memory = tuple(t.repeat_interleave(seq_per_img, 0) for t in self.encode(feats))
        state = self.init_state(memory)
        out = []
        for t in range(tokens.size(1)):
            logprobs, state = self.step(memory, state, tokens[:, t])
            out.append(logprobs)
        return torch.stack(out, 1)
