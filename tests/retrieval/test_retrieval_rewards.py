"""The retrieval rewards of [Chaffin24]: pools built from the call's captions, the batch's ground truth and
the bank's mined neighbours, then eq. 2 / CLIP-S; and the registry entry with a trained dual encoder."""

import pytest
import torch

from rlcap.rewards import RewardBatch
from rlcap.rewards.image_bank import ImageBank
from rlcap.rewards.retrieval import RetrievalReward
from rlcap.rl.contrastive import bicont_reward, clip_s, i2t_reward, t2i_reward

ANGLE = {"red circle": 0.0, "red disc": 20.0, "blue square": 90.0, "a red shape": 40.0, "a blue box": 70.0,
         "green star": 50.0}


class AngleRetriever:
    """Each caption is a unit vector at a fixed angle: rewards computable by hand."""

    temperature = 0.5

    def embed_captions(self, captions):
        a = torch.tensor([ANGLE[c] for c in captions]) * torch.pi / 180
        return torch.stack([a.cos(), a.sin()], dim=1) if captions else torch.zeros(0, 2)


def unit(deg):
    a = torch.tensor(deg) * torch.pi / 180
    return torch.stack([a.cos(), a.sin()], dim=-1)


# images: "r" at 5 deg, "b" at 85 deg, "g" at 45 deg (a mined neighbour of both, never in a batch)
BANK = ImageBank(["r", "b", "g"], unit([5.0, 85.0, 45.0]), torch.tensor([[2], [2], [0]]), "angles", "test")
BATCH = RewardBatch(["r", "r", "b"], [["a red shape", "red circle"]] * 2 + [["a blue box"]])
CAPTIONS = ["red circle", "red disc", "blue square"]


def test_pools_and_rewards_by_hand():
    texts = AngleRetriever().embed_captions(CAPTIONS)
    # text pool: the three captions, then the ground truth not among them ("red circle" is one of them)
    pool = torch.cat([texts, AngleRetriever().embed_captions(["a red shape", "a blue box"])])
    owner = torch.tensor([0, 0, 1, 0, 1])
    images = unit([5.0, 85.0, 45.0])  # the batch's r and b, then their neighbour g, once
    for kind, fn in (("i2t", i2t_reward), ("t2i", t2i_reward), ("bicont", bicont_reward)):
        got = RetrievalReward(AngleRetriever(), BANK, kind, hard_negatives=1)(CAPTIONS, BATCH)
        torch.testing.assert_close(got, fn(pool, images, owner, 0.5)[:3])
    # without hard negatives g leaves the image pool: t2i of "red circle" = s(r) - tau * log e^{s(b)/tau}
    got = RetrievalReward(AngleRetriever(), BANK, "t2i", hard_negatives=0)(CAPTIONS, BATCH)
    cos = lambda d: torch.tensor(d * torch.pi / 180).cos()  # noqa: E731
    assert float(got[0]) == pytest.approx(float(cos(5.0) - cos(85.0)), abs=1e-6)
    got = RetrievalReward(AngleRetriever(), BANK, "clip_s", tau=0.1)(CAPTIONS, BATCH)
    torch.testing.assert_close(got, clip_s(texts, images[[0, 0, 1]]))


def test_tau_defaults_to_the_retrievers_own():
    assert RetrievalReward(AngleRetriever(), BANK, "bicont").tau == 0.5
    assert RetrievalReward(AngleRetriever(), BANK, "bicont", tau=0.05).tau == 0.05


def test_registry_builds_from_a_trained_dual_encoder(tmp_path):
    from rlcap import api
    from rlcap.rewards import build_reward
    from rlcap.rewards.reward_config import RewardConfig
    from rlcap.data.loader import DataConfig
    from rlcap.rewards.image_bank import build_image_bank
    from tests.tiny import make_tiny_dataset, tiny_overrides

    dataset, feats = make_tiny_dataset(tmp_path)
    settings = {"algorithm": "embedding", "embedding.loss": "infonce", "embedding.epochs": 2, "embedding.batch_size": 8,
                "embedding.model.word_dim": 8, "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8}
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "ret", **settings)))
    bank = build_image_bank(tmp_path / "ret" / "best", DataConfig(dataset=str(dataset), features=str(feats)), k=3)
    assert len(bank.ids) == 36 and bank.neighbours.shape == (36, 3)
    bank.save(tmp_path / "bank.h5")
    cfg = RewardConfig(weights={"bicont": 0.94, "clip_s": 0.06},
                       paths={"retrieval": str(tmp_path / "ret" / "best"), "retrieval_bank": str(tmp_path / "bank.h5")})
    with build_reward(cfg, {}) as reward:
        batch = RewardBatch(["0", "0", "1"], [["a red circle"], ["a red circle"], ["blue square on the left"]])
        values = reward(["a red circle", "green square", "blue square"], batch)
    from rlcap.models.retriever import load_retriever
    from rlcap.rewards.image_bank import load_image_bank

    retriever, loaded = load_retriever(tmp_path / "ret" / "best"), load_image_bank(tmp_path / "bank.h5")
    assert retriever.temperature == 0.07  # InfoNCE's default, the contrastive rewards' tau
    parts = {kind: RetrievalReward(retriever, loaded, kind)(["a red circle", "green square", "blue square"], batch)
             for kind in ("bicont", "clip_s")}
    torch.testing.assert_close(values, 0.94 * parts["bicont"] + 0.06 * parts["clip_s"])


def test_ground_truth_is_embedded_once_per_run():
    class Counting(AngleRetriever):
        def __init__(self):
            self.seen = []

        def embed_captions(self, captions):
            self.seen += captions
            return super().embed_captions(captions)

    retriever = Counting()
    reward = RetrievalReward(retriever, BANK, "bicont", hard_negatives=1)
    first = reward(CAPTIONS, BATCH)
    # each image's references together, all of them (the same rows whichever batch meets them first)
    assert retriever.seen == [*CAPTIONS, "a red shape", "red circle", "a blue box"]
    second = reward(CAPTIONS, BATCH)  # the same batch again: only the captions scored are embedded
    assert retriever.seen == [*CAPTIONS, "a red shape", "red circle", "a blue box", *CAPTIONS]
    assert torch.equal(first, second)


def test_negative_captions_join_the_text_pool_by_hand():
    # g (45 deg), the mined neighbour of r and b, is described by "green star" (50 deg): with one
    # negative caption per mined image it joins the text pool as g's, and the i2t baseline of every
    # image of the batch now includes it.
    captions_of = {"r": ["a red shape"], "b": ["a blue box"], "g": ["green star", "a red shape"]}
    reward = RetrievalReward(AngleRetriever(), BANK, "i2t", hard_negatives=1, negative_captions=1, captions_of=captions_of)
    got = reward(["red circle"], RewardBatch(["r"], [["red circle"]]))
    # pool: texts "red circle" (owner r); images r, then g; the extra caption "green star" owned by g
    cos = lambda d: torch.tensor(d * torch.pi / 180).cos()  # noqa: E731
    expected = cos(5.0) - 0.5 * torch.log(torch.exp(cos(45.0) / 0.5))  # s(red circle, r) - tau log e^{s(green star, r)/tau}
    assert float(got[0]) == pytest.approx(float(expected), abs=1e-6)
    # without them the caption has no other caption to beat: an empty denominator, +inf (documented)
    alone = RetrievalReward(AngleRetriever(), BANK, "i2t", hard_negatives=1)(["red circle"], RewardBatch(["r"], [["red circle"]]))
    assert float(alone[0]) == float("inf")
    # t2i is unchanged by extra texts; the extra captions' own rewards are not returned
    t2i = RetrievalReward(AngleRetriever(), BANK, "t2i", hard_negatives=1, negative_captions=2, captions_of=captions_of)
    plain = RetrievalReward(AngleRetriever(), BANK, "t2i", hard_negatives=1)
    torch.testing.assert_close(t2i(CAPTIONS, BATCH), plain(CAPTIONS, BATCH))
    with pytest.raises(ValueError, match="captions_of"):
        RetrievalReward(AngleRetriever(), BANK, "i2t", negative_captions=1)


def test_mined_captions_join_the_text_pool_by_hand():
    # the policy's caption of g (the mined neighbour of r and b), "green star" at 50 deg, given as an
    # embedding owned by g: it joins the i2t baseline of r's caption, exactly as g's human caption does above
    reward = RetrievalReward(AngleRetriever(), BANK, "i2t", hard_negatives=1)
    mined = {"g": AngleRetriever().embed_captions(["green star"])}
    got = reward.pool_scores(AngleRetriever().embed_captions(["red circle"]), ["r"], mined)
    cos = lambda d: torch.tensor(d * torch.pi / 180).cos()  # noqa: E731
    expected = cos(5.0) - 0.5 * torch.log(torch.exp(cos(45.0) / 0.5))
    assert got.shape == (1,) and float(got[0]) == pytest.approx(float(expected), abs=1e-6)
    # both sources at once: g's human caption "a red shape" (40 deg) and the mined one
    both = RetrievalReward(AngleRetriever(), BANK, "i2t", hard_negatives=1, negative_captions=1,
                           captions_of={"g": ["a red shape"]})
    got = both.pool_scores(AngleRetriever().embed_captions(["red circle"]), ["r"], mined)
    baseline = 0.5 * torch.log(torch.exp(cos(35.0) / 0.5) + torch.exp(cos(45.0) / 0.5))  # s(a red shape, r), s(green star, r)
    assert float(got[0]) == pytest.approx(float(cos(5.0) - baseline), abs=1e-6)
    # t2i is unchanged by extra texts
    t2i = RetrievalReward(AngleRetriever(), BANK, "t2i", hard_negatives=1)
    texts = AngleRetriever().embed_captions(CAPTIONS)
    torch.testing.assert_close(t2i.pool_scores(texts, BATCH.image_ids, mined), t2i.pool_scores(texts, BATCH.image_ids))
    # captions of an image outside the pool are an error, not a silent extra image
    with pytest.raises(ValueError, match="not in the batch's image pool"):
        RetrievalReward(AngleRetriever(), BANK, "i2t", hard_negatives=0).pool_scores(texts, BATCH.image_ids, mined)
