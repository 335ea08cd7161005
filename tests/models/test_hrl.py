"""[Wang18]'s hierarchical captioner: the critic decides segments, the manager emits goals only at their
starts, step equals teacher forcing, and the shared decoders run on it."""

import pytest
import torch

from rlcap.data.vocab import BOS
from rlcap.decoding import Decoding, beam_search, greedy, sample
from rlcap.models import Feats, ModelConfig, build_model

V, B, N, D = 15, 3, 6, 10


def build(goal_dim=8):
    torch.manual_seed(0)
    cfg = ModelConfig(arch="hrl", embed_dim=8, hidden_dim=12, att_hidden_dim=8, manager_dim=10, goal_dim=goal_dim,
                      dropout=0.0)
    return build_model(cfg, V, D, D).eval()


def feats():
    g = torch.Generator().manual_seed(1)
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 4:] = False  # a shorter clip
    return Feats(torch.randn(B, D, generator=g), torch.randn(B, N, D, generator=g), mask)


def run_steps(model, tokens):
    memory = model.encode(feats())
    state = model.init_state(memory)
    out, goals, starts = [], [], []
    for t in range(tokens.size(1)):
        lp, state = model.step(memory, state, tokens[:, t])
        out.append(lp)
        goals.append(state[4])
        starts.append(model.segment_start(state))
    return torch.stack(out, 1), torch.stack(goals, 1), torch.stack(starts, 1)


def test_goals_change_only_where_the_critic_starts_a_segment():
    model = build()
    model.critic.step = lambda h, tokens: ((tokens == 7).float() * 10 - 5, h)  # "a segment ends with word 7"
    tokens = torch.tensor([[BOS, 4, 7, 5, 6, 7, 4]] * B)
    _, goals, starts = run_steps(model, tokens)
    # a segment starts at the first step and at each step that reads a 7 (steps 2 and 5)
    assert starts[0].tolist() == [True, False, True, False, False, True, False]
    for t in range(1, 7):
        assert torch.equal(goals[:, t], goals[:, t - 1]) != bool(starts[0, t])


def test_step_equals_teacher_forcing_and_decoders_run():
    model = build()
    tokens = torch.randint(3, V, (B, 7), generator=torch.Generator().manual_seed(2))
    tokens[:, 0] = BOS
    with torch.no_grad():
        stepped, _, _ = run_steps(model, tokens)
        forced = model(feats(), tokens)
    torch.testing.assert_close(stepped, forced)
    assert greedy(model, feats(), 6).tokens.shape[0] == B
    assert beam_search(model, feats(), Decoding("beam", 6, beam_size=3)).tokens.shape[0] == B
    model.train()
    out = sample(model, feats(), 2, Decoding("sample", 6))
    out.logprobs.sum().backward()
    assert model.worker.weight_ih.grad is not None and model.goal.weight.grad is not None
    assert all(p.grad is None for p in model.critic.parameters())  # frozen


def test_goal_noise_explores_only_when_set():
    model = build()
    tokens = torch.full((B, 4), 5)
    tokens[:, 0] = BOS
    with torch.no_grad():
        a, b = model(feats(), tokens), model(feats(), tokens)
        model.goal_noise = 0.5
        c = model(feats(), tokens)
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    with pytest.raises(Exception, match="odd"):
        ModelConfig(arch="hrl", hidden_dim=11)
