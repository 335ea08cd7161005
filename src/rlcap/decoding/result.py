"""What every decoder returns, and the checks and fix-ups shared by the decoders."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlcap.data.vocab import BOS, EOS, PAD, Vocab
from rlcap.host_sync import on_host, to_host


class DecodeResult(NamedTuple):
    tokens: torch.Tensor  # (R, T) long, PAD after EOS; with a prefix: the full caption, prefix included
    logprobs: torch.Tensor  # (R, T) log-probability of each generated token, 0 at pads and forced prefix words
    mask: torch.Tensor  # (R, T) bool, positions that count (words, prefix words included, and the EOS)
    scores: torch.Tensor  # (R,) summed logprobs; beam search: the length-penalised ranking score
    entropy: torch.Tensor  # (R, T) entropy of each generated step's distribution, 0 at pads and forced words
    hidden: torch.Tensor | None = None  # (R, T, H) model.hidden(state) each word was chosen from, 0 at pads


def outside_inference(result: DecodeResult) -> DecodeResult:
    """Copies made outside inference mode, so callers may feed them to autograd later."""
    return DecodeResult(*(None if t is None else t.clone() for t in result))


def zero_pads(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """hidden (R, T, H) with 0 where ``mask`` (R, T) is False (after EOS the model reads PAD: meaningless)."""
    return torch.where(mask[:, :, None], hidden, 0.0)


def cut_after_eos(tokens: torch.Tensor) -> torch.Tensor:
    """(R, T) word ids with PAD after each row's first EOS (the EOS is kept)."""
    eos = tokens == EOS
    after = (eos.cumsum(1) - eos.long()) > 0  # (R, T) an EOS came earlier in the row
    return tokens.masked_fill(after, PAD)


def check_prefix(prefix: torch.Tensor | None, rows: int, max_len: int, vocab_size: int) -> torch.Tensor | None:
    """The prefix as the decoders use it: None when there is none (None or zero width), else ``prefix``
    (R, P), checked: long word ids, no BOS, PAD only as right padding, at most ``max_len`` words a row.
    Words after an EOS in a prefix are ignored (the caption has ended)."""
    if prefix is None or (prefix.dim() == 2 and prefix.size(1) == 0):
        return None
    if prefix.dim() != 2 or prefix.dtype != torch.long:
        raise ValueError(f"prefix: expected a (rows, P) long tensor of word ids, got {prefix.dtype} "
                         f"of shape {tuple(prefix.shape)}")
    if prefix.size(0) != rows:
        raise ValueError(f"prefix: expected {rows} rows (one per caption decoded), got {prefix.size(0)}")
    if bool(((prefix < 0) | (prefix >= vocab_size) | (prefix == BOS)).any()):
        raise ValueError(f"prefix: expected word ids in [0, {vocab_size}) other than BOS ({BOS})")
    words = prefix != PAD
    if bool((words[:, 1:] & ~words[:, :-1]).any()):
        raise ValueError("prefix: PAD may only pad a row on the right, a word follows a PAD")
    longest = int(words.sum(1).max())
    if longest > max_len:
        raise ValueError(f"prefix: a row has {longest} words, more than max_len={max_len}")
    return prefix


def decode_captions(vocab: Vocab, *tokens: torch.Tensor) -> list[str]:
    """The words of token rows (N, T), of one or several such tensors (their rows in turn, widths may
    differ), in one transfer to the host for them all (one synchronisation on a GPU, where a transfer
    per row would be one each: rlcap.host_sync)."""
    width = max(t.size(1) for t in tokens)
    rows = to_host(torch.cat([torch.nn.functional.pad(t, (0, width - t.size(1)), value=PAD) for t in tokens]))
    with on_host():
        return [vocab.decode(row) for row in rows.tolist()]
