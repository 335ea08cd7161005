"""rlcap.decoding.scoring's pure parts: the sampled words' log-probabilities and entropies with a backward pass of
their own (word_stats) against autograd over the plain formulas, and the positions a prefix forces."""

import torch

from rlcap.data.vocab import BOS, PAD
from rlcap.decoding import banned_words, entropy, word_logprobs
from rlcap.decoding.scoring import forced_positions, word_stats


def _reference(scores: torch.Tensor, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain formulas in the scores' precision (decoding's ``entropy`` computes in fp32)."""
    lp = word_logprobs(scores, banned_words(scores.size(-1), scores))  # (R, T, V)
    p = lp.exp()
    return lp.gather(2, words[..., None]).squeeze(2), -(p * torch.where(p > 0, lp, 0.0)).sum(-1)


def test_word_stats_and_their_gradient_are_the_plain_formulas():
    """Float64, a column at -inf (a token the model lacks), random weights on both outputs: the values and the
    gradient of the scores equal autograd's through log-softmax, gather and the entropy."""
    torch.manual_seed(0)
    scores = torch.randn(3, 4, 9, dtype=torch.float64) * 3
    scores[..., 6] = float("-inf")
    words = torch.randint(2, 9, (3, 4))
    words[words == 6] = 7
    w_lp, w_ent = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    ours = scores.clone().requires_grad_(True)
    lp, ent = word_stats(ours, words)
    ((lp * w_lp).sum() + (ent * w_ent).sum()).backward()
    theirs = scores.clone().requires_grad_(True)
    ref_lp, ref_ent = _reference(theirs, words)
    ((ref_lp * w_lp).sum() + (ref_ent * w_ent).sum()).backward()
    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=1e-12)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=0, atol=1e-12)
    assert bool(ours.grad[..., [PAD, BOS, 6]].eq(0).all())  # banned and absent words get no gradient
    decoding = entropy(word_logprobs(scores, banned_words(9, scores)).flatten(0, 1)).view(3, 4)  # (fp32)
    torch.testing.assert_close(ent.float(), decoding, rtol=0, atol=1e-5)


def test_a_masked_pad_word_gives_a_finite_gradient():
    """A PAD word (after EOS) has log-probability -inf; masked out with ``where``, the gradient stays finite."""
    scores = torch.randn(2, 3, 6, requires_grad=True)
    words = torch.tensor([[4, 5, PAD], [4, PAD, PAD]])
    lp, ent = word_stats(scores, words)
    assert torch.isinf(lp[words == PAD]).all()
    counts = words != PAD
    (torch.where(counts, lp, 0.0).sum() + torch.where(counts, ent, 0.0).sum()).backward()
    assert torch.isfinite(scores.grad).all() and bool(scores.grad[1, 1:].eq(0).all())


def test_forced_positions():
    prefix = torch.tensor([[5, 6], [7, PAD]])
    assert forced_positions(None, 3) is None
    assert forced_positions(prefix, 3).tolist() == [[True, True, False], [True, False, False]]
    assert forced_positions(prefix, 1).tolist() == [[True], [True]]
