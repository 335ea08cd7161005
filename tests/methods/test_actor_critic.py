"""Actor-critic ([Shi18]): the per-word credit by hand, the value network's gradient
kept away from the policy, and short CPU runs of the embedding and actor-critic loops."""

import json
import math

import pytest
import torch

from rlcap import api
from rlcap.cli import main
from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.models import Feats, ModelConfig, build_model, build_value_model
from rlcap.rl.credit import value_advantages, value_loss
from rlcap.rl.losses import reinforce_loss
from rlcap.methods.actor_critic import value_inputs
from rlcap.train.checkpoint import load_checkpoint
from rlcap.train.logger import read_log
from tests.tiny import tiny_overrides


def test_value_inputs_align_v_of_s_t_with_word_t():
    tokens = torch.tensor([[5, 6, EOS], [7, EOS, PAD]])
    assert value_inputs(tokens).tolist() == [[BOS, 5, 6], [BOS, 7, EOS]]


def test_per_word_advantages_and_value_loss_by_hand():
    # two captions, rewards R = [2, 5]; v(s_t) of their steps; the second has 2 valid steps
    rewards = torch.tensor([2.0, 5.0])
    values = torch.tensor([[1.0, 1.5, 2.0], [4.0, 6.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    adv = value_advantages(rewards, values, mask)  # eq. 10: R - v(s_t)
    assert adv.tolist() == [[1.0, 0.5, 0.0], [1.0, -1.0, 0.0]]
    loss = value_loss(values, rewards, mask)  # eq. 9: (1 + 0.25 + 0 + 1 + 1) / 5
    assert loss.item() == pytest.approx(0.65)
    loss.backward()  # eq. 11's direction: d/dv = 2 (v - R) / 5
    torch.testing.assert_close(values.grad, torch.tensor([[-0.4, -0.2, 0.0], [-0.4, 0.4, 0.0]]))
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, -7.0]])
    # REINFORCE with per-word advantages: -(1*-1 + 0.5*-2 + 0 + 1*-3 + -1*-1) / 5 = 0.8
    assert reinforce_loss(logprobs, mask, adv).item() == pytest.approx(0.8)


def test_no_gradient_crosses_between_policy_and_value_network():
    from rlcap.decoding import Decoding, sample

    torch.manual_seed(0)
    cfg = ModelConfig(arch="fc", embed_dim=8, hidden_dim=8, dropout=0.0)
    policy, value_net = build_model(cfg, 9, 4, 4), build_value_model(cfg, 9, 4)
    feats = Feats(torch.randn(2, 4), torch.randn(2, 1, 4), torch.ones(2, 1, dtype=torch.bool))
    roll = sample(policy, feats, 3, Decoding("sample", 5))
    values = value_net(feats, value_inputs(roll.tokens), seq_per_img=3)
    rewards = torch.rand(6)
    value_loss(values, rewards, roll.mask).backward(retain_graph=True)
    assert all(p.grad is None for p in policy.parameters())  # the value loss never reaches the policy
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in value_net.parameters())
    value_net.zero_grad(set_to_none=True)
    reinforce_loss(roll.logprobs, roll.mask, value_advantages(rewards, values, roll.mask)).backward()
    assert all(p.grad is None for p in value_net.parameters())  # nor the policy loss the value network
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny dataset, an XE checkpoint and an embedding checkpoint trained on it."""
    from tests.tiny import make_tiny_dataset

    folder = tmp_path_factory.mktemp("ac")
    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe")))
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "embedding",
                                                       **embedding_settings())))
    return dataset, feats, folder


def embedding_settings(**extra):
    return {"algorithm": "embedding", "embedding.epochs": 2, "embedding.batch_size": 8, "embedding.model.word_dim": 8,
            "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8, "optim.lr": 0.01, **extra}


def ac_settings(folder, **extra):
    return {"algorithm": "ac", "init_from": folder / "xe" / "best", "rl.epochs": 1, "rl.batch_size": 8,
            "rl.n_samples": 2, "decode.max_len": 6, "optim.lr": 0.001, "ac.value_pretrain_epochs": 1,
            "reward.weights": "{cider_d: 1.0, embedding: 0.5}",
            "reward.paths": f"{{embedding: {folder / 'embedding' / 'best'}}}", **extra}


def test_embedding_loop_trains_and_keeps_the_best_by_retrieval(runs, tmp_path):
    dataset, feats, folder = runs
    records = read_log(folder / "embedding" / "log.jsonl")
    train = [r for r in records if r["split"] == "train"]
    val = [r for r in records if r["split"] == "val"]
    assert len(train) == 2 * 3 and all(math.isfinite(r["loss"]) for r in train)  # 24 images, 8 a batch, 2 epochs
    assert len(val) == 2 and all(0 <= r[k] <= 100 for r in val for k in ("t2i_R@1", "i2t_R@10", "mean_R"))
    best = load_checkpoint(folder / "embedding" / "best")
    assert sorted(best.weights) == ["embedding"]  # no captioner in this run
    assert best.manifest["metrics"]["mean_R"] == max(r["mean_R"] for r in val)
    # the same run stopped after its first step started from the same weights: the later steps moved them
    one_step = embedding_settings(max_steps=1)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "one", **one_step)))
    one = load_checkpoint(tmp_path / "one" / "last").weights["embedding"]
    last = load_checkpoint(folder / "embedding" / "last").weights["embedding"]
    assert [k for k in one if torch.equal(one[k], last[k])] == []  # every tensor moved


def test_actor_critic_smoke(runs, tmp_path):
    dataset, feats, folder = runs
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "ac",
                                                   **ac_settings(folder, **{"ac.lookahead": "[0.5, 1.0]"})))
    result = api.train(cfg)
    assert result.steps == 3 + 3  # one epoch of value pretraining, one joint epoch
    train = [r for r in read_log(tmp_path / "ac" / "log.jsonl") if r["split"] == "train"]
    assert [r["phase"] for r in train] == [1.0] * 3 + [2.0] * 3
    assert all(math.isfinite(r[k]) for r in train for k in ("loss", "policy_loss", "value_loss", "reward", "value"))
    assert all(r["policy_loss"] == 0.0 for r in train[:3])
    init, last = load_checkpoint(folder / "xe" / "best"), load_checkpoint(tmp_path / "ac" / "last")
    assert sorted(last.weights) == ["policy", "value"] and sorted(last.trainer["optimizers"]) == ["policy", "value"]
    assert any(not torch.equal(init.weights["policy"][k], v) for k, v in last.weights["policy"].items())
    choice = json.loads((tmp_path / "ac" / "lookahead.json").read_text())
    assert set(choice["scores"]) == {"0.5", "1.0"} and choice["best_lambda"] in (0.5, 1.0)
    # lambda 1 is the beam search validation picked the best epoch with
    best_cider = load_checkpoint(tmp_path / "ac" / "best").manifest["metrics"]["CIDEr"]
    assert choice["scores"]["1.0"] == pytest.approx(best_cider)
    # the same choice through the CLI
    assert main(["eval", str(tmp_path / "ac" / "best"), "--lookahead", "0.5,1", "--out", str(tmp_path / "cli")]) == 0
    assert json.loads((tmp_path / "cli" / "lookahead.json").read_text())["scores"] == choice["scores"]
    assert main(["eval", str(tmp_path / "ac" / "best"), "--lookahead", "0.5,2"]) == 2  # lambda outside [0, 1]


def test_value_pretraining_leaves_the_policy_and_moves_the_value_network(runs, tmp_path):
    dataset, feats, folder = runs
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "pre",
                                                   **ac_settings(folder, max_steps=2)))
    api.train(cfg)
    init, last = load_checkpoint(folder / "xe" / "best"), load_checkpoint(tmp_path / "pre" / "last")
    assert all(torch.equal(init.weights["policy"][k], v) for k, v in last.weights["policy"].items())
    assert last.trainer["state"]["value_pretrain"] == {"epoch": 0, "step_in_epoch": 2}
    cfg2 = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "pre2",
                                                    **ac_settings(folder, max_steps=1)))
    api.train(cfg2)
    one = load_checkpoint(tmp_path / "pre2" / "last").weights["value"]
    assert any(not torch.equal(one[k], v) for k, v in last.weights["value"].items())
