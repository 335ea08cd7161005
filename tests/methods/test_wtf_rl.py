"""Distinctive captioning ([Chaffin24]): eq. 3's loss, the discriminator's pretraining and update on a toy
set, a short run of each Table 1 variant, and a killed run that resumes exactly (captioner,
discriminator, both optimizers)."""

import json

import pytest
import torch

from rlcap import api
from rlcap.data.loader import DataConfig
from rlcap.rewards.image_bank import build_image_bank
from rlcap.rl.contrastive import discriminator_loss
from rlcap.rl.losses import reinforce_loss
from rlcap.train.checkpoint import load_checkpoint
from rlcap.methods.wtf_rl import bs_weights, eq3_loss, gt_weights
from tests.train.killing import assert_resume_is_exact, assert_same_final_checkpoints
from tests.tiny import make_tiny_dataset, tiny_overrides

PRETRAIN_EPOCHS, RL_EPOCHS, STEPS_PER_EPOCH = 1, 2, 3  # 24 training images, 8 a batch


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wtf")
    dataset, feats = make_tiny_dataset(folder)
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "xe", **{"xe.epochs": 3})))
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, folder / "ret", **{
        "algorithm": "embedding", "embedding.loss": "infonce", "embedding.epochs": 2, "embedding.batch_size": 8,
        "embedding.model.word_dim": 8, "embedding.model.hidden_dim": 8, "embedding.model.joint_dim": 8})))
    build_image_bank(folder / "ret" / "best", DataConfig(dataset=str(dataset), features=str(feats)), k=3
                     ).save(folder / "bank.h5")
    return dataset, feats, folder


def settings(folder, algorithm="wtf_rl", **extra):
    return {"algorithm": algorithm, "init_from": folder / "xe" / "best", "rl.epochs": RL_EPOCHS, "rl.batch_size": 8,
            "data.seq_per_img": 1, "decode.beam_size": 2, "optim.lr": 0.001, "val.max_images": 4,
            f"{algorithm}.discriminator_pretrain_epochs": PRETRAIN_EPOCHS, f"{algorithm}.discriminator_hidden": 16,
            f"{algorithm}.discriminator_lr": 0.01,
            "reward.paths": f"{{retrieval: {folder / 'ret' / 'best'}, retrieval_bank: {folder / 'bank.h5'}}}", **extra}


def test_eq3_with_unit_rewards_is_teacher_forcing():
    lp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    gt = torch.tensor([[-3.0, -1.0]])
    gt_mask = torch.tensor([[True, True]])
    # r = 1 everywhere: the mean negative log-likelihood over all 5 words
    got = eq3_loss([(lp, mask, torch.ones(2)), (gt, gt_mask, torch.ones(1))])
    assert float(got) == pytest.approx((1 + 2 + 0.5 + 3 + 1) / 5)
    # WTF scales each caption's words by its reward: r = (2, 0) for x_bs, 0.5 for x_gt
    got = eq3_loss([(lp, mask, torch.tensor([2.0, 0.0])), (gt, gt_mask, torch.tensor([0.5]))])
    assert float(got) == pytest.approx((2 * (1 + 2) + 0.5 * (3 + 1)) / 5)
    assert float(got) == pytest.approx(float(reinforce_loss(
        torch.tensor([[-1.0, -2.0], [-0.5, 0.0], [-3.0, -1.0]]), torch.tensor([[1, 1], [1, 0], [1, 1]]),
        torch.tensor([2.0, 0.0, 0.5]))))


def test_positive_gt_weights_drop_negative_rewards_only():
    r = torch.tensor([-0.2, 0.0, 0.3])
    assert torch.equal(gt_weights(r, "reward"), r)
    assert torch.equal(gt_weights(r, "positive"), torch.tensor([0.0, 0.0, 0.3]))
    # with positive weights, WTF is teacher forcing on the third caption alone, scaled by 0.3
    lp, mask = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -1.0]]), torch.ones(3, 2, dtype=torch.bool)
    assert float(eq3_loss([(lp, mask, gt_weights(r, "positive"))])) == pytest.approx(0.3 * (3 + 1) / 6)
    with pytest.raises(ValueError, match="unknown mode"):
        gt_weights(r, "clip")


def test_batch_mean_bs_weights_centre_the_beams_rewards():
    r = torch.tensor([-0.4, -0.1, -0.1])  # every beam below zero: eq. 3 as written pushes all three down
    assert torch.equal(bs_weights(r, "none"), r)
    assert torch.allclose(bs_weights(r, "batch_mean"), torch.tensor([-0.2, 0.1, 0.1]))
    with pytest.raises(ValueError, match="unknown baseline"):
        bs_weights(r, "greedy")


def test_discriminator_learns_a_toy_set():
    from rlcap.models.discriminator import Discriminator

    torch.manual_seed(0)
    human, generated = torch.randn(64, 4) + 1.0, torch.randn(64, 4) - 1.0
    images = torch.zeros(64, 4)
    d = Discriminator(4, hidden=16)
    opt = torch.optim.Adam(d.parameters(), lr=0.01)
    with torch.no_grad():
        before = float(discriminator_loss(d(human, images), d(generated, images)))
    for _ in range(100):
        loss = discriminator_loss(d(human, images), d(generated, images))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.3 < before
    assert float((d(human, images) > 0).float().mean()) > 0.9 and float((d(generated, images) < 0).float().mean()) > 0.9
    # BCE by hand: logits 0 on both sides -> log 2
    assert float(discriminator_loss(torch.zeros(3), torch.zeros(2))) == pytest.approx(float(torch.log(torch.tensor(2.0))))


@pytest.mark.parametrize("variant", [{"wtf_rl.trajectories": "both", "wtf_rl.gt_weight": "positive"}, {"wtf_rl.trajectories": "gt"},
                                     {"wtf_rl.trajectories": "bs", "wtf_rl.similarity": "i2t"},
                                     {"algorithm": "scst_discriminator", "scst_discriminator.similarity": "clip_s",
                                      "rl.n_samples": 2},
                                     {"wtf_rl.trajectories": "both", "reward.negative_captions": 2},
                                     {"wtf_rl.trajectories": "both", "wtf_rl.mined_captions": 2}],
                         ids=["wtf_rl", "wtf", "beam_rl_i2t", "scst_discriminator", "wtf_rl_negative_captions",
                              "wtf_rl_mined_captions"])
def test_variants_run_and_log(runs, tmp_path, variant):
    dataset, feats, folder = runs
    result = api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run",
                                                                **settings(folder, **variant))))
    assert result.steps == (PRETRAIN_EPOCHS + RL_EPOCHS) * STEPS_PER_EPOCH
    records = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("split") == "train"]
    assert {r["phase"] for r in train} == {1.0, 2.0}
    assert all(r["loss"] == 0.0 for r in train if r["phase"] == 1.0)  # the captioner waits for the discriminator
    assert all(r["loss"] != 0.0 for r in train if r["phase"] == 2.0)
    ckpt = load_checkpoint(tmp_path / "run" / "last")
    assert sorted(ckpt.weights) == ["discriminator", "policy"]
    xe = load_checkpoint(folder / "xe" / "best").weights["policy"]
    assert any(not torch.equal(ckpt.weights["policy"][k], xe[k]) for k in xe)  # the policy moved


def test_missing_retriever_is_one_clear_error(runs, tmp_path):
    from rlcap.errors import ConfigError

    dataset, feats, folder = runs
    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **settings(folder, **{
        "reward.paths": "{}"})))
    with pytest.raises(ConfigError, match="reward.paths.retrieval"):
        api.train(cfg)


def test_the_loop_builds_its_image_bank_once(runs, tmp_path):
    from rlcap.rewards.image_bank import load_image_bank

    dataset, feats, folder = runs
    over = settings(folder, **{"reward.paths": f"{{retrieval: {folder / 'ret' / 'best'}}}", "rl.epochs": 1,
                               "wtf_rl.discriminator_pretrain_epochs": 0})
    api.train(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **over)))
    built, given = load_image_bank(tmp_path / "run" / "image_bank.h5"), load_image_bank(folder / "bank.h5")
    assert built.ids == given.ids
    torch.testing.assert_close(built.embeddings, given.embeddings)


@pytest.mark.parametrize("kill_step", [2, 6], ids=["in_discriminator_pretraining", "in_the_loop"])
def test_killed_wtf_rl_run_resumes_exactly(runs, tmp_path, kill_step):
    dataset, feats, folder = runs
    overrides = tiny_overrides(dataset, feats, tmp_path / "unused", **settings(folder, save_every=2))
    total = (PRETRAIN_EPOCHS + RL_EPOCHS) * STEPS_PER_EPOCH
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", kill_step, total)
    assert_same_final_checkpoints(tmp_path / "reference", tmp_path / "killed", ["discriminator", "policy"])


def test_mined_captions_are_the_policys_greedy_captions_of_the_neighbours(runs, tmp_path):
    from rlcap.decoding import greedy
    from rlcap.models.retriever import load_retriever
    from rlcap.rewards.image_bank import load_image_bank
    from rlcap.rewards.retrieval import RetrievalReward
    from rlcap.train.session import open_session
    from rlcap.methods.wtf_rl import mined_captions

    dataset, feats, folder = runs
    s = open_session(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **settings(folder))))
    bank, retriever = load_image_bank(folder / "bank.h5"), load_retriever(folder / "ret" / "best")
    reward = RetrievalReward(retriever, bank, "bicont", hard_negatives=2)
    train = s.data.splits["train"]
    batch = next(train.batches(8, 1, 0, 0))
    got = mined_captions(s, batch, reward, 2)
    # the first two neighbours of each batch image, once each, neither a batch image nor outside the training split
    expected = [bank.ids[n] for r in bank.rows(batch.ids).tolist() for n in bank.neighbours[r, :2].tolist()]
    expected = [i for i in dict.fromkeys(expected) if i not in batch.ids and i in train.ids]
    assert list(got) == expected and expected
    s.model.eval()
    for image_id, embedded in got.items():
        row = torch.tensor([train.ids.index(image_id)])
        with torch.no_grad():
            tokens = greedy(s.model, train.feats(row), s.cfg.decode.max_len).tokens
        caption = s.data.vocab.decode(tokens[0].tolist())
        torch.testing.assert_close(embedded, retriever.embed_captions([caption]))
    # more neighbours than the image pool holds: one clear error when the run starts
    from rlcap.errors import ConfigError

    cfg = api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "bad", **settings(
        folder, **{"wtf_rl.mined_captions": 6, "reward.hard_negatives": 2})))
    with pytest.raises(ConfigError, match="mined_captions"):
        api.train(cfg)
    # CLIP-S has no text pool to extend: refused when the config is read
    with pytest.raises(ConfigError, match="text pool"):
        api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "bad", **settings(folder, **{
            "wtf_rl.mined_captions": 1, "wtf_rl.similarity": "clip_s"})))
    # SCST's samples are the scst_discriminator method, not a value of wtf_rl.trajectories
    with pytest.raises(ConfigError, match="algorithm=scst_discriminator"):
        api.load_run_config(None, ["algorithm=wtf_rl", "wtf_rl.trajectories=sample"])


def test_beam_trajectories_follow_decode_no_repeat_ngram(runs, tmp_path):
    from rlcap.decoding import Decoding, beam_search
    from rlcap.train.session import open_session
    from rlcap.methods.wtf_rl import decode_trajectories

    dataset, feats, folder = runs
    s = open_session(api.load_run_config(None, tiny_overrides(dataset, feats, tmp_path / "run", **settings(
        folder, **{"decode.no_repeat_ngram": 1}))))
    batch = next(s.data.splits["train"].batches(8, 1, 0, 0))
    got = decode_trajectories(s, batch).bs
    s.model.eval()
    free = beam_search(s.model, batch.feats, Decoding("beam", s.cfg.decode.max_len, beam_size=2)).tokens
    blocking = Decoding("beam", s.cfg.decode.max_len, beam_size=2, no_repeat_ngram=1)
    banned = beam_search(s.model, batch.feats, blocking).tokens
    assert torch.equal(got, banned)
    text = s.data.vocab.decode
    assert [text(r) for r in got.tolist()] != [text(r) for r in free.tolist()]  # the ban changed some x_bs
    for row in got.tolist():
        words = [w for w in row if w > 2]  # no PAD, BOS, EOS
        assert len(words) == len(set(words))
