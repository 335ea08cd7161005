"""Sampling's draw in two levels (rlcap.decoding.word_distribution.draw: the blocks' sums, then the chosen block's
words), without a scan over the whole vocabulary (which inductor could not generate code for on an H200, issue 66
item 5): the same words as one float64 scan over the vocabulary, never a word of probability 0, and compiled as
eager. The draw's frequencies and the ends of the uniform range: tests/test_decoding.py."""

from __future__ import annotations

import pytest
import torch

from rlcap.decoding.word_distribution import draw


def one_scan(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The draw as one float64 scan over the vocabulary (what rlcap drew before): the first word whose cumulative
    sum reaches ``(1 - u) * total``."""
    cdf = probs.cumsum(dim=1, dtype=torch.float64)
    return torch.searchsorted(cdf, (1.0 - uniform[:, None]) * cdf[:, -1:]).squeeze(1)


def _rows(words: int, rows: int = 4000, seed: int = 0) -> torch.Tensor:
    """Peaked rows with many zeros (a filtered policy's), a whole block of zeros at the front."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.rand(rows, words, generator=gen) ** 4
    probs[probs < 0.05] = 0.0
    probs[:, : max(1, words // 3)] = 0.0
    probs[:, -1] += 1e-3  # (no row all zeros)
    return probs


@pytest.mark.parametrize("words", [2, 7, 100, 2107, 8513])
def test_two_levels_draw_the_words_of_one_scan_and_never_a_zero(words):
    probs = _rows(words)
    uniform = torch.rand(probs.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = draw(probs, uniform=uniform)
    assert got.dtype == torch.long and got.shape == (probs.shape[0],)
    assert torch.equal(got, one_scan(probs, uniform))
    assert (probs.gather(1, got[:, None]) > 0).all()


@pytest.mark.parametrize("uniform", [0.0, 0.5, 1.0 - 2.0 ** -53])
def test_a_block_whose_words_end_in_zeros_is_never_left_for_a_padded_word(uniform):
    """7 words in blocks of 3: the last block holds one word and two of padding; the middle block's last words are
    zeros. Every target stays on a word of positive probability."""
    probs = torch.tensor([[0.0, 0.2, 0.0, 0.5, 0.0, 0.0, 0.3]]).expand(3, -1)
    u = torch.full((3,), uniform, dtype=torch.float64)
    got = draw(probs, uniform=u)
    assert torch.equal(got, one_scan(probs, u)) and (probs.gather(1, got[:, None]) > 0).all()


def test_the_draw_compiles_as_one_graph_and_draws_eagers_words():
    probs, uniform = _rows(2107, rows=64), torch.rand(64, dtype=torch.float64)
    compiled = torch.compile(draw, fullgraph=True, dynamic=False)
    assert torch.equal(compiled(probs, uniform=uniform), draw(probs, uniform=uniform))
