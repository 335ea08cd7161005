"""[Wang18]'s internal critic trained on chunk boundaries, then an HRL captioner warm-started by XE (eq. 26)
with it frozen inside, decoding with the shared decoders."""

import json

import pytest
import torch

from rlcap import api
from rlcap.errors import ConfigError, RlcapError
from rlcap.train.checkpoint import load_checkpoint
from tests.tiny import hrl_overrides as small  # the tiny overrides sized for the HRL captioner
from tests.tiny import hrl_settings, make_tiny_clips


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A tiny moving-shapes set with 4-frame features of random vectors (what the critic reads is words)."""
    folder = tmp_path_factory.mktemp("hrl")
    return (*make_tiny_clips(folder), folder)


def test_critic_learns_segment_ends(clips):
    ann, feats, folder = clips
    api.train(api.load_run_config(None, small(ann, feats, folder / "critic", **{
        "algorithm": "critic", "critic.epochs": 8, "critic.batch_size": 16, "optim.lr": 0.01})))
    records = [json.loads(x) for x in (folder / "critic" / "log.jsonl").read_text().splitlines()]
    f1 = [r["F1"] for r in records if "F1" in r]
    assert len(f1) == 8 and max(f1) > 0.6 and f1[-1] > f1[0] + 0.3  # it learns where segments end
    assert sorted(load_checkpoint(folder / "critic" / "best").weights) == ["critic"]


def test_hrl_xe_with_the_frozen_critic(clips):
    ann, feats, folder = clips
    if not (folder / "critic" / "best").exists():
        test_critic_learns_segment_ends(clips)
    over = small(ann, feats, folder / "hrl", **{"model.arch": "hrl", "model.critic_from": folder / "critic" / "best",
                                                "xe.epochs": 1, "xe.batch_size": 8})
    api.train(api.load_run_config(None, over))
    policy = load_checkpoint(folder / "hrl" / "best").weights["policy"]
    critic = load_checkpoint(folder / "critic" / "best").weights["critic"]
    for name, value in critic.items():  # the critic inside is the trained one, unchanged by XE
        assert torch.equal(policy[f"critic.{name}"], value)
    from rlcap.decoding import greedy
    from rlcap.eval.open_run import open_run

    opened = open_run(folder / "hrl" / "best", device="cpu")
    model, vocab = opened.policy, opened.vocab
    from rlcap.data.loader import DataConfig, load_data

    test = load_data(DataConfig(dataset=str(ann), features=str(feats), min_count=1), ("test",), vocab=vocab).splits["test"]
    out = greedy(model, test.feats(torch.arange(len(test))), 24)
    assert out.tokens.shape[0] == len(test)  # decodes the clips, segment by segment
    with pytest.raises(ConfigError, match="critic_from"):
        api.train(api.load_run_config(None, small(ann, feats, folder / "nocritic", **{"model.arch": "hrl"})))
    with pytest.raises(RlcapError, match="no critic.safetensors"):
        api.train(api.load_run_config(None, small(ann, feats, folder / "bad", **{"model.arch": "hrl",
                                                                                  "model.critic_from": folder})))


def test_alternating_phases_each_train_only_their_part(clips):
    ann, feats, folder = clips
    if not (folder / "hrl" / "best").exists():
        test_hrl_xe_with_the_frozen_critic(clips)
    over = small(ann, feats, folder / "alt", **hrl_settings(folder, max_steps=2))  # two worker steps
    api.train(api.load_run_config(None, over))
    start = load_checkpoint(folder / "hrl" / "best").weights["policy"]
    after = load_checkpoint(folder / "alt" / "last").weights["policy"]
    managers = {n for n in start if n.split(".")[0] in ("manager_att", "manager", "goal", "high")}
    assert managers and all(torch.equal(start[n], after[n]) for n in managers)  # frozen in the worker phase
    assert any(not torch.equal(start[n], after[n]) for n in start if n.startswith("worker."))
    assert all(torch.equal(start[n], after[n]) for n in start if n.startswith("critic."))
    over = small(ann, feats, folder / "alt2", **hrl_settings(folder, **{"hrl.first": "manager", "max_steps": 2}))
    api.train(api.load_run_config(None, over))
    after = load_checkpoint(folder / "alt2" / "last").weights["policy"]
    assert all(torch.equal(start[n], after[n]) for n in start if n.split(".")[0] in ("worker", "logit", "embed"))
    assert any(not torch.equal(start[n], after[n]) for n in managers)
    records = [json.loads(x) for x in (folder / "alt2" / "log.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in records if r.get("split") == "train"} == {2.0}


def test_worker_phase_with_several_samples_per_clip(clips, monkeypatch):
    """hrl.worker_samples draws that many captions per clip, each with its own references, and still
    trains the worker alone."""
    from rlcap.methods import hrl

    ann, feats, folder = clips
    if not (folder / "hrl" / "best").exists():
        test_hrl_xe_with_the_frozen_critic(clips)
    drawn, scored = [], []
    real_sample, real_batch = hrl.decode, hrl.reward_batch
    monkeypatch.setattr(hrl, "decode", lambda model, feats, decoding, n, **k: drawn.append((feats.att.size(0), n))
                        or real_sample(model, feats, decoding, n, **k))
    monkeypatch.setattr(hrl, "reward_batch", lambda batch, n: scored.append(n) or real_batch(batch, n))
    over = small(ann, feats, folder / "k3", **hrl_settings(folder, max_steps=2, **{"hrl.worker_samples": 3}))
    api.train(api.load_run_config(None, over))
    assert [n for _, n in drawn] == [3, 3] and scored == [3, 3]
    start = load_checkpoint(folder / "hrl" / "best").weights["policy"]
    after = load_checkpoint(folder / "k3" / "last").weights["policy"]
    assert all(torch.equal(start[n], after[n]) for n in start if n.split(".")[0] in ("manager", "goal", "high"))
    assert any(not torch.equal(start[n], after[n]) for n in start if n.startswith("worker."))
    with pytest.raises(ConfigError, match="worker_samples"):
        api.load_run_config(None, small(ann, feats, folder / "k0", **hrl_settings(folder, **{"hrl.worker_samples": 0})))


def test_killed_hrl_run_resumes_exactly(clips, tmp_path):
    from tests.train.killing import assert_resume_is_exact, assert_same_final_checkpoints

    ann, feats, folder = clips
    if not (folder / "hrl" / "best").exists():
        test_hrl_xe_with_the_frozen_critic(clips)
    overrides = small(ann, feats, tmp_path / "unused", **hrl_settings(folder, save_every=2))
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 5, 2 * 5)
    assert_same_final_checkpoints(tmp_path / "reference", tmp_path / "killed", ["baselines", "policy"])


def test_hrl_through_the_bench(clips, tmp_path, monkeypatch):
    """`rlcap bench` on a video benchmark: the critic stage, the HRL XE stage loading it
    (model.critic_from from Stage.paths), Algorithm 1 from that, beside the XE baseline."""
    from rlcap.bench.registry import BENCHMARKS, Benchmark, VIDEO_ROWS as VIDEO_METHODS
    from rlcap.cli import main
    from tests.bench.test_bench_registry import _recipe

    ann, feats, folder = clips
    configs = tmp_path / "configs"
    configs.mkdir()
    base = [o for o in small("u", "u", "u") if o.split("=")[0] not in ("data.dataset", "data.features", "out_dir")]
    _recipe(configs / "tiny_xe.yaml", [*base, "algorithm=xe", "model.arch=updown", "xe.epochs=1"])
    _recipe(configs / "tiny_critic.yaml", [*base, "algorithm=critic", "critic.epochs=1"])
    _recipe(configs / "tiny_xe_hrl_16.yaml", [*base, "algorithm=xe", "model.arch=hrl", "model.goal_dim=16", "xe.epochs=1"])
    _recipe(configs / "tiny_hrl.yaml", [*[o for o in base if not o.startswith(("model.", "xe."))], "algorithm=hrl",
                                        "rl.epochs=1", "rl.batch_size=20", "hrl.switch_every=1"])
    monkeypatch.setitem(BENCHMARKS, "tiny", Benchmark(lambda *a: (ann, feats), "tiny", "", VIDEO_METHODS))
    out = tmp_path / "bench"
    assert main(["bench", "--benchmark", "tiny", "--methods", "xe,hrl_16", "--out", str(out), "--configs",
                 str(configs)]) == 0
    assert json.loads((out / "xe_hrl_16" / "config.json").read_text())["model"]["critic_from"] == str(out / "critic" / "best")
    assert json.loads((out / "hrl_16" / "config.json").read_text())["init_from"] == str(out / "xe_hrl_16" / "best")
    results = json.loads((out / "results.json").read_text())
    assert set(results["methods"]) == {"xe", "hrl_16"} and results["methods"]["hrl_16"]["beam"]["CIDEr"] >= 0


def test_the_video_benchmark_names_what_it_needs(tmp_path, capsys):
    from rlcap.cli import main

    assert main(["bench", "--benchmark", "video", "--methods", "xe", "--out", str(tmp_path / "o"),
                 "--data", str(tmp_path)]) == 2
    assert "annotations.json (MSR-VTT format)" in capsys.readouterr().err
