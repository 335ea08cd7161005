"""The KL term (rl/kl.py): the k3 estimator against a direct computation from two policies' log-probabilities, its
expectation against the closed-form KL, its gradient, and its mean over a batch's words by hand."""

import math

import pytest
import torch

from rlcap.rl.kl import k3_kl, kl_penalty


def test_k3_by_hand():
    got = k3_kl(torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -1.0]]))
    assert torch.allclose(got, torch.tensor([[0.0, math.e - 2.0]]))


def test_kl_penalty_by_hand_is_the_mean_over_the_masked_words():
    logprobs = torch.tensor([[-1.0, -2.0], [-1.0, -3.0]])
    ref = torch.tensor([[-1.0, -1.0], [-2.0, -3.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # r = ref - logp: 0, 1, -1 over the three words; k3 = e^r - r - 1
    expected = (0.0 + (math.e - 2.0) + math.exp(-1.0)) / 3
    assert float(kl_penalty(logprobs, ref, mask)) == pytest.approx(expected, rel=1e-6)
    assert float(kl_penalty(logprobs, ref, torch.zeros_like(mask))) == 0.0


def _two_policies(seed: int, positions: int = 4, vocab: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """Two policies' log-probabilities over a vocabulary at a few positions: (positions, V) each."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(positions, vocab, generator=g).log_softmax(-1),
            torch.randn(positions, vocab, generator=g).log_softmax(-1))


def test_k3_against_a_direct_computation_from_two_policies_log_probabilities():
    """Words drawn from the policy; k3 of each from the two policies' log-probabilities, computed one by one."""
    logp, logq = _two_policies(0)
    words = torch.multinomial(logp.exp(), 5, replacement=True, generator=torch.Generator().manual_seed(1))  # (P, 5)
    mine, theirs = logp.gather(1, words), logq.gather(1, words)  # (P, 5) each
    direct = [[math.exp(q - p) - (q - p) - 1.0 for p, q in zip(row_p, row_q)]
              for row_p, row_q in zip(mine.tolist(), theirs.tolist())]
    assert torch.allclose(k3_kl(mine, theirs), torch.tensor(direct), atol=1e-6)


def test_k3s_expectation_under_the_policy_is_the_kl_divergence():
    """sum_w p(w) k3(w) = KL(p || q) exactly, at every position (k3 is unbiased): every word of the vocabulary
    scored, weighted by its probability, against torch's closed form."""
    logp, logq = _two_policies(2)
    expectation = (logp.exp() * k3_kl(logp, logq)).sum(-1)  # (P,)
    closed = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=logp),
                                               torch.distributions.Categorical(logits=logq))  # (P,)
    assert torch.allclose(expectation, closed, atol=1e-6)
    assert (closed > 0).all()


def test_k3s_gradient_is_one_minus_the_ratio_times_the_score():
    """d k3 / d log pi = 1 - pi_ref / pi; the reference's log-probabilities get no gradient."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5]], requires_grad=True)
    k3_kl(logp, ref).sum().backward()
    assert torch.allclose(logp.grad, 1.0 - (ref - logp).detach().exp())
    assert ref.grad is None


def test_shapes_must_agree():
    with pytest.raises(ValueError, match=r"k3_kl: expected logprobs and ref_logprobs of one shape \(B, T\)"):
        k3_kl(torch.zeros(2, 3), torch.zeros(2, 4))
