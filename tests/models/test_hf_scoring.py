"""A transformers captioner sampled without autograd and scored in one teacher-forced pass
(rlcap.models.base.ScoresSamples, rlcap.decoding.scoring, rlcap.models.hf.scoring), for VisionEncoderDecoder (ViT +
GPT-2), BLIP and GIT built tiny: the sampling and scoring passes give the same log-probabilities (fp32, 1e-5), the
gradients of autograd through every step, in micro-batches those of one pass (1e-6), and without dropout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rlcap.data.feats import Feats
from rlcap.data.vocab import PAD
from rlcap.decoding import Decoding, sample, word_logprobs
from rlcap.decoding.scoring import score_captions
from rlcap.models.base import ScoresSamples
from rlcap.rl.losses import reinforce_loss
from tests.encoders.hf_models import save_tiny

transformers = pytest.importorskip("transformers")
CAPTIONERS = ("vision_encoder_decoder", "blip", "git")
N, MAX_LEN = 2, 8  # samples an image, steps


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from rlcap.models.hf.build_captioner import train_tokenizer

    base = tmp_path_factory.mktemp("hf_scoring")
    tokenizer = train_tokenizer([" ".join(f"w{i}" for i in range(95))], kind="word")
    found = {kind: save_tiny(kind, base / kind, seed=3) for kind in CAPTIONERS}
    for folder in found.values():
        tokenizer.save_pretrained(folder)
    return found


def _policy(folder, dropout: float = 0.0):
    """The policy in training mode, every dropout module at ``dropout``, and the stored tokens of 3 images."""
    from rlcap.models.hf.captioner import HFCaptioner

    policy = HFCaptioner(folder)
    for module in policy.modules():
        if isinstance(module, nn.Dropout):
            module.p = dropout
    torch.manual_seed(0)
    att = torch.randn(3, 17, 32)
    return policy, Feats(att[:, 0], att, torch.ones(att.shape[:2], dtype=torch.bool))


def _sample(policy, feats, **kwargs):
    return sample(policy, feats, N, Decoding("sample", MAX_LEN), generator=torch.Generator().manual_seed(5), **kwargs)


def _grads(policy) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
    policy.zero_grad(set_to_none=True)
    return grads


def _loss(out) -> torch.Tensor:
    """An SCST-like loss over everything the route returns: log-probabilities, entropies, hidden states."""
    advantage = torch.linspace(-1.0, 1.0, out.tokens.size(0))
    return reinforce_loss(out.logprobs, out.mask, advantage) - 0.1 * out.entropy.sum() + 0.01 * out.hidden.sum()


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_the_sampling_and_scoring_passes_agree(folders, kind):
    """With autograd, the words are the ones sampling without it draws, and the scored log-probabilities, entropies
    and hidden states are the sampling steps' own (fp32, 1e-5), with a prefix forced (MIXER's) too."""
    policy, feats = _policy(folders[kind])
    policy.eval()
    assert isinstance(policy, ScoresSamples)
    prefix = torch.tensor([[5, 6, 7], [5, PAD, PAD], [8, 9, PAD], [10, PAD, PAD], [11, 12, 13], [14, 15, PAD]])
    for forced in (None, prefix):
        with torch.no_grad():
            stepped = _sample(policy, feats, prefix=forced, return_hidden=True)
        scored = _sample(policy, feats, prefix=forced, return_hidden=True)
        assert scored.logprobs.requires_grad and scored.hidden.requires_grad
        assert torch.equal(scored.tokens, stepped.tokens) and torch.equal(scored.mask, stepped.mask)
        for name in ("logprobs", "entropy", "hidden", "scores"):
            torch.testing.assert_close(getattr(scored, name), getattr(stepped, name), rtol=0, atol=1e-5)
        if forced is not None:  # forced words: logprob and entropy 0, as the steps give them
            kept = torch.nn.functional.pad(forced != PAD, (0, scored.tokens.size(1) - forced.size(1)))
            assert bool((scored.logprobs[kept] == 0).all()) and bool((scored.entropy[kept] == 0).all())
            assert bool((scored.logprobs[scored.mask & ~kept] < 0).all())


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_the_gradients_are_those_of_autograd_through_every_step(folders, kind):
    policy, feats = _policy(folders[kind])
    policy.eval()
    policy.scores_samples = False  # autograd through every decoding step, as before
    _loss(_sample(policy, feats, return_hidden=True)).backward()
    stepped = _grads(policy)
    policy.scores_samples = True
    _loss(_sample(policy, feats, return_hidden=True)).backward()
    scored = _grads(policy)
    assert stepped.keys() == scored.keys() and len(scored) > 10
    for name, grad in stepped.items():
        torch.testing.assert_close(scored[name], grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_micro_batches_give_the_loss_and_gradients_of_one_pass(folders, kind, monkeypatch):
    """rl.micro_batch: passes of 4 rows (whole images, n = 2) and of 3 (splitting an image's rows) give one pass's
    loss and gradients within 1e-6 (fp32: 1e-6 absolute plus 1e-6 relative); each pass is computed again in the backward pass (torch.utils.checkpoint),
    still without dropout although the policy is in training mode with dropout 0.5 (and back in it after)."""
    policy, feats = _policy(folders[kind], dropout=0.5)
    tokens = torch.randint(4, policy.vocab_size, (3, 6))
    assert not torch.equal(policy(feats, tokens), policy(feats, tokens))  # its dropout is on in training mode
    calls = []
    real = type(policy).score_samples
    monkeypatch.setattr(type(policy), "score_samples", lambda self, *a: calls.append(1) or real(self, *a))
    with torch.no_grad():
        policy.eval()
        drawn = _sample(policy, feats, return_hidden=True)  # the steps' own values, without dropout
        policy.train()
        again = _sample(policy, feats, return_hidden=True)  # without autograd in training mode: no dropout either
    assert torch.equal(again.tokens, drawn.tokens) and torch.equal(again.logprobs, drawn.logprobs)
    results = {}
    for micro_batch in (0, 4, 3):
        calls.clear()
        out = _sample(policy, feats, return_hidden=True, micro_batch=micro_batch)
        loss = _loss(out)
        passes = len(calls)
        loss.backward()
        assert policy.training
        assert (passes, len(calls)) == ((1, 1) if micro_batch == 0 else (2, 4))  # each pass again in backward
        assert torch.equal(out.tokens, drawn.tokens)
        torch.testing.assert_close(out.logprobs, drawn.logprobs, rtol=0, atol=1e-5)
        results[micro_batch] = (loss.detach(), _grads(policy))
    one_loss, one_grads = results[0]
    for micro_batch in (4, 3):
        loss, grads = results[micro_batch]
        torch.testing.assert_close(loss, one_loss, rtol=1e-6, atol=1e-6)
        assert grads.keys() == one_grads.keys()
        for name, grad in one_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-6, atol=1e-6, msg=f"{micro_batch}: {name}")


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_micro_batches_run_once_each_in_the_backward_pass(folders, kind, monkeypatch):
    """Without hidden states, rl.micro_batch's forward returns the sampling steps' own values and its backward
    runs each micro-batch's scoring pass once (no pass is computed twice): the loss and gradients of one pass
    within 1e-6, in training mode with dropout 0.5 (off in both passes)."""
    policy, feats = _policy(folders[kind], dropout=0.5)
    calls = []
    real = type(policy).score_samples
    monkeypatch.setattr(type(policy), "score_samples", lambda self, *a: calls.append(1) or real(self, *a))
    results = {}
    for micro_batch in (0, 4, 3):
        calls.clear()
        out = _sample(policy, feats, micro_batch=micro_batch)
        advantage = torch.linspace(-1.0, 1.0, out.tokens.size(0))
        loss = reinforce_loss(out.logprobs, out.mask, advantage) - 0.1 * out.entropy.sum()
        passes = len(calls)
        loss.backward()
        assert (passes, len(calls)) == ((1, 1) if micro_batch == 0 else (0, 2))
        results[micro_batch] = (out.logprobs.detach(), loss.detach(), _grads(policy))
    one_lp, one_loss, one_grads = results[0]
    for micro_batch in (4, 3):
        lp, loss, grads = results[micro_batch]
        torch.testing.assert_close(lp, one_lp, rtol=0, atol=1e-5)
        torch.testing.assert_close(loss, one_loss, rtol=1e-6, atol=1e-6)
        assert grads.keys() == one_grads.keys() and len(grads) > 10
        for name, grad in one_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-6, atol=1e-6, msg=f"{micro_batch}: {name}")


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_given_captions_are_scored_as_the_models_forward(folders, kind):
    """A beam's n-best and WTF-RL's trajectories (score_captions, what teacher_forced_logprobs gives for such a
    policy): the model's own teacher-forced log-probabilities in eval mode, 0 at padding."""
    from rlcap.data.vocab import BOS, EOS

    policy, feats = _policy(folders[kind], dropout=0.5)
    torch.manual_seed(2)
    words = torch.randint(4, policy.vocab_size, (6, 5))
    tokens = torch.cat([words, torch.full((6, 1), EOS)], 1)
    tokens[1, 2:], tokens[4, 4:] = EOS, PAD  # captions of 3 and 4 tokens
    tokens[1, 3:] = PAD
    logprobs, entropies = score_captions(policy, feats, N, tokens, micro_batch=4)
    assert policy.training and logprobs.requires_grad
    with torch.no_grad():
        policy.eval()
        inputs = torch.cat([torch.full((6, 1), BOS), tokens[:, :-1]], 1)
        logits = policy(feats, inputs, seq_per_img=N)  # (6, 6, V)
    lp = word_logprobs(logits, torch.zeros(logits.size(-1)).index_fill(0, torch.tensor([PAD, BOS]), float("-inf")))
    expected = torch.where(tokens != PAD, lp.gather(2, tokens[..., None]).squeeze(2), 0.0)
    torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-5)
    assert bool((entropies[tokens == PAD] == 0).all()) and bool((entropies[tokens != PAD] > 0).all())
