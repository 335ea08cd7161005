"""PG-SPIDEr's wiring ([Liu17]): which rewards reach Q, the dedupe, the stopped baseline gradient; and
CPU smoke runs of the pg and mixer loops on the tiny dataset."""

import math

import pytest
import torch

import rlcap.methods.pg as pg
from rlcap import api
from rlcap.data.vocab import EOS, PAD, Vocab
from rlcap.decoding import Decoding, DecodeResult, prefix_rollouts, sample
from rlcap.models import Feats, ModelConfig, build_model
from rlcap.rewards import RewardBatch
from rlcap.rl.credit import mc_q_estimates
from rlcap.train.checkpoint import load_checkpoint
from rlcap.methods.learned_baseline import BASELINE, baseline_run
from rlcap.train.logger import read_log
from rlcap.rewards.unique import score_unique, unique_pairs
from tests.tiny import tiny_overrides

VOCAB = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"])
A, B, C = 4, 5, 6


class WordCount:
    """A fake reward: the number of words, plus 10 for image "i1"; records what it is asked."""

    def __init__(self):
        self.calls = []

    def __call__(self, captions, batch):
        self.calls.append(list(zip(captions, batch.image_ids)))
        return torch.tensor([len(c.split()) + (10.0 if i == "i1" else 0.0) for c, i in zip(captions, batch.image_ids)])


def result(rows):
    tokens = torch.tensor(rows)
    zeros = torch.zeros(tokens.shape)
    return DecodeResult(tokens, zeros, tokens != PAD, zeros.sum(1), zeros)


def test_unique_pairs_hand_computed():
    first, where = unique_pairs(["a", "b", "a", "a"], ["1", "1", "1", "2"])
    assert first == [0, 1, 3] and where.tolist() == [0, 1, 0, 2]


def test_score_unique_calls_the_reward_once_per_pair_and_scatters_back():
    reward = WordCount()
    captions = ["a b", "a", "a b", "a b"]
    batch = RewardBatch(["i0", "i0", "i0", "i1"], [["x"]] * 4)
    scores = score_unique(reward, captions, batch)
    assert scores.rewards.tolist() == [2.0, 1.0, 2.0, 12.0] and scores.unique == 3
    assert reward.calls == [[("a b", "i0"), ("a", "i0"), ("a b", "i1")]]


def test_rollout_rewards_hand_computed():
    """Two captions (T = 3, K = 2): "a b <eos>" of image i0 and "c <eos>" of image i1."""
    sampled = result([[A, B, EOS], [C, EOS, PAD]])
    rolls = result([  # rows ordered (caption, prefix length t, rollout k)
        [A, C, EOS, PAD], [A, EOS, PAD, PAD],  # "a" -> "a c", "a"
        [A, B, C, EOS], [A, B, EOS, PAD],  # "a b" -> "a b c", "a b"
        [A, B, EOS, PAD], [A, B, EOS, PAD],  # "a b <eos>": ended (the last step: not scored)
        [C, A, EOS, PAD], [C, EOS, PAD, PAD],  # "c" -> "c a", "c"
        [C, EOS, PAD, PAD], [C, EOS, PAD, PAD],  # ended
        [C, EOS, PAD, PAD], [C, EOS, PAD, PAD],  # padding
    ])
    context = RewardBatch(["i0", "i1"], [["r"], ["r"]], None, None)
    reward = WordCount()
    got = pg.rollout_rewards(reward, VOCAB, sampled, rolls, 2, context)
    assert got.rollout.tolist() == [[[2, 1], [3, 2], [0, 0]], [[12, 11], [0, 0], [0, 0]]]
    assert got.final.tolist() == [2.0, 11.0]
    # Q: the mean of the K rollouts, the caption's own reward at its last step (EOS), 0 at padding
    q = mc_q_estimates(got.rollout, got.final, sampled.mask)
    assert q.tolist() == [[1.5, 2.5, 2.0], [11.5, 11.0, 0.0]]
    # one reward call; "a b" (image i0) and "c" (image i1) are rollouts and sampled captions both
    assert len(reward.calls) == 1 and got.scores.unique == 6 and len(got.scores.rewards) == 8
    assert sorted(reward.calls[0]) == sorted([("a c", "i0"), ("a", "i0"), ("a b c", "i0"), ("a b", "i0"),
                                              ("c a", "i1"), ("c", "i1")])


def test_rollout_rewards_match_scoring_every_row_on_a_toy_model():
    """M = 2 samples of 2 images from a small random captioner, K = 3: every needed rollout row gets
    its own caption's reward, whatever the dedupe merged."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch="fc", embed_dim=8, hidden_dim=8, dropout=0.0)
    model = build_model(cfg, len(VOCAB), 6, 6).eval()
    feats = Feats(torch.randn(2, 6), torch.randn(2, 1, 6), torch.ones(2, 1, dtype=torch.bool))
    batch = type("B", (), {"ids": ["i0", "i1"], "refs": [["r"], ["r"]], "feats": feats})
    out = sample(model, feats, 2, Decoding("sample", 5), return_hidden=True)
    rows_feats, context = pg.sample_context(batch, 2)
    assert context.image_ids == ["i0", "i0", "i1", "i1"] and context.feats_index.tolist() == [0, 0, 1, 1]
    with torch.no_grad():
        rolls = prefix_rollouts(model, rows_feats, out.tokens, 3, Decoding("sample", 5))
    got = pg.rollout_rewards(WordCount(), VOCAB, out, rolls, 3, context)
    r, t = out.tokens.shape
    owner_ids = [context.image_ids[i // (t * 3)] for i in range(r * t * 3)]
    every = [VOCAB.decode(x.tolist()) for x in rolls.tokens]
    naive = WordCount()(every, RewardBatch(owner_ids, [["r"]] * len(owner_ids)))
    need = pg.needed_rollouts(out.mask)[:, :, None].expand(r, t, 3)
    assert torch.equal(got.rollout, torch.where(need, naive.view(r, t, 3), 0.0))
    finals = WordCount()([VOCAB.decode(x.tolist()) for x in out.tokens], context)
    assert torch.equal(got.final, finals)


@pytest.fixture
def xe_checkpoint(tiny_xe):
    return tiny_xe(2)  # trained once per test session


def _config(dataset, feats, init, out, algorithm, **extra):
    items = {"algorithm": algorithm, "init_from": init, "rl.epochs": 1, "rl.batch_size": 8, "rl.n_samples": 1,
             "mixer.references": 3,
             "decode.max_len": 6, "optim.lr": 0.001, "pg.rollouts": 2, "mixer.start": 3, "mixer.delta": 2,
             "mixer.epochs_per_stage": 1}
    items.update(extra)
    items = tiny_overrides(dataset, feats, out, **items)
    return api.load_run_config(None, [i for i in items if not i.startswith("model.")])


def test_pg_step_wiring(xe_checkpoint, tmp_path, monkeypatch):
    """Q reaches both losses; L_phi trains the baseline only and the policy loss the policy only;
    with the zero-initialised baseline, L_phi is the mean of Q^2 over the valid steps."""
    dataset, feats, init = xe_checkpoint
    qs, grads = [], {}
    real_q, real_step = pg.mc_q_estimates, pg.optimizer_step

    def spy_q(*args):
        qs.append((real_q(*args), args[2]))
        return qs[-1][0]

    def spy_step(s, loss, part="policy"):
        for name, p in s.parts.items():
            params = list(p.module.parameters())
            g = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            grads[(part, name)] = any(x is not None and bool(x.abs().sum() > 0) for x in g)
        grads[(part, "loss")] = loss.item()
        real_step(s, loss, part)

    monkeypatch.setattr(pg, "mc_q_estimates", spy_q)
    monkeypatch.setattr(pg, "optimizer_step", spy_step)
    with baseline_run(_config(dataset, feats, init, tmp_path / "pg", "pg"), 1e-3, 16, 1, "") as (s, reward):
        batch = next(s.data.splits["train"].batches(4, 1, seed=0, epoch=0))
        stats = pg.pg_step(s, batch, reward)
    assert grads[("policy", "policy")] and not grads[("policy", BASELINE)]
    assert grads[(BASELINE, BASELINE)] and not grads[(BASELINE, "policy")]
    q, mask = qs[0]
    assert stats["baseline"] == 0.0 and stats["q"] == pytest.approx(stats["advantage"])
    assert grads[(BASELINE, "loss")] == pytest.approx(float((q[mask] ** 2).mean()), rel=1e-6)


SMOKE = {"pg": ("pg", {}), "pg_two_samples": ("pg", {"rl.n_samples": 2}), "mixer": ("mixer", {})}


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_smoke(xe_checkpoint, tmp_path, name):
    dataset, feats, init = xe_checkpoint
    algorithm, extra = SMOKE[name]
    result = api.train(_config(dataset, feats, init, tmp_path / name, algorithm, **{"rl.epochs": 2, **extra}))
    assert result.steps == 2 * math.ceil(24 / 8)
    train = [r for r in read_log(tmp_path / name / "log.jsonl") if r["split"] == "train"]
    assert len(train) == result.steps
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["baseline_loss"]) for r in train)
    if algorithm == "mixer":  # M = 3 in the first epoch, 1 in the second
        assert [r["prefix_len"] for r in train] == [3.0] * 3 + [1.0] * 3
    last = load_checkpoint(tmp_path / name / "last").weights
    before = load_checkpoint(init).weights["policy"]
    assert any(not torch.equal(before[k], last["policy"][k]) for k in before)
    assert any(bool(v.abs().sum() > 0) for k, v in last[BASELINE].items() if k.startswith("net.2"))


def test_pg_resumes_with_its_baseline(xe_checkpoint, tmp_path):
    """Stopped after one epoch and resumed, a pg run replays the uninterrupted run's losses: the
    baseline part and its optimizer come back from the checkpoint."""
    dataset, feats, init = xe_checkpoint
    api.train(_config(dataset, feats, init, tmp_path / "reference", "pg", **{"rl.epochs": 2}))
    api.train(_config(dataset, feats, init, tmp_path / "resumed", "pg", **{"rl.epochs": 1}))
    api.train(_config(dataset, feats, init, tmp_path / "resumed", "pg", **{"rl.epochs": 2}), resume=True)
    losses = {name: [(r["step"], r["loss"], r["baseline_loss"]) for r in read_log(tmp_path / name / "log.jsonl")
                     if r["split"] == "train"] for name in ("reference", "resumed")}
    assert losses["resumed"] == losses["reference"]


def test_pg_refuses_beam_samples(xe_checkpoint, tmp_path):
    from rlcap.errors import ConfigError

    dataset, feats, init = xe_checkpoint
    with pytest.raises(ConfigError, match="rl.sample_method must be 'sample'"):
        api.train(_config(dataset, feats, init, tmp_path / "beam", "pg", **{"rl.sample_method": "beam"}))


@pytest.mark.parametrize("item, message", [("pg.rollouts=0", "pg.rollouts: expected at least 1"),
                                           ("pg.baseline_lr=0", r"pg.baseline_lr: expected a learning rate in \(0, 1\], got 0"),
                                           ("mixer.delta=0", "mixer.delta: expected at least 1"),
                                           ("mixer.start=-1", "mixer.start: expected at least 0")])
def test_config_ranges(item, message):
    from rlcap.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        api.load_run_config(None, [f"algorithm={item.split('.')[0]}", item])


@pytest.mark.parametrize("method, algorithm, reward", [("pg_cider", "pg", "cider_d"), ("pg_bcmr", "pg", "bcmr"),
                                                       ("pg_spider", "pg", "spider"), ("mixer", "mixer", "cider_d")])
def test_bench_methods_train_from_xe_with_their_recipe(method, algorithm, reward):
    from pathlib import Path

    from rlcap.bench.registry import BENCH_ROWS as METHODS
    from rlcap.methods import load_run_config

    xe, stage = METHODS[method].stages
    assert xe.name == "xe" and stage.init_from == "xe"
    cfg = load_run_config(Path(__file__).resolve().parents[2] / "configs" / f"shapes_{stage.recipe}.yaml")
    assert cfg.algorithm == algorithm and cfg.reward.weights == {reward: 1.0}
    assert cfg.rl.epochs == 12 and cfg.rl.batch_size == 50 and cfg.optim.lr == 1e-4  # shapes_scst.yaml's budget
