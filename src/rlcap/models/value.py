"""Value network v(image, partial caption) for actor-critic training.

[Shi18 sec. 3.2.2] (Fig. 3) and 4.1: a CNN feature of the image,
an RNN over the partially generated caption and a three-layer perceptron giving one value. Here
the pooled image vector is projected and fed as the LSTM's first input (as in the policy network),
and the perceptron reads each hidden state together with the image projection.

It shares nothing with the policy: its inputs are image features and word ids, so no gradient of
its loss can reach the policy.

In [Shi18] the value network and the policy share the CNN, so the critic sees what the policy sees. An
UpDown policy attends over the region features, which :class:`ValueNetwork` never reads;
:class:`AttValueNetwork` (``ac.value_features: att``) also attends over them, with UpDown's additive
attention (Eq. 3-5, :mod:`rlcap.models.attention`) conditioned on its LSTM state at each step.
:data:`VALUE_MODELS` maps ``ac.value_features`` to the class.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from rlcap.models.attention import additive_scores, weighted_sum
from rlcap.models.base import Feats, Tensors
from rlcap.models.lstm import LSTM
from rlcap.models.model_config import ModelConfig


class ValueModel(Protocol):
    """What actor-critic training and lookahead decoding ask of a value network."""

    def __call__(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor: ...

    def start(self, feats: Feats) -> Tensors: ...

    def step(self, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]: ...


class ValueNetwork(nn.Module):
    """``values = net(feats, tokens)``: tokens (B, T) from BOS -> values (B, T), where
    ``values[:, t]`` estimates the return of the state holding the prefix ``tokens[:, :t+1]``
    (``v(s_t)``, the state the word ``tokens[:, t+1]`` is chosen from).

    Word by word (lookahead decoding): ``state = net.start(feats)``, then
    ``values, state = net.step(state, tokens)`` with BOS first; the state ``(img, h, c)`` is
    batch first, so rows are reordered with :func:`rlcap.models.select_batch`."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int = 0):
        super().__init__()  # att_dim is not read: every value network is built as cls(cfg, vocab_size, fc_dim, att_dim)
        emb, hid = cfg.embed_dim, cfg.hidden_dim
        self.img_embed = nn.Linear(fc_dim, emb)
        self.embed = nn.Embedding(vocab_size, emb)
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = LSTM(emb, hid, batch_first=True)
        # the three-layer perceptron of [Shi18 sec. 4.1]
        self.head = nn.Sequential(nn.Linear(hid + emb, hid), nn.ReLU(), nn.Linear(hid, hid), nn.ReLU(),
                                  nn.Linear(hid, 1))

    def part_spec(self) -> dict[str, Any]:
        return {"family": VALUE_FAMILY, "settings": {"features": "fc"}}

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        img = self.drop(self.img_embed(feats.fc)).repeat_interleave(seq_per_img, dim=0)  # (B, E)
        x = torch.cat([img[:, None], self.drop(self.embed(tokens))], dim=1)  # (B, 1+T, E)
        out, _ = self.rnn(x)  # (B, 1+T, H)
        out = out[:, 1:]  # (B, T, H): states after BOS, w_1, ...
        img = img[:, None].expand(-1, out.size(1), -1)  # (B, T, E)
        return self.head(torch.cat([out, img], dim=2)).squeeze(2).float()  # (B, T)

    def start(self, feats: Feats) -> Tensors:
        """The state after reading the image: ``(img (B, E), h (B, H), c (B, H))``."""
        img = self.drop(self.img_embed(feats.fc))  # (B, E)
        _, (h, c) = self.rnn(img[:, None])  # (1, B, H) each
        return img, h[0], c[0]

    def step(self, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """Read one word per row, ``tokens`` (R,): the value of the new state (R,) and the state."""
        img, h, c = state
        out, (h, c) = self.rnn(self.drop(self.embed(tokens))[:, None], (h[None], c[None]))  # out (R, 1, H)
        value = self.head(torch.cat([out[:, 0], img], dim=1)).squeeze(1).float()  # (R,)
        return value, (img, h[0], c[0])


class AttValueNetwork(nn.Module):
    """:class:`ValueNetwork` that also reads the regions: at each step its LSTM state ``h_t`` attends
    over the region features (UpDown's Eq. 3-5, ``v_hat_t = sum_i alpha_i v_i``), and the
    three-layer perceptron reads ``[h_t; v_hat_t]``. The pooled vector is still the LSTM's first input.

    Same interfaces as :class:`ValueNetwork`. The step state is ``(h, c, att, p_att2, att_bias)``
    with the image's embedded regions (R, N, H), their attention keys (R, N, A) and mask bias (R, N)
    kept per row, so that :func:`rlcap.models.select_batch` reorders them with ``h`` and ``c``
    (lookahead holds them once per candidate row)."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, fc_dim: int, att_dim: int):
        super().__init__()
        emb, hid, att_hid = cfg.embed_dim, cfg.hidden_dim, cfg.att_hidden_dim
        self.img_embed = nn.Linear(fc_dim, emb)
        self.embed = nn.Embedding(vocab_size, emb)
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = LSTM(emb, hid, batch_first=True)
        self.att_embed = nn.Sequential(nn.Linear(att_dim, hid), nn.ReLU(), nn.Dropout(cfg.dropout))  # as UpDown's
        self.ctx2att = nn.Linear(hid, att_hid)  # W_va
        self.h2att = nn.Linear(hid, att_hid, bias=False)  # W_ha
        self.alpha = nn.Linear(att_hid, 1, bias=False)  # w_a; its weight is used by additive_scores
        self.head = nn.Sequential(nn.Linear(2 * hid, hid), nn.ReLU(), nn.Linear(hid, hid), nn.ReLU(),
                                  nn.Linear(hid, 1))  # reads [h_t; v_hat_t]

    def part_spec(self) -> dict[str, Any]:
        return {"family": VALUE_FAMILY, "settings": {"features": "att"}}

    def regions(self, feats: Feats) -> Tensors:
        """Once per image: ``(att (I, N, H), p_att2 (I, N, A), att_bias (I, N))``, -inf at padded regions."""
        att = self.att_embed(feats.att)  # (I, N, H)
        p_att2 = 2.0 * self.ctx2att(att)  # (I, N, A) 2 W_va v_i (see attend)
        att_bias = torch.zeros_like(att[..., 0]).masked_fill(~feats.att_mask, float("-inf"))  # (I, N)
        return att, p_att2, att_bias

    def attend(self, att: torch.Tensor, p_att2: torch.Tensor, att_bias: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``v_hat`` (I, n, H) for the states ``h`` (I, n, H), n rows per image, as UpDown computes it:
        ``w_a^T tanh(z) = 2 w_a^T sigmoid(2 z) - sum(w_a)``, whose constant cancels in the softmax."""
        scores = 2.0 * additive_scores(p_att2, 2.0 * self.h2att(h), self.alpha.weight[0])  # (I, n, N)
        weights = torch.softmax(scores + att_bias.unsqueeze(1), dim=2)  # (I, n, N); 0 at padded regions
        return weighted_sum(weights, att)  # (I, n, H)

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        img = self.drop(self.img_embed(feats.fc)).repeat_interleave(seq_per_img, dim=0)  # (B, E)
        x = torch.cat([img[:, None], self.drop(self.embed(tokens))], dim=1)  # (B, 1+T, E)
        out, _ = self.rnn(x)  # (B, 1+T, H)
        out = out[:, 1:]  # (B, T, H): states after BOS, w_1, ...
        att, p_att2, att_bias = self.regions(feats)  # once per image (I = B / seq_per_img)
        rows, steps, hid = out.shape
        # one image's rows are adjacent, so its n captions' T states are one group of n*T queries
        ctx = self.attend(att, p_att2, att_bias, out.reshape(att.size(0), -1, hid)).view(rows, steps, hid)
        return self.head(torch.cat([out, ctx], dim=2)).squeeze(2).float()  # (B, T)

    def start(self, feats: Feats) -> Tensors:
        """The state after reading the image: ``(h (B, H), c (B, H), att, p_att2, att_bias)``."""
        img = self.drop(self.img_embed(feats.fc))  # (B, E)
        _, (h, c) = self.rnn(img[:, None])  # (1, B, H) each
        return (h[0], c[0], *self.regions(feats))

    def step(self, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """Read one word per row, ``tokens`` (R,): the value of the new state (R,) and the state."""
        h, c, att, p_att2, att_bias = state
        out, (h, c) = self.rnn(self.drop(self.embed(tokens))[:, None], (h[None], c[None]))  # out (R, 1, H)
        ctx = self.attend(att, p_att2, att_bias, out)  # (R, 1, H): each row its own image's regions
        value = self.head(torch.cat([out[:, 0], ctx[:, 0]], dim=1)).squeeze(1).float()  # (R,)
        return value, (h[0], c[0], att, p_att2, att_bias)


class HiddenValueNetwork(nn.Module):
    """``values = net(hidden)``: the policy's decoder states (R, T, H), detached by the caller, -> (R, T), ``v(s_t)``
    from the state word ``t`` is chosen from (``DecodeResult.hidden``), by [Shi18 sec. 4.1]'s three-layer perceptron
    (``ac.value_features: hidden``). The value reads what the policy computed rather than an RNN of its own: for a
    pretrained transformers policy, whose decoder sees the image through its own tower and subwords, that state is
    the richest summary of (image, prefix) at hand. Nothing of its loss reaches the policy (the input is detached),
    as with the other value networks. It has no state to step word by word: lookahead decoding (``ac.lookahead``)
    needs ``fc`` or ``att``."""

    def __init__(self, hidden_dim: int):
        super().__init__()
        self.head = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, hidden_dim),
                                  nn.ReLU(), nn.Linear(hidden_dim, 1))

    def part_spec(self) -> dict[str, Any]:
        return {"family": VALUE_FAMILY, "settings": {"features": FROM_POLICY_STATE}}

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden).squeeze(-1).float()  # (R, T)


# ac.value_features: hidden -> HiddenValueNetwork, on the policy's decoder states (built by its width)
FROM_POLICY_STATE = "hidden"
# ac.value_features -> the value network that reads them; each is built as cls(cfg, vocab_size, fc_dim, att_dim)
VALUE_MODELS: dict[str, type[nn.Module]] = {"fc": ValueNetwork, "att": AttValueNetwork}
VALUE_FAMILY = "value"  # the family a value network's part spec names (DescribesItself)


def value_features(spec: dict[str, Any] | None, weights: dict[str, torch.Tensor]) -> str:
    """The features a saved value network reads: its part spec's (``settings.features``), or, for a checkpoint of a
    release that recorded no specs, what its weights show (regions' attention: ``att``; no RNN of its own:
    ``hidden``)."""
    if spec is not None:
        return spec["settings"]["features"]
    if any(key.startswith("att_embed.") for key in weights):
        return "att"
    return "fc" if any(key.startswith("rnn.") for key in weights) else FROM_POLICY_STATE
