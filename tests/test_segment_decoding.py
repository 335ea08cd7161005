"""greedy_segments, the manager phase's decode of [Wang18]: the greedy captions with dropout off, the segment
starts the internal critic gives, the manager's states, and the same words whether or not the loop checks for
its end."""

import pytest
import torch

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding import greedy
from rlcap.decoding.segments import greedy_segments
from tests.tiny import make_tiny_clips, tiny_hrl_xe

MAX_LEN = 24


@pytest.fixture(scope="module")
def model_and_feats(tmp_path_factory):
    """A tiny trained HRL captioner (critic and XE, dropout 0.3) and the features of 16 training clips."""
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.eval.open_run import open_run

    folder = tmp_path_factory.mktemp("segments")
    ann, feats = make_tiny_clips(folder)
    opened = open_run(tiny_hrl_xe(folder, ann, feats, **{"model.dropout": 0.3}), device="cpu")
    model, vocab = opened.policy, opened.vocab
    train = load_data(DataConfig(dataset=str(ann), features=str(feats), min_count=1), ("train",), vocab=vocab)
    model.goal_noise = 0.0
    return model, next(train.splits["train"].eval_batches(16)).feats


def test_the_words_are_greedy_decoding_with_dropout_off(model_and_feats):
    model, feats = model_and_feats
    model.train()  # dropout on: greedy_segments turns it off, and back on after
    out = greedy_segments(model, feats, MAX_LEN)
    assert model.training and all(m.training for m in model.modules() if isinstance(m, torch.nn.Dropout))
    model.eval()
    with torch.no_grad():
        reference = greedy(model, feats, MAX_LEN, exit_every=1)
    assert torch.equal(out.tokens, reference.tokens)
    torch.testing.assert_close(out.logprobs.detach(), reference.logprobs)
    assert out.logprobs.requires_grad  # eq. 22's gradient reaches the goals
    b, t = out.tokens.shape
    assert out.starts.shape == (b, t) and out.h_m.shape == (b, t, model.manager.hidden_size)


def test_segments_start_where_the_critic_ends_one(model_and_feats):
    model, feats = model_and_feats
    model.eval()
    with torch.no_grad():
        out = greedy_segments(model, feats, MAX_LEN)
        # the critic reads BOS then each word; after word t-1 it says whether word t starts a segment
        read = torch.cat([torch.full_like(out.tokens[:, :1], BOS), out.tokens[:, :-1]], 1)
        ended = model.critic(read) > 0  # (B, T)
    valid = out.tokens != PAD
    expected = ended.clone()
    expected[:, 0] = True  # a segment starts at the first word
    assert torch.equal(out.starts, expected & valid)
    assert out.starts.sum() > out.tokens.size(0)  # more than one segment a caption: the check means something
    # the manager's state changes only where a segment starts (eq. 4-5)
    same = (out.h_m[:, 1:] == out.h_m[:, :-1]).all(2)  # (B, T-1)
    assert torch.equal(same[valid[:, 1:]], ~out.starts[:, 1:][valid[:, 1:]])


def ending_at(model, monkeypatch):
    """``model.step`` made to end row r's caption with its word r % 5 + 2 (the tiny model never ends its own
    within MAX_LEN words); the count of steps restarts at each decode's first step (it reads BOS)."""
    real, steps = model.step, []

    def step(memory, state, word):
        logprobs, state = real(memory, state, word)
        steps[:] = [0] if bool((word == BOS).all()) else [steps[0] + 1]
        ends = torch.arange(word.size(0)) % 5 + 2 == steps[0] + 1  # (B,) rows whose word here is their last
        eos = torch.arange(logprobs.size(1)) == EOS
        return torch.where(ends[:, None] & eos, 0.0, logprobs), state

    monkeypatch.setattr(model, "step", step)


def test_never_checking_for_the_end_only_adds_padding(model_and_feats, monkeypatch):
    model, feats = model_and_feats
    model.eval()
    ending_at(model, monkeypatch)
    with torch.no_grad():
        checked = greedy_segments(model, feats, MAX_LEN, exit_every=1)
        unchecked = greedy_segments(model, feats, MAX_LEN, exit_every=0)
    t = checked.tokens.size(1)
    assert t == 6 and unchecked.tokens.size(1) == MAX_LEN  # the last captions end with their 6th word
    assert ((checked.tokens != PAD).sum(1) == torch.arange(len(checked.tokens)) % 5 + 2).all()
    assert torch.equal(unchecked.tokens[:, :t], checked.tokens) and (unchecked.tokens[:, t:] == PAD).all()
    assert torch.equal(unchecked.logprobs[:, :t], checked.logprobs) and (unchecked.logprobs[:, t:] == 0).all()
    assert torch.equal(unchecked.starts[:, :t], checked.starts) and not unchecked.starts[:, t:].any()
    assert torch.equal(unchecked.h_m[:, :t], checked.h_m)
