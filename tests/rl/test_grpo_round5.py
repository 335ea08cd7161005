"""GRPO's KL term beside TRL's (rl/kl.py, rl/grpo.py): k3 times the importance ratio (``grpo.kl_ratio``, TRL's
``use_bias_correction_kl``) by hand; which KL each form's gradient follows, over a whole vocabulary; and, where trl
is installed, rlcap's loss and gradient against TRL 1.16's ``GRPOTrainer._compute_loss`` on the same tensors."""

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from rlcap.rl.grpo import grpo_loss
from rlcap.rl.kl import k3_kl, ratio_weighted_k3

# two captions, three positions: caption 0 has two words (then padding), caption 1 three
LOGPROBS = [[-1.0, -0.5, 0.0], [-2.0, -1.0, -0.2]]
OLD = [[-1.1, -0.5, 0.0], [-1.5, -1.0, -0.4]]  # log-ratios 0.1, 0 | -0.5, 0, 0.2
REF = [[-1.5, -1.0, 0.0], [-1.0, -0.5, -0.7]]  # r = ref - logprobs: -0.5, -0.5 | 1, 0.5, -0.5
MASK = [[1, 1, 0], [1, 1, 1]]
ADV = [1.0, -0.5]
EPS, EPS_HIGH, MAX_LEN, BETA = 0.2, 0.3, 4, 0.1
K3_MINUS_HALF, K3_ONE, K3_HALF = math.exp(-0.5) - 0.5, math.e - 2.0, math.exp(0.5) - 1.5  # e^r - r - 1


def test_ratio_weighted_k3_by_hand():
    """ratio * k3, the ratio per token or one per sequence broadcast over its tokens."""
    logprobs, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -1.0]])
    assert torch.allclose(ratio_weighted_k3(logprobs, ref, torch.tensor([[1.0, 2.0]])),
                          torch.tensor([[0.0, 2 * (math.e - 2)]]))
    assert torch.allclose(ratio_weighted_k3(logprobs, ref, torch.tensor([[3.0]])), torch.tensor([[0.0, 3 * (math.e - 2)]]))
    with pytest.raises(ValueError, match=r"ratio_weighted_k3: expected a ratio of shape \(1, 2\) or \(1, 1\), got \(2, 2\)"):
        ratio_weighted_k3(logprobs, ref, torch.ones(2, 2))


def test_on_the_policys_samples_the_weighted_terms_gradient_is_minus_r():
    """At ratio 1 (pi_old = pi_theta), d(rho k3)/d log pi = (1 - e^r) + k3 = -r per word; k3's own is 1 - e^r."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.5]])  # r = -0.5, 1, 0
    ratio_weighted_k3(logp, ref, (logp - logp.detach()).exp()).sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.5, -1.0, 0.0]]))
    logp.grad = None
    k3_kl(logp, ref).sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[1 - math.exp(-0.5), 1 - math.e, 0.0]]))


def _expected_gradient(weighted: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The expected gradient over w ~ pi_theta of one word's term (every word of a vocabulary of 7, weighted by its
    probability, the words constants as sampled ones are), with respect to pi_theta's logits at 4 positions; and
    pi_theta's and pi_ref's log-probabilities."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 7, generator=g, requires_grad=True)
    logq = torch.randn(4, 7, generator=g).log_softmax(-1)
    logp = logits.log_softmax(-1)  # (P, V): every word of the vocabulary, as if each were the sampled one
    term = ratio_weighted_k3(logp, logq, (logp - logp.detach()).exp()) if weighted else k3_kl(logp, logq)
    (logp.detach().exp() * term).sum().backward()
    return logits.grad, logp.detach(), logq


def _closed_form_gradient(logp: torch.Tensor, logq: torch.Tensor, reverse: bool) -> torch.Tensor:
    """The gradient with respect to pi_theta's logits of KL(pi_theta || pi_ref) (``reverse``) or KL(pi_ref ||
    pi_theta), torch's closed form at every position."""
    logits = logp.clone().requires_grad_(True)
    p, q = torch.distributions.Categorical(logits=logits), torch.distributions.Categorical(logits=logq)
    (torch.distributions.kl_divergence(p, q) if reverse else torch.distributions.kl_divergence(q, p)).sum().backward()
    return logits.grad


@pytest.mark.parametrize("weighted", [False, True], ids=["k3", "ratio_times_k3"])
def test_which_kl_each_terms_gradient_follows(weighted):
    """k3's value estimates KL(pi_theta || pi_ref), but its gradient (samples fixed) is KL(pi_ref || pi_theta)'s
    ([Shao24 eq. 3] as written, rlcap's default); times the ratio it is KL(pi_theta || pi_ref)'s ([DeepSeek25]; TRL's
    use_bias_correction_kl): each against the closed form's gradient, and not the other KL's."""
    grad, logp, logq = _expected_gradient(weighted)
    assert torch.allclose(grad, _closed_form_gradient(logp, logq, reverse=weighted), atol=1e-6)
    assert not torch.allclose(grad, _closed_form_gradient(logp, logq, reverse=not weighted), atol=1e-3)


def _loss(**kwargs):
    return grpo_loss(torch.tensor(LOGPROBS), torch.tensor(OLD), torch.tensor(ADV), torch.tensor(MASK, dtype=torch.bool),
                     epsilon=EPS, epsilon_high=EPS_HIGH, ratio="token", loss="dapo", max_len=MAX_LEN, **kwargs)


def test_grpo_loss_with_kl_ratio_by_hand():
    """dapo over the 5 words: the clipped term's mean plus beta times the mean of rho * k3; the logged kl is k3's."""
    plain = float(_loss().loss)
    rho = [math.exp(0.1), 1.0, math.exp(-0.5), 1.0, math.exp(0.2)]
    k3 = [K3_MINUS_HALF, K3_MINUS_HALF, K3_ONE, K3_HALF, K3_MINUS_HALF]
    out = _loss(ref_logprobs=torch.tensor(REF), beta=BETA, kl_ratio=True)
    assert float(out.loss) == pytest.approx(plain + BETA * sum(a * b for a, b in zip(rho, k3)) / 5, rel=1e-6)
    assert float(out.kl) == pytest.approx(sum(k3) / 5, rel=1e-6)
    unweighted = _loss(ref_logprobs=torch.tensor(REF), beta=BETA)
    assert float(unweighted.loss) == pytest.approx(plain + BETA * sum(k3) / 5, rel=1e-6)


@pytest.mark.parametrize("kl_ratio", [False, True])
def test_at_the_first_update_the_kl_terms_gradient_by_hand(kl_ratio):
    """pi = pi_old: each word's KL gradient, over dapo's 5 words, is beta (1 - e^r) / 5, or beta (-r) / 5 with
    kl_ratio: what the term adds to the clipped term's gradient."""
    def grad(beta: float) -> torch.Tensor:
        logp = torch.tensor(LOGPROBS, requires_grad=True)
        grpo_loss(logp, logp.detach(), torch.tensor(ADV), torch.tensor(MASK, dtype=torch.bool), epsilon=EPS,
                  epsilon_high=EPS_HIGH, ratio="token", loss="dapo", max_len=MAX_LEN, ref_logprobs=torch.tensor(REF),
                  beta=beta, kl_ratio=kl_ratio).loss.backward()
        return logp.grad

    r = torch.tensor(REF) - torch.tensor(LOGPROBS)
    per_word = -r if kl_ratio else 1 - r.exp()
    assert torch.allclose(grad(BETA) - grad(0.0), BETA * per_word * torch.tensor(MASK) / 5, atol=1e-7)


class _OneProcess:
    """What TRL's _compute_loss asks of its accelerator, for one process."""

    num_processes, sync_gradients = 1, True

    def gather(self, x):
        return x

    def reduce(self, x, reduction):
        return x


def _trl_loss(trainer, logp, loss_type: str, level: str, kl_ratio: bool) -> torch.Tensor:
    """TRL 1.16's GRPOTrainer._compute_loss on the tensors above: its log-probability pass returns ``logp``."""
    mask = torch.tensor(MASK)
    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=level, beta=BETA,
        args=SimpleNamespace(use_bias_correction_kl=kl_ratio, delta=None, steps_per_generation=1),
        loss_type=loss_type, epsilon_low=EPS, epsilon_high=EPS_HIGH, use_vllm=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=1, max_completion_length=MAX_LEN,
        accelerator=_OneProcess(), _entropy_bonus_enabled=False, aux_loss_enabled=False,
        _metrics={"train": defaultdict(list)})
    inputs = {"prompt_ids": torch.zeros(2, 1, dtype=torch.long), "prompt_mask": torch.ones(2, 1, dtype=torch.long),
              "completion_ids": torch.zeros(2, 3, dtype=torch.long), "completion_mask": mask,
              "advantages": torch.tensor(ADV), "old_per_token_logps": torch.tensor(OLD),
              "ref_per_token_logps": torch.tensor(REF), "num_items_in_batch": mask.sum()}
    return trainer._compute_loss(fake, None, inputs)


@pytest.mark.parametrize("kl_ratio", [False, True], ids=["bias_correction_off", "bias_correction_on"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_loss_and_gradient_equal_trls(loss_type, level, kl_ratio):
    """Off the policy (ratios 0.61 to 1.22, some clipped), beta 0.1: rlcap's grpo_loss with grpo.kl_ratio equal to
    TRL's use_bias_correction_kl gives TRL's loss and gradient; with the other setting, another gradient."""
    trl = pytest.importorskip("trl")
    grads = {}
    for side, ours in (("trl", None), ("rlcap", kl_ratio), ("rlcap_other", not kl_ratio)):
        logp = torch.tensor(LOGPROBS, requires_grad=True)
        if ours is None:
            loss = _trl_loss(trl.GRPOTrainer, logp, loss_type, level, kl_ratio)
        else:
            loss = grpo_loss(logp, torch.tensor(OLD), torch.tensor(ADV), torch.tensor(MASK, dtype=torch.bool),
                             epsilon=EPS, epsilon_high=EPS_HIGH, ratio=level, loss=loss_type, max_len=MAX_LEN,
                             ref_logprobs=torch.tensor(REF), beta=BETA, kl_ratio=ours).loss
        loss.backward()
        grads[side] = (float(loss.detach()), logp.grad * torch.tensor(MASK))  # padded positions count for neither
    assert grads["rlcap"][0] == pytest.approx(grads["trl"][0], rel=1e-6, abs=1e-7)
    assert torch.allclose(grads["rlcap"][1], grads["trl"][1], atol=1e-7)
    assert not torch.allclose(grads["rlcap_other"][1], grads["trl"][1], atol=1e-4)
