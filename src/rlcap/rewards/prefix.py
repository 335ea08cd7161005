"""The score of every prefix of a caption, for per-word delta rewards: [Wang18 sec. 3.3.3] gives word a_t
the reward f(a_t) = R(a_1..a_t) - R(a_1..a_{t-1}) (:func:`rlcap.rl.hrl.delta_rewards` takes the
differences). All the prefixes of a batch are scored in one call of the reward."""

from __future__ import annotations

import torch

from rlcap.data.vocab import EOS, PAD, Vocab
from rlcap.host_sync import on_host, to_device, to_host
from rlcap.rewards.batch import Reward, RewardBatch


def prefix_scores(reward: Reward, vocab: Vocab, tokens: torch.Tensor, batch: RewardBatch) -> torch.Tensor:
    """``reward`` of every prefix of every caption: tokens (B, T) word ids (PAD after EOS) -> (B, T) float,
    on the tokens' device, in one reward call.

    Position t holds the score of the caption's words up to and including t. At EOS the finished caption
    is scored again (its delta is 0); padding is not scored (0). ``batch`` is the context of the B
    captions (one image id and reference list each); the prefixes are scored without features."""
    host_tokens = to_host(tokens)  # one transfer; the metric is CPU code
    with on_host():
        return to_device(_prefix_scores_on_host(reward, vocab, host_tokens, batch), tokens.device)


def _prefix_scores_on_host(reward: Reward, vocab: Vocab, tokens: torch.Tensor, batch: RewardBatch) -> torch.Tensor:
    positions, captions, ids, refs = [], [], [], []
    for row, caption in enumerate(tokens.tolist()):
        words: list[str] = []
        for t, token in enumerate(caption):
            if token == PAD:
                break
            if token != EOS:
                words.append(vocab.itos[token])
            positions.append((row, t))
            captions.append(" ".join(words))
            ids.append(batch.image_ids[row])
            refs.append(batch.refs[row])
    values = reward(captions, RewardBatch(ids, refs)).tolist() if captions else []
    out = torch.zeros(tokens.shape)  # cpu: filled on the host, copied to the device once
    for (row, t), value in zip(positions, values):
        out[row, t] = value
    return out
