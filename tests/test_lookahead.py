"""Lookahead inference ([Shi18 Fig. 1]): lambda = 1 is plain beam search; below 1 the value network's
opinion of the next state reranks the words."""

import pytest
import torch

from rlcap.data.vocab import EOS, PAD
from rlcap.decoding import Decoding, beam_search, lookahead_search
from rlcap.errors import ConfigError
from rlcap.models import Feats, ModelConfig, build_model, build_value_model

V = 11


def tiny(arch):
    torch.manual_seed(3)
    cfg = ModelConfig(arch=arch, embed_dim=16, hidden_dim=16, att_hidden_dim=16, num_layers=1, num_heads=2,
                      ff_dim=32, dropout=0.0)
    return build_model(cfg, V, 6, 6).eval(), build_value_model(cfg, V, 6).eval()


def feats(n=4):
    torch.manual_seed(4)
    return Feats(torch.randn(n, 6), torch.randn(n, 3, 6), torch.ones(n, 3, dtype=torch.bool))


@pytest.mark.parametrize("arch", ["fc", "updown", "transformer"])
@pytest.mark.parametrize("length_penalty,n_best,candidates", [(0.0, 1, 0), (1.0, 2, 0), (0.0, 3, 7)])
def test_lambda_one_is_beam_search(arch, length_penalty, n_best, candidates):
    policy, value_net = tiny(arch)
    f = feats()
    expected = beam_search(policy, f, Decoding("beam", 7, beam_size=3, length_penalty=length_penalty), n_best=n_best)
    got = lookahead_search(policy, value_net, f, beam_size=3, max_len=7, lam=1.0, length_penalty=length_penalty,
                           n_best=n_best, candidates=candidates)
    for name in ("tokens", "logprobs", "mask", "scores", "entropy"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name


class CountingValue:
    """A value 'network' whose value is the number of times word ``target`` has been read."""

    def __init__(self, target):
        self.target = target

    def start(self, feats):
        return (torch.zeros(feats.fc.size(0)),)

    def step(self, state, tokens):
        count = state[0] + (tokens == self.target).float()
        return count, (count,)


def test_the_value_reranks_words_below_lambda_one():
    policy, _ = tiny("fc")
    f, target = feats(2), 7
    plain = lookahead_search(policy, CountingValue(target), f, beam_size=2, max_len=5, lam=1.0)
    assert not bool((plain.tokens == target).all())
    # lambda 0: only the value counts, and every extra target word raises it; EOS keeps the value
    # of its state, so it never beats one more target word
    only_value = lookahead_search(policy, CountingValue(target), f, beam_size=2, max_len=5, lam=0.0, candidates=V)
    assert only_value.tokens.tolist() == [[target] * 5] * 2
    assert bool((only_value.mask == (only_value.tokens != PAD)).all())
    # the final score is lam * logprob + (1 - lam) * v of the finished caption
    mixed = lookahead_search(policy, CountingValue(target), f, beam_size=2, max_len=5, lam=0.5, candidates=V)
    count = (mixed.tokens == target).sum(1).float()
    torch.testing.assert_close(mixed.scores, 0.5 * mixed.logprobs.sum(1) + 0.5 * count)


def test_an_ended_caption_keeps_the_value_of_the_state_that_chose_eos():
    policy, _ = tiny("fc")
    got = lookahead_search(policy, CountingValue(EOS), feats(2), beam_size=2, max_len=5, lam=0.0, candidates=V)
    # reading EOS would count 1, but an ended caption is valued where it stood: 0, like every other
    assert got.scores.tolist() == [0.0, 0.0]


def test_bad_settings_fail_with_one_line():
    policy, value_net = tiny("fc")
    with pytest.raises(ConfigError, match="lambda must be in"):
        lookahead_search(policy, value_net, feats(), 3, 5, lam=1.5)
    with pytest.raises(ConfigError, match="candidates"):
        lookahead_search(policy, value_net, feats(), 3, 5, lam=0.5, candidates=2)
