"""prefix_scores: the reward of every prefix of every caption ([Wang18 sec. 3.3.3]'s delta rewards), in one
reward call, checked by hand with a reward that counts the words of a caption found in its first reference."""

import torch

from rlcap.data.vocab import SPECIALS, Vocab
from rlcap.rewards import RewardBatch
from rlcap.rewards.prefix import prefix_scores

VOCAB = Vocab([*SPECIALS, "a", "dog", "cat", "runs"])  # a 4, dog 5, cat 6, runs 7; PAD 0, EOS 2
BATCH = RewardBatch(image_ids=["1", "2", "3"], refs=[["a dog runs"], ["a dog"], ["cat"]])


class WordsInReference:
    """Each caption's number of words found in its first reference; records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, captions, batch):
        self.calls.append((captions, batch))
        return torch.tensor([float(sum(w in refs[0].split() for w in c.split()))
                             for c, refs in zip(captions, batch.refs)])


def test_every_prefix_is_scored_in_one_call():
    tokens = torch.tensor([[4, 5, 7, 2, 0],   # "a dog runs" EOS PAD
                           [4, 6, 2, 0, 0],   # "a cat" EOS PAD PAD
                           [6, 6, 6, 6, 6]])  # "cat cat cat cat cat", never ended
    reward = WordsInReference()
    scores = prefix_scores(reward, VOCAB, tokens, BATCH)
    assert scores.dtype == torch.float32 and scores.device == tokens.device
    assert scores.tolist() == [[1.0, 2.0, 3.0, 3.0, 0.0],   # at EOS the whole caption again; PAD: 0
                               [1.0, 1.0, 1.0, 0.0, 0.0],   # "cat" is not in "a dog"
                               [1.0, 2.0, 3.0, 4.0, 5.0]]
    (captions, batch), = reward.calls
    assert captions == ["a", "a dog", "a dog runs", "a dog runs", "a", "a cat", "a cat",
                        "cat", "cat cat", "cat cat cat", "cat cat cat cat", "cat cat cat cat cat"]
    assert batch.image_ids == ["1"] * 4 + ["2"] * 3 + ["3"] * 5
    assert batch.refs == [["a dog runs"]] * 4 + [["a dog"]] * 3 + [["cat"]] * 5
    assert batch.feats is None


def test_captions_of_padding_only_call_no_reward():
    reward = WordsInReference()
    scores = prefix_scores(reward, VOCAB, torch.zeros(2, 3, dtype=torch.long), BATCH)
    assert scores.tolist() == [[0.0] * 3] * 2 and reward.calls == []


def test_an_empty_caption_scores_at_its_eos():
    reward = WordsInReference()
    scores = prefix_scores(lambda captions, batch: torch.full((len(captions),), 0.5) + reward(captions, batch),
                           VOCAB, torch.tensor([[2, 0]]), BATCH)
    assert scores.tolist() == [[0.5, 0.0]] and reward.calls[0][0] == [""]
