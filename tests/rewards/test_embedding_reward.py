"""The embedding reward ([Shi18 eq. 6]): the cosine of a caption and its image under the loaded model."""

import pytest
import torch

from rlcap.data.feats import Feats
from rlcap.data.vocab import BOS, EOS, Vocab
from rlcap.errors import ConfigError
from rlcap.models import EmbeddingModel, EmbeddingModelConfig
from rlcap.rewards import RewardBatch, RewardContext
from rlcap.rewards.embedding import EmbeddingReward, encode_captions, make_embedding

VOCAB = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "a", "red", "circle", "blue"])


def test_captions_are_encoded_with_the_models_vocabulary():
    tokens = encode_captions(["A red circle.", "blue square", ""], VOCAB)
    assert tokens.tolist() == [[BOS, 4, 5, 6, EOS], [BOS, 7, 3, EOS, 0], [BOS, EOS, 0, 0, 0]]


def test_reward_is_the_cosine_of_each_caption_and_its_own_image():
    torch.manual_seed(0)
    model = EmbeddingModel(EmbeddingModelConfig(8, 8, 4), len(VOCAB), 5).eval()
    fc = torch.randn(2, 5)
    images = Feats(fc, fc[:, None], torch.ones(2, 1, dtype=torch.bool))
    captions = ["a red circle", "blue", "a circle"]
    batch = RewardBatch(["0", "0", "1"], [["x"]] * 3, images, torch.tensor([0, 0, 1]))
    got = EmbeddingReward(model, VOCAB)(captions, batch)
    texts = model.embed_texts(encode_captions(captions, VOCAB))
    img = model.embed_images(images)
    expected = torch.stack([texts[0] @ img[0], texts[1] @ img[0], texts[2] @ img[1]])
    torch.testing.assert_close(got, expected.detach())
    assert got.shape == (3,) and bool((got.abs() <= 1).all())


def test_reward_needs_features_and_a_checkpoint():
    model = EmbeddingModel(EmbeddingModelConfig(8, 8, 4), len(VOCAB), 5)
    with pytest.raises(ValueError, match="needs the images' features"):
        EmbeddingReward(model, VOCAB)(["a"], RewardBatch(["0"], [["a"]]))
    with pytest.raises(ConfigError, match="reward.paths.embedding=PATH"):
        make_embedding(RewardContext({}))
