"""Algorithm 1's decoding modes: the manager phase's worker decodes greedily with dropout off (the goal
noise its only exploration), the worker phase samples at decode.temperature in the mode rl.rollout_dropout
names, and hrl.prefix_metric picks what scores the prefixes."""

import pytest
import torch

from rlcap import api
from rlcap.data.vocab import BOS, EOS
from rlcap.decoding import segments
from rlcap.decoding.result import cut_after_eos
from rlcap.decoding.segments import greedy_segments
from rlcap.errors import ConfigError
from rlcap.methods import hrl
from tests.tiny import hrl_overrides, hrl_settings, make_tiny_clips, tiny_hrl_xe


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """The tiny clips and an HRL XE checkpoint in ``folder/hrl`` whose dropout (0.3) is on in train mode."""
    folder = tmp_path_factory.mktemp("hrl_fixes")
    ann, feats = make_tiny_clips(folder)
    tiny_hrl_xe(folder, ann, feats, **{"model.dropout": 0.3})
    return ann, feats, folder


@pytest.fixture(scope="module")
def model_and_batch(clips):
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.eval.open_run import open_run

    ann, feats, folder = clips
    opened = open_run(folder / "hrl" / "best", device="cpu")
    model, vocab = opened.policy, opened.vocab
    train = load_data(DataConfig(dataset=str(ann), features=str(feats), min_count=1), ("train",), vocab=vocab)
    return model, next(train.splits["train"].eval_batches(16))


def greedy_in_train_mode(model, feats, steps):
    """Rows of words chosen by argmax of model.step with the model in train mode (dropout on), cut after EOS."""
    model.train()
    with torch.no_grad():
        memory = model.encode(feats)
        state, word = model.init_state(memory), torch.full((feats.att.size(0),), BOS)
        rows = []
        for _ in range(steps):
            logprobs, state = model.step(memory, state, word)
            word = logprobs[:, EOS:].argmax(1) + EOS  # PAD and BOS are never written
            rows.append(word)
    return cut_after_eos(torch.stack(rows, 1))


def test_manager_phase_decodes_without_dropout(model_and_batch):
    model, batch = model_and_batch
    model.goal_noise = 0.0
    # "greedy" decodes in train mode differ (dropout is the noise)
    first, second = greedy_in_train_mode(model, batch.feats, 24), greedy_in_train_mode(model, batch.feats, 24)
    assert (first != second).any(1).sum() >= 2
    # greedy_segments turns dropout off: the same words each time, and the caller's mode back after
    model.train()
    a = greedy_segments(model, batch.feats, 24)
    b = greedy_segments(model, batch.feats, 24)
    assert model.training
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])
    model.eval()
    c = greedy_segments(model, batch.feats, 24)
    assert not model.training and torch.equal(a[0], c[0])
    # autograd stays on: eq. 22's gradient reaches the manager through its goals
    model.zero_grad()
    a[1].sum().backward()
    assert model.goal.weight.grad is not None and model.goal.weight.grad.abs().sum() > 0
    # with goal noise (eq. 23) the decodes explore again
    model.goal_noise = 5.0
    assert not torch.equal(greedy_segments(model, batch.feats, 24)[0], a[0])
    model.goal_noise = 0.0


def dropout_on(model) -> bool:
    return any(m.training for m in model.modules() if isinstance(m, torch.nn.Dropout))


def spy(monkeypatch):
    """Record (phase, dropout on, temperature) of each worker sample and each manager decode (which turns the
    dropout layers off, not the whole model: the LSTMs' cuDNN backward refuses a module in eval mode)."""
    calls = []
    real_sample, real_decode = hrl.decode, segments._greedy_segments

    def sample(model, feats, decoding, n, **kwargs):
        calls.append(("worker", dropout_on(model), decoding.temperature if decoding.method == "sample" else None))
        return real_sample(model, feats, decoding, n, **kwargs)

    def decode(model, feats, max_len, exit_every):
        calls.append(("manager", dropout_on(model), None))
        return real_decode(model, feats, max_len, exit_every)

    monkeypatch.setattr(hrl, "decode", sample)
    monkeypatch.setattr(segments, "_greedy_segments", decode)
    return calls


def test_worker_samples_at_the_temperature_in_the_rollout_dropout_mode(clips, monkeypatch):
    ann, feats, folder = clips
    calls = spy(monkeypatch)
    over = hrl_overrides(ann, feats, folder / "cold", **hrl_settings(folder, max_steps=2, **{
        "decode.temperature": 0.5, "rl.rollout_dropout": False}))
    api.train(api.load_run_config(None, over))
    assert calls == [("worker", False, 0.5)] * 2
    # from the manager: its decode with dropout off, then the worker's back on (rollout dropout on)
    calls.clear()
    over = hrl_overrides(ann, feats, folder / "warm", **hrl_settings(folder, max_steps=3, **{
        "hrl.first": "manager", "hrl.switch_every": 1}))
    api.train(api.load_run_config(None, over))
    assert calls == [("manager", False, None), ("worker", True, 1.0), ("manager", False, None)]


def test_prefix_metric_picks_what_scores_the_prefixes(clips, monkeypatch):
    from rlcap.rewards import CiderDReward, WeightedReward

    ann, feats, folder = clips
    used = []
    real = hrl.prefix_scores
    monkeypatch.setattr(hrl, "prefix_scores", lambda reward, *a: used.append(reward) or real(reward, *a))
    for metric in ("cider", "cider_d"):
        over = hrl_overrides(ann, feats, folder / metric, **hrl_settings(folder, max_steps=1, **{
            "hrl.prefix_metric": metric}))
        api.train(api.load_run_config(None, over))
    plain, run_reward = used
    assert isinstance(plain, CiderDReward) and plain.plain
    assert isinstance(run_reward, WeightedReward) and set(run_reward.weights) == {"cider_d"}
    with pytest.raises(ConfigError, match="hrl.prefix_metric: 'bleu' is not one of cider_d, cider"):
        api.load_run_config(None, hrl_overrides(ann, feats, folder / "bad", **hrl_settings(folder, **{
            "hrl.prefix_metric": "bleu"})))
