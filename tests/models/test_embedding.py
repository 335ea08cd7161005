"""The embedding model ([Shi18 sec. 3.3.1]), its checkpoint loader, and the value network's word-by-word form."""

import json

import pytest
import torch
from safetensors.torch import save_file

from rlcap.data.feats import Feats
from rlcap.data.vocab import BOS, EOS, PAD, Vocab
from rlcap.errors import RlcapError
from rlcap.models import EmbeddingModel, EmbeddingModelConfig, ModelConfig, build_value_model, load_embedding_model

V, FC = 10, 6
CFG = EmbeddingModelConfig(word_dim=8, hidden_dim=8, joint_dim=5)


def feats(n=3):
    return Feats(torch.randn(n, FC), torch.randn(n, 2, FC), torch.ones(n, 2, dtype=torch.bool))


def test_embeddings_have_unit_length_and_the_joint_size():
    torch.manual_seed(0)
    model = EmbeddingModel(CFG, V, FC)
    tokens = torch.tensor([[BOS, 4, 5, EOS, PAD], [BOS, 6, EOS, PAD, PAD]])
    images, texts = model.embed_images(feats(3)), model.embed_texts(tokens)
    assert images.shape == (3, 5) and texts.shape == (2, 5)
    torch.testing.assert_close(images.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(texts.norm(dim=1), torch.ones(2))


def test_a_caption_is_its_rnn_state_after_its_last_token():
    torch.manual_seed(0)
    model = EmbeddingModel(CFG, V, FC)
    alone = model.embed_texts(torch.tensor([[BOS, 6, EOS]]))
    padded = model.embed_texts(torch.tensor([[BOS, 4, 5, 7, EOS], [BOS, 6, EOS, PAD, PAD]]))[1:]
    torch.testing.assert_close(padded, alone)
    with pytest.raises(ValueError, match="holds no token"):
        model.embed_texts(torch.tensor([[PAD, PAD]]))


def write_checkpoint(folder, model, vocab):
    folder.mkdir()
    save_file(model.state_dict(), str(folder / "embedding.safetensors"))
    (folder / "config.json").write_text(json.dumps({"embedding": {"model": vars(CFG)}, "feature_dims": {"fc": FC}}))
    vocab.save(folder / "vocab.json")
    (folder / "checkpoint.json").write_text(json.dumps({"format": 2, "parts": ["embedding"]}))


def test_load_embedding_model_round_trip(tmp_path):
    torch.manual_seed(0)
    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f"])
    model = EmbeddingModel(CFG, V, FC)
    write_checkpoint(tmp_path / "ckpt", model, vocab)
    loaded, loaded_vocab = load_embedding_model(tmp_path / "ckpt")
    assert loaded_vocab.itos == vocab.itos and not loaded.training and loaded.fc_dim == FC
    f = feats()
    torch.testing.assert_close(loaded.embed_images(f), model.embed_images(f))
    state = torch.get_rng_state()
    load_embedding_model(tmp_path / "ckpt")
    assert torch.equal(torch.get_rng_state(), state)  # loading draws nothing: runs that resume stay exact
    with pytest.raises(RlcapError, match="not a checkpoint of an embedding model"):
        load_embedding_model(tmp_path)


def test_value_network_word_by_word_equals_teacher_forcing():
    torch.manual_seed(0)
    net = build_value_model(ModelConfig(arch="fc", embed_dim=8, hidden_dim=8, dropout=0.0), V, FC).eval()
    f = feats(2)
    tokens = torch.tensor([[BOS, 4, 5, 6], [BOS, 7, EOS, PAD]])
    expected = net(f, tokens)  # (2, 4)
    state, stepped = net.start(f), []
    for t in range(tokens.size(1)):
        value, state = net.step(state, tokens[:, t])
        stepped.append(value)
    torch.testing.assert_close(torch.stack(stepped, 1), expected)


def test_value_network_head_is_a_three_layer_perceptron():
    net = build_value_model(ModelConfig(arch="fc", embed_dim=8, hidden_dim=8), V, FC)
    assert sum(isinstance(m, torch.nn.Linear) for m in net.head) == 3
