"""The KL term's reference (rlcap.methods.reference) of a transformers policy that reads a feature store shares the
image side the policy keeps aside (frozen, outside its weights) instead of holding a second copy of it; a policy
that trains its image side gives its reference a copy (the starting tower), and the reference's scores are the
policy's own at the start either way."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rlcap.methods.reference import REFERENCE, add_reference

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from tests.models.vlm_matrix import tiny_vlm_run

    _, model, _ = tiny_vlm_run(tmp_path_factory.mktemp("reference_tower"))
    return model


def _reference(policy: torch.nn.Module) -> torch.nn.Module:
    session = SimpleNamespace(model=SimpleNamespace(module=policy), resuming=False, parts={},
                              cfg=SimpleNamespace(rl=SimpleNamespace(kl_coef=0.04)))
    add_reference(session)
    return session.parts[REFERENCE].module


def _side_tensors(policy: torch.nn.Module) -> set[int]:
    return {p.data_ptr() for p in policy.weights.side.modules.parameters()}


def test_a_store_policys_reference_shares_its_kept_aside_tower(folder):
    from rlcap.data.feats import Feats
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from tests.models.vlm_matrix import captions, pictures

    policy = HFVLMCaptioner(folder).eval()
    reference = _reference(policy)
    assert reference.weights.side.modules is policy.weights.side.modules
    assert _side_tensors(reference) == _side_tensors(policy)
    own = {p.data_ptr() for p in policy.parameters()}
    assert own and not own & {p.data_ptr() for p in reference.parameters()}  # (the language model: a copy)
    assert not any(p.requires_grad for p in reference.parameters())
    encoder = load_vlm_encoder(folder)
    fc, att, counts = encoder.from_host(encoder.on_host(torch.from_numpy(encoder.prepare(pictures()))))
    feats = Feats(fc, att, torch.arange(att.shape[1])[None] < counts[:, None])
    tokens = captions(policy)
    with torch.no_grad():
        got, expected = reference(feats, tokens), policy(feats, tokens)
    real = torch.isfinite(expected)  # (the words rlcap never writes: -inf in both)
    assert real.any() and torch.isfinite(got).eq(real).all()
    torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-6)


def test_a_policy_training_its_tower_gives_its_reference_a_copy(folder):
    from rlcap.models.hf.vlm import HFVLMCaptioner

    policy = HFVLMCaptioner(folder, train_vision="all").eval()
    assert policy.frozen_aside() == []
    reference = _reference(policy)
    assert not _side_tensors(reference) & _side_tensors(policy)
    with torch.no_grad():
        next(policy.weights.side.modules.parameters()).add_(1.0)  # (training moves the policy's tower only)
    assert not torch.equal(next(reference.weights.side.modules.parameters()),
                           next(policy.weights.side.modules.parameters()))
