"""The value network that attends over the regions (``ac.value_features: att``): shapes, teacher
forcing == word by word, the regions and their mask, reordering, and lookahead decoding with it."""

import pytest
import torch

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding import Decoding, beam_search, lookahead_search
from rlcap.errors import ConfigError
from rlcap.models import (VALUE_MODELS, AttValueNetwork, Feats, ModelConfig, ValueNetwork, build_model,
                          build_value_model, select_batch)

V, FC, ATT, B, N, T = 13, 6, 5, 3, 4, 5


def cfg(dropout=0.0):
    return ModelConfig(arch="updown", embed_dim=8, hidden_dim=8, att_hidden_dim=6, dropout=dropout)


def net(dropout=0.0):
    torch.manual_seed(0)
    return build_value_model(cfg(dropout), V, FC, ATT, features="att")


def make_feats(seed=0):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 2:] = False  # image 1 has 2 regions, image 2 has 3
    mask[2, 3:] = False
    return Feats(torch.randn(B, FC, generator=gen), torch.randn(B, N, ATT, generator=gen), mask)


def make_tokens(rows=B, seed=1):
    tokens = torch.randint(4, V, (rows, T), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0] = BOS
    return tokens


def stepped(value_net, feats, tokens, n):
    """Values word by word from start/step, each image's state repeated for its n rows."""
    state = select_batch(value_net.start(feats), torch.arange(feats.fc.size(0)).repeat_interleave(n))
    values = []
    for t in range(tokens.size(1)):
        value, state = value_net.step(state, tokens[:, t])
        values.append(value)
    return torch.stack(values, 1)  # (B*n, T)


def test_build_picks_the_network_by_features():
    assert isinstance(build_value_model(cfg(), V, FC, ATT, features="fc"), ValueNetwork)
    assert isinstance(net(), AttValueNetwork) and tuple(VALUE_MODELS) == ("fc", "att")
    assert sum(isinstance(m, torch.nn.Linear) for m in net().head) == 3  # [Shi18 sec. 4.1]'s perceptron
    with pytest.raises(ConfigError, match="expected one of fc, att"):
        build_value_model(cfg(), V, FC, ATT, features="regions")
    with pytest.raises(ConfigError, match="needs region features"):
        build_value_model(cfg(), V, FC, 0, features="att")


@pytest.mark.parametrize("n", [1, 3])
def test_teacher_forcing_equals_word_by_word(n):
    value_net, feats = net().eval(), make_feats()
    tokens = make_tokens(B * n)
    expected = value_net(feats, tokens, seq_per_img=n)
    assert expected.shape == (B * n, T)
    with torch.no_grad():
        torch.testing.assert_close(stepped(value_net, feats, tokens, n), expected)


def test_the_regions_count_and_padded_ones_do_not():
    value_net, feats, tokens = net().eval(), make_feats(), make_tokens()
    values = value_net(feats, tokens)
    padded = feats.att.clone()
    padded[~feats.att_mask] = 100.0  # only padded regions change
    torch.testing.assert_close(value_net(feats._replace(att=padded), tokens), values)
    moved = feats.att.clone()
    moved[:, 0] += 1.0  # a real region of every image changes
    changed = value_net(feats._replace(att=moved), tokens) - values
    assert bool((changed.abs() > 1e-6).all(dim=1).all())  # at every step of every row


def test_state_reorders_with_select_batch():
    value_net, feats, tokens = net().eval(), make_feats(), make_tokens()
    with torch.no_grad():
        _, state = value_net.step(value_net.start(feats), tokens[:, 0])
        order = torch.tensor([2, 0, 1, 1])
        values, _ = value_net.step(state, tokens[:, 1])
        reordered, _ = value_net.step(select_batch(state, order), tokens[order, 1])
    torch.testing.assert_close(reordered, values[order])


def test_gradient_reaches_every_parameter():
    value_net = net(dropout=0.1).train()
    value_net(make_feats(), make_tokens(2 * B), seq_per_img=2).square().mean().backward()
    assert [name for name, p in value_net.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0] == []


def test_lookahead_with_the_att_value_network():
    torch.manual_seed(3)
    policy = build_model(cfg(), V, FC, ATT).eval()
    value_net, feats = net().eval(), make_feats()
    plain = beam_search(policy, feats, Decoding("beam", 6, beam_size=3))
    same = lookahead_search(policy, value_net, feats, beam_size=3, max_len=6, lam=1.0)
    assert torch.equal(same.tokens, plain.tokens) and torch.equal(same.scores, plain.scores)
    # below 1, each caption's final score is lam * logprob + (1 - lam) * v of its last state; that v,
    # recomputed by teacher forcing, checks that each beam kept its own image's regions
    lam = 0.5
    got = lookahead_search(policy, value_net, feats, beam_size=3, max_len=6, lam=lam, candidates=V)
    assert got.tokens.shape[0] == B
    v_last = (got.scores - lam * got.logprobs.sum(1)) / (1 - lam)  # (B,)
    read = torch.cat([torch.full((B, 1), BOS), got.tokens.masked_fill(got.tokens == PAD, EOS)], 1)
    values = value_net(feats, read)  # (B, 1+T): the state after BOS and the first j words
    ended = (got.tokens == EOS).any(1)
    # an ended caption is valued where EOS was chosen: after its words, before EOS
    last = torch.where(ended, (got.tokens == EOS).int().argmax(1), got.mask.sum(1))  # (B,)
    torch.testing.assert_close(v_last, values.gather(1, last[:, None]).squeeze(1), atol=1e-5, rtol=1e-5)
