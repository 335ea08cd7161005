"""The seam between the RL loop and generation (rlcap.decoding.engine): a policy sampled without autograd and scored
in one pass has its words drawn by its engine, rlcap's own by default; an engine plugged into the policy (as vLLM
would be) gives the words, and the log-probabilities the loss differentiates are still the policy's own, with
nothing in the decoders or the methods changed."""

from __future__ import annotations

import pytest
import torch

from rlcap.data.vocab import EOS, PAD
from rlcap.decoding import Decoding, sample
from rlcap.decoding.engine import GenerationEngine, Request
from rlcap.decoding.result import DecodeResult
from rlcap.decoding.sampling import OWN
from rlcap.decoding.scoring import score_captions
from tests.models.test_hf_scoring import _policy, folders  # noqa: F401 (the module's fixture)

pytest.importorskip("transformers")
N, MAX_LEN = 2, 6


class Replay:
    """An engine that writes the captions it is given (rows of rlcap ids) whatever the request, with made-up
    log-probabilities, and records the requests it got."""

    def __init__(self, tokens: torch.Tensor):
        self.tokens, self.requests = tokens, []

    def generate(self, model, memory, request: Request) -> DecodeResult:
        self.requests.append(request)
        mask = self.tokens != PAD
        made_up = torch.where(mask, -0.5, 0.0)
        return DecodeResult(self.tokens, made_up, mask, made_up.sum(1), torch.zeros_like(made_up))


def _replayed(vocab_size: int) -> torch.Tensor:
    rows = [[5, 6, EOS, PAD, PAD], [7, EOS, PAD, PAD, PAD], [8, 9, 10, 11, EOS], [5, EOS, PAD, PAD, PAD],
            [12, 13, EOS, PAD, PAD], [6, 6, 6, EOS, PAD]]
    tokens = torch.tensor(rows)
    assert int(tokens.max()) < vocab_size
    return tokens


def test_rlcaps_decoding_is_an_engine_and_the_default():
    assert isinstance(OWN, GenerationEngine)


def test_a_plugged_engine_writes_the_words_and_the_policy_scores_them(folders):
    policy, feats = _policy(folders["git"])
    engine = Replay(_replayed(policy.vocab_size))
    policy.generation_engine = engine
    out = sample(policy, feats, N, Decoding("sample", MAX_LEN, temperature=0.7, top_k=5),
                 generator=torch.Generator().manual_seed(5))
    assert torch.equal(out.tokens, engine.tokens) and torch.equal(out.mask, engine.tokens != PAD)
    (request,) = engine.requests
    assert (request.rows, request.max_len, request.sampler.temperature, request.sampler.top_k) == (6, MAX_LEN, 0.7, 5)
    assert request.uniform.shape == (MAX_LEN, 6) and request.prefix is None
    # the loss's log-probabilities are the policy's own scores of those words, with autograd, not the engine's
    assert out.logprobs.requires_grad
    del policy.generation_engine
    with torch.no_grad():
        own, _ = score_captions(policy, feats, N, engine.tokens)
    torch.testing.assert_close(out.logprobs.detach(), own, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out.logprobs.detach()[out.mask], torch.full_like(own[out.mask], -0.5))
    out.logprobs.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())


def test_the_own_engine_plugged_by_hand_samples_as_the_default(folders):
    policy, feats = _policy(folders["git"])
    runs = []
    for engine in (None, OWN):
        if engine is not None:
            policy.generation_engine = engine
        runs.append(sample(policy, feats, N, Decoding("sample", MAX_LEN), generator=torch.Generator().manual_seed(5)))
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    torch.testing.assert_close(runs[0].logprobs, runs[1].logprobs, rtol=0, atol=0)


def test_a_method_rollout_takes_the_engines_words(folders):
    """SCST's rollout (rlcap.methods.samples.rollout), unchanged, samples through the plugged engine."""
    from types import SimpleNamespace

    from rlcap.methods.samples import rollout

    policy, feats = _policy(folders["git"])
    engine = Replay(_replayed(policy.vocab_size))
    policy.generation_engine = engine
    batch = SimpleNamespace(feats=feats, refs=[["a"], ["b"], ["c"]], index=[0, 1, 2], ids=["0", "1", "2"])
    cfg = SimpleNamespace(n_samples=N, sample_method="sample", micro_batch=0)
    out = rollout(policy, batch, None, cfg, Decoding("sample", MAX_LEN), text=False)
    assert torch.equal(out.tokens, engine.tokens) and out.logprobs.requires_grad
