"""CIDEr-D from token ids on the device: equal to the CPU reward on the strings the ids decode to, with no
host synchronisation."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from rlcap.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab
from rlcap.errors import ConfigError, DataError
from rlcap.host_sync import count_host_syncs
from rlcap.metrics.tokenize import tokenize
from rlcap.rewards.batch import RewardBatch, with_eos
from rlcap.rewards.cider_device import CiderDDeviceReward, caption_words
from rlcap.rewards.combine import TokenReward

# Two training images; document frequencies: "a" in both (idf 0), "dog", "cat" in one (idf ln 2).
TRAIN_REFS = {"1": ["A dog."], "2": ["a cat"]}
# Words whose tokens are not the word alone: "no." keeps its period only before a number, "n." loses it
# before a sentence starter ("The", or the end of the caption); "-" tokenizes to nothing, "cannot" to two
# tokens, "" and an emoji-only word to no chunk at all; "zebra" is absent from every reference.
TRICKY = ["a", "dog", "cat", "no.", "n.", "The", "5", "-", "cannot", "", "\U0001F600", "zebra", "hot dog"]


def tokens_of(vocab: Vocab, captions: list[list[int]]) -> torch.Tensor:
    """(N, T) ids, each caption padded with PAD to the longest."""
    out = torch.full((len(captions), max(map(len, captions))), PAD)
    for i, ids in enumerate(captions):
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def cpu_scores(reward: CiderDDeviceReward, vocab: Vocab, tokens: torch.Tensor, image_ids: list[str]) -> np.ndarray:
    """The CPU scorer's float64 scores of the strings the ids decode to, as CiderDReward scores them."""
    captions = [with_eos(tokenize(vocab.decode(t)), reward.eos_counts) for t in tokens.tolist()]
    return reward.cpu.scorer.score(captions, image_ids, plain=reward.plain)


def device_scores(reward: CiderDDeviceReward, tokens: torch.Tensor, image_ids: list[str]) -> np.ndarray:
    """score_tokens' float64 scores, before its cast to float32."""
    row_of = {image_id: row for row, image_id in enumerate(reward.cpu.scorer.image_ids)}
    words, lengths = caption_words(tokens, reward.word_table)
    rows = torch.tensor([row_of[i] for i in image_ids])
    return reward.tables.score(words, lengths, rows, plain=reward.plain).numpy()


# ------------------------------------------------------------------ the real captions
@pytest.fixture(scope="module")
def coco(shared_dir):
    """5,000 COCO images: each one's held-out human caption as ids of a vocabulary built from the
    references (candidate words seen fewer than twice there are UNK), and its four references."""
    items = json.loads((shared_dir / "data" / "coco" / "human_agreement_5k.json").read_text())
    refs = {str(x["image_id"]): x["references"] for x in items}
    vocab = Vocab.build((tokenize(c) for captions in refs.values() for c in captions), min_count=2)
    tokens = tokens_of(vocab, [vocab.encode(tokenize(x["candidate"])) + [EOS] for x in items])
    return refs, vocab, tokens, list(refs)


@pytest.mark.parametrize("eos_counts", [False, True])
@pytest.mark.parametrize("plain", [False, True])
def test_equals_the_cpu_reward_on_5000_coco_captions(coco, eos_counts, plain, tmp_path_factory):
    refs, vocab, tokens, image_ids = coco
    cache = tmp_path_factory.getbasetemp() / f"cider_d_eos_{eos_counts}.npz"  # plain and CIDEr-D share it
    reward = CiderDDeviceReward(refs, vocab, eos_counts, cache=cache, plain=plain)
    assert (tokens == UNK).any()
    expected = cpu_scores(reward, vocab, tokens, image_ids)
    np.testing.assert_allclose(device_scores(reward, tokens, image_ids), expected, rtol=0, atol=1e-9)
    assert expected.mean() > 0.5
    # the reward's own outputs, float32, on 16 ids as a training step samples them: the longer captions
    # are cut, with no EOS. Equal within the float32 rounding of scores up to about 10.
    short = tokens[:500, :16]
    assert ((short != EOS) & (short != PAD)).all(dim=1).any()
    captions = [vocab.decode(t) for t in short.tolist()]
    batch = RewardBatch(image_ids[:500], [refs[i] for i in image_ids[:500]])
    got = reward.score_tokens(short, image_ids[:500])
    assert got.dtype == torch.float32 and got.shape == (500,)
    torch.testing.assert_close(got, reward(captions, batch), rtol=0, atol=2e-6)


# ------------------------------------------------------------------ hand-made cases
@pytest.fixture
def vocab():
    return Vocab(list(SPECIALS) + TRICKY)


@pytest.mark.parametrize("eos_counts", [False, True])
def test_hand_computed_values(vocab, eos_counts):
    reward = CiderDDeviceReward(TRAIN_REFS, vocab, eos_counts)
    ids = vocab.stoi
    tokens = tokens_of(vocab, [[ids["a"], ids["dog"], EOS], [ids["a"], EOS], [EOS, ids["dog"]]])
    # [a, dog] vs [a, dog]: cosine 1 at n = 1, 2 -> 10 * 2/4; with the end token n = 3 matches too.
    # "a" alone has idf 0; EOS first is the empty caption: 0.
    expected = [7.5 if eos_counts else 5.0, 0.0, 0.0]
    torch.testing.assert_close(reward.score_tokens(tokens, ["1", "1", "1"]), torch.tensor(expected))


@pytest.mark.parametrize("eos_counts", [False, True])
@pytest.mark.parametrize("plain", [False, True])
def test_hand_made_captions_equal_the_cpu_reward(vocab, eos_counts, plain):
    refs = {"1": ["a dog a dog on the grass", "no. 5 dog cannot run"], "2": ["a cat n. The end", "a cat"],
            "3": ["dog dog dog dog dog"]}
    reward = CiderDDeviceReward(refs, vocab, eos_counts, plain=plain)
    w = vocab.stoi
    captions = [
        [w["a"], w["dog"], w["a"], w["dog"], w["a"], w["dog"], EOS],  # repeated 1-, 2-, 3- and 4-grams
        [w["dog"]] * 7,  # max length, no EOS: one word 7 times
        [EOS, w["dog"], w["cat"]],  # empty
        [PAD, w["dog"]],  # empty (PAD ends a caption too)
        [w["a"], w["zebra"], w["cat"], EOS],  # a word absent from the references
        [w["a"], UNK, w["dog"], UNK, EOS],  # UNK: the three tokens "< unk >"
        [BOS, w["a"], BOS, w["cat"], EOS],  # BOS is skipped
        [w["no."], w["5"], w["dog"], w["no."], w["n."], w["The"], w["n."]],  # tokens that depend on what follows
        [w["cannot"], w["-"], w[""], w["\U0001F600"], w["hot dog"], w["n."], w[""]],  # 2, 0, no chunk
    ]
    tokens = tokens_of(vocab, captions)
    for images in (["1"] * 9, ["2"] * 9, ["3"] * 9):
        np.testing.assert_allclose(device_scores(reward, tokens, images), cpu_scores(reward, vocab, tokens, images),
                                   rtol=0, atol=1e-12)
    assert device_scores(reward, tokens, ["1"] * 9)[2:4].tolist() == [0.0, 0.0]
    assert device_scores(reward, tokens, ["3"] * 9)[1] > 0  # repeated "dog" is clipped, not dropped


@pytest.mark.parametrize("eos_counts", [False, True])
def test_words_are_those_of_decode_then_tokenize(vocab, eos_counts):
    """Random ids over the tricky words, the special ids included: the scorer words made on the device are
    exactly ``with_eos(tokenize(vocab.decode(ids)))``."""
    reward = CiderDDeviceReward({"1": ["a dog no. 5", "The cat"]}, vocab, eos_counts)
    rng = random.Random(0)
    tokens = torch.tensor([[rng.randrange(len(vocab)) for _ in range(9)] for _ in range(2000)])
    words, lengths = caption_words(tokens, reward.word_table)
    names = reward.word_table.names
    for ids, row, length in zip(tokens.tolist(), words.tolist(), lengths.tolist()):
        assert [names[i] for i in row[:length]] == with_eos(tokenize(vocab.decode(ids)), eos_counts), ids


def test_no_ids_at_all_is_an_empty_caption(vocab):
    reward = CiderDDeviceReward(TRAIN_REFS, vocab, eos_counts=True)
    assert reward.score_tokens(torch.zeros((2, 0), dtype=torch.long), ["1", "2"]).tolist() == [0.0, 0.0]


# ------------------------------------------------------------------ no host synchronisation, errors
def test_score_tokens_makes_no_host_synchronisation(vocab):
    reward = CiderDDeviceReward(TRAIN_REFS, vocab, eos_counts=True)
    tokens = torch.tensor([[vocab.stoi["a"], vocab.stoi["dog"], UNK, EOS], [vocab.stoi["cat"]] * 4])
    with count_host_syncs() as n:
        first = reward.score_tokens(tokens, ["1", "2"])  # the image rows are made and sent here
        reward.score_tokens(tokens, ["1", "2"])  # and kept for the same images
    assert n.total == 0, str(n)
    assert first.shape == (2,)


def test_bad_input_is_named(vocab):
    reward = CiderDDeviceReward(TRAIN_REFS, vocab, eos_counts=False)
    with pytest.raises(DataError, match="'7'"):
        reward.score_tokens(torch.tensor([[4, 5]]), ["7"])
    with pytest.raises(ValueError, match="2 image ids"):
        reward.score_tokens(torch.tensor([[4, 5]]), ["1", "2"])
    with pytest.raises(ConfigError, match="Vocab"):
        CiderDDeviceReward(TRAIN_REFS, object(), eos_counts=False)  # type: ignore[arg-type]


def test_is_also_an_ordinary_reward_on_strings(vocab):
    reward = CiderDDeviceReward(TRAIN_REFS, vocab, eos_counts=False)
    assert isinstance(reward, TokenReward)  # the weighted sum hands it token ids (score_tokens)
    out = reward(["A dog.", "a"], RewardBatch(["1", "1"], [["a dog"], ["a dog"]]))
    torch.testing.assert_close(out, torch.tensor([5.0, 0.0]))
