"""Reward names: the registry dict, dotted import paths, unknown names, and RewardConfig."""

import textwrap

import pytest
import torch

from rlcap.config import from_dict
from rlcap.errors import ConfigError
from rlcap.rewards import (REWARDS, BleuReward, CiderDReward, RewardBatch, RewardConfig, RewardContext, build_reward,
                           resolve_reward)

TRAIN_REFS = {"1": ["A dog."], "2": ["a cat"]}


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "rlcap_test_user_reward.py").write_text(textwrap.dedent("""
        import torch

        def words(captions, batch):
            return torch.tensor([float(len(c.split())) for c in captions])

        NOT_CALLABLE = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "rlcap_test_user_reward"


def test_registry_is_a_plain_dict_of_the_documented_names():
    assert set(REWARDS) == {"cider_d", "cider", "bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "spice", "spider", "bcmr",
                            "embedding", "clip_s", "ref_clip_s", "i2t", "t2i", "bicont", "length", "repetition",
                            "qa_utility"}


def test_build_weighted_cider_and_bleu():
    reward = build_reward(RewardConfig(weights={"cider_d": 1.0, "bleu_4": 0.5}), TRAIN_REFS)
    assert isinstance(reward.rewards["cider_d"], CiderDReward)
    assert isinstance(reward.rewards["bleu_4"], BleuReward) and reward.rewards["bleu_4"].n == 4
    assert reward.weights == {"cider_d": 1.0, "bleu_4": 0.5}


@pytest.mark.parametrize("style", [":", "."])
def test_dotted_path_reward(user_module, style):
    name = f"{user_module}{style}words"
    reward = build_reward(RewardConfig(weights={name: 2.0}), TRAIN_REFS)
    batch = RewardBatch(["1", "2"], [["a dog"], ["a cat"]])
    assert torch.equal(reward(["a dog runs", "x"], batch), torch.tensor([6.0, 2.0]))


def test_dotted_path_errors(user_module):
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'"):
        resolve_reward("no_such_module_xyz:f", RewardContext(TRAIN_REFS))
    with pytest.raises(ConfigError, match="has no attribute 'missing'"):
        resolve_reward(f"{user_module}:missing", RewardContext(TRAIN_REFS))
    with pytest.raises(ConfigError, match="is a int, not a callable"):
        resolve_reward(f"{user_module}:NOT_CALLABLE", RewardContext(TRAIN_REFS))


def test_unknown_name_lists_allowed():
    with pytest.raises(ConfigError, match=r"unknown reward 'ciderd'; allowed: cider_d, cider, bleu_1, .* rouge_l, spice, spider"):
        RewardConfig(weights={"ciderd": 1.0})


def test_config_from_yaml_mapping():
    cfg = from_dict(RewardConfig, {"weights": {"cider_d": 1, "bleu_4": 0.5}, "eos_counts": False})
    assert cfg.weights == {"cider_d": 1.0, "bleu_4": 0.5} and cfg.eos_counts is False
    assert cfg.nonfinite == "raise"


@pytest.mark.parametrize("data, message", [
    ({"weights": {}}, "weights is empty"),
    ({"weights": {"cider_d": float("nan")}}, "finite"),
    ({"nonfinite": "ignore"}, "not one of"),
    ({"weigths": {"cider_d": 1.0}}, "unknown config key weigths"),
])
def test_config_errors(data, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(RewardConfig, data)


def test_spice_and_spider_rewards_need_no_java():
    refs = {"1": ["A red car.", "a red car parked"], "2": ["a dog"]}
    batch = RewardBatch(["1", "1", "2"], [refs["1"], refs["1"], refs["2"]])
    captions = ["a red car", "a dog", "a dog"]
    with build_reward(RewardConfig(weights={"spice": 1.0}), refs) as spice:
        spice_scores = spice(captions, batch)
    # "a red car": tuples {car, (car, red)}, both in the references' merged graph {car, (car, red),
    # (car, parked)}: P 1, R 2/3, F 0.8; "a dog" against image 1: no match; against image 2: F 1
    assert spice_scores.tolist() == pytest.approx([0.8, 0.0, 1.0])
    with build_reward(RewardConfig(weights={"cider_d": 1.0}), refs) as cider:
        cider_scores = cider(captions, batch)
    with build_reward(RewardConfig(weights={"spider": 1.0}), refs) as spider:
        assert torch.allclose(spider(captions, batch), (cider_scores + spice_scores) / 2)


class _ImageNorm:
    """A reward that reads the images (as embedding and retrieval rewards do) and must be closed."""

    def __init__(self, ctx):
        self.ctx, self.closed = ctx, False

    def __call__(self, captions, batch):
        return batch.caption_feats().fc.norm(dim=1)

    def close(self):
        self.closed = True


def test_a_learned_reward_gets_the_context_and_the_features_once_per_image(monkeypatch, tmp_path):
    from rlcap.data.feats import Feats

    built = []
    monkeypatch.setitem(REWARDS, "image_norm", lambda ctx: built.append(_ImageNorm(ctx)) or built[-1])
    cfg = RewardConfig(weights={"image_norm": 1.0}, paths={"image_norm": str(tmp_path / "ckpt")})
    with build_reward(cfg, TRAIN_REFS, vocab="VOCAB", fc_dim=2, att_dim=3) as reward:
        ctx = built[0].ctx
        assert (ctx.vocab, ctx.fc_dim, ctx.att_dim, ctx.path("image_norm")) == ("VOCAB", 2, 3, tmp_path / "ckpt")
        feats = Feats(torch.tensor([[3.0, 4.0], [0.0, 1.0]]), torch.zeros(2, 1, 2), torch.ones(2, 1, dtype=torch.bool))
        batch = RewardBatch(["1", "1", "2"], [["a"], ["a"], ["b"]], feats, torch.tensor([0, 0, 1]))
        assert batch.feats.fc.shape[0] == 2  # one row per image: the batch holds no per-caption copy
        assert torch.equal(reward(["x", "y", "z"], batch), torch.tensor([5.0, 5.0, 1.0]))
    assert built[0].closed


def test_a_reward_without_its_path_names_the_key():
    with pytest.raises(ConfigError, match=r"reward.paths.embedding=PATH"):
        RewardContext(TRAIN_REFS).path("embedding")
