"""rollout: the captions, log-probabilities and entropies an RL step trains on."""

import pytest
import torch

from rlcap.data.loader import Batch
from rlcap.data.vocab import EOS, SPECIALS, Vocab
from rlcap.models import Feats, ModelConfig, build_model
from rlcap.decoding.options import Decoding
from rlcap.run_config import DecodeSettings, RLConfig
from rlcap.methods.samples import rollout


@pytest.mark.parametrize("method", ["sample", "beam"])
def test_captions_that_end_early_give_finite_logprobs_and_gradients(method):
    """Padded positions have log-probability -inf under the policy (PAD is never generated);
    the rollout must zero them, not multiply them by the mask (which gives NaN)."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch="fc", embed_dim=8, hidden_dim=8, num_layers=1, dropout=0.0)
    model = build_model(cfg, 8, 6, 6)
    with torch.no_grad():
        model.logit.bias[EOS] += 3.0  # most captions end after a word or two
    feats = Feats(torch.randn(2, 6), torch.randn(2, 3, 6), torch.ones(2, 3, dtype=torch.bool))
    batch = Batch(torch.arange(2), ["1", "2"], feats, torch.zeros(2, 3, dtype=torch.long), [["a b"], ["c d"]])
    vocab = Vocab([*SPECIALS, "a", "b", "c", "d"])
    roll = rollout(model, batch, vocab, RLConfig(n_samples=3, sample_method=method),
                   Decoding.of_run(DecodeSettings(max_len=8), "cpu"))
    assert (~roll.mask).any(), "some captions must end before max_len for this test to mean anything"
    assert torch.isfinite(roll.logprobs).all() and torch.isfinite(roll.entropy).all()
    assert (roll.logprobs[~roll.mask] == 0).all() and (roll.logprobs[roll.mask] < 0).all()
    (roll.logprobs.sum() + roll.entropy.sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
