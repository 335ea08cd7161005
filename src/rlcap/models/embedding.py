"""A visual-semantic embedding: images and captions mapped linearly into one space.

[Shi18 sec. 3.3.1]: the image's CNN feature ``f_I`` goes through
a linear map ``l_e``; a caption is read by an RNN whose final state ``h_T(S)`` is mapped into the
same space. Trained with eq. 5's ranking loss (:func:`rlcap.rl.embedding_loss.ranking_loss`,
loop ``train/embedding.py``), it gives eq. 6's reward (``rewards/embedding.py``).

The interface any image-text model offers the embedding reward and retrieval
(:class:`ImageTextEmbedder`): ``embed_images(feats) -> (B, D)`` and ``embed_texts(tokens) -> (N, D)``,
both L2-normalised, so a dot product is a cosine.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from rlcap.data.feats import Feats
from rlcap.data.vocab import BOS, EOS, PAD, Vocab
from rlcap.errors import ConfigError, RlcapError
from rlcap.metrics import tokenize
from rlcap.host_sync import device_check
from rlcap.models.lstm import LSTM

EMBEDDING = "embedding"  # the part name of the model in a checkpoint


class ImageTextEmbedder(Protocol):
    def embed_images(self, feats: Feats) -> torch.Tensor: ...

    def embed_texts(self, tokens: torch.Tensor) -> torch.Tensor: ...


@dataclass
class EmbeddingModelConfig:
    """Sizes of the embedding model ([Shi18 sec. 4.1]: 512 for every input and hidden size)."""

    word_dim: int = field(default=512, metadata={"help": "word embedding size of the caption RNN"})
    hidden_dim: int = field(default=512, metadata={"help": "hidden size of the caption RNN (an LSTM)"})
    joint_dim: int = field(default=512, metadata={"help": "size of the joint image-caption space"})

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value < 1:
                raise ConfigError(f"embedding.model.{name}: expected a positive integer, got {value}")


class EmbeddingModel(nn.Module):
    """``embed_images(feats) (B, D)`` and ``embed_texts(tokens) (N, D)``, both L2-normalised."""

    def __init__(self, cfg: EmbeddingModelConfig, vocab_size: int, fc_dim: int):
        super().__init__()
        self.fc_dim = fc_dim
        self.image_map = nn.Linear(fc_dim, cfg.joint_dim)  # l_e of [Shi18 sec. 3.3.1]
        self.embed = nn.Embedding(vocab_size, cfg.word_dim, padding_idx=PAD)
        self.rnn = LSTM(cfg.word_dim, cfg.hidden_dim, batch_first=True)
        self.text_map = nn.Linear(cfg.hidden_dim, cfg.joint_dim)

    def embed_images(self, feats: Feats) -> torch.Tensor:
        """The pooled image vector ``feats.fc`` (B, fc_dim) -> (B, D), unit length."""
        return F.normalize(self.image_map(feats.fc).float(), dim=1)

    def embed_texts(self, tokens: torch.Tensor) -> torch.Tensor:
        """Captions ``tokens`` (N, T), word ids PAD-padded on the right (with BOS and EOS as the data
        gives them) -> (N, D), unit length: the map of the RNN's state after the last word."""
        lengths = (tokens != PAD).sum(1)  # (N,)
        message = "embed_texts: a caption row holds no token (give at least BOS and EOS)"
        device_check((lengths == 0).any(), lambda: ValueError(message), message)
        out, _ = self.rnn(self.embed(tokens))  # (N, T, H); padding comes after, so it does not reach the last state
        last = out.gather(1, (lengths - 1)[:, None, None].expand(-1, 1, out.size(2))).squeeze(1)  # (N, H)
        return F.normalize(self.text_map(last).float(), dim=1)


def encode_captions(captions: list[str], vocab: Vocab) -> torch.Tensor:
    """Raw captions -> (N, T) word ids ``BOS w1..wn EOS PAD...``, as the embedding model was trained on."""
    rows = [[BOS, *vocab.encode(tokenize(c)), EOS] for c in captions]
    tokens = torch.full((len(rows), max((len(r) for r in rows), default=2)), PAD, dtype=torch.long)  # cpu: callers move it
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)  # cpu: a row of the tokens above
    return tokens


def trainer_section(config: dict) -> dict:
    """The section of the run that trained an embedding model: ``embedding`` or ``retriever``
    (its ``algorithm``; checkpoints of retrievers trained before that method existed say ``embedding``)."""
    return config[config.get("algorithm", "embedding")]


def load_embedding_model(folder: str | Path) -> tuple[EmbeddingModel, Vocab]:
    """The embedding model of a checkpoint folder written by ``algorithm: embedding`` or ``retriever`` (format 2:
    ``embedding.safetensors``, ``config.json``, ``vocab.json``), in eval mode, and its vocabulary.

    Read here rather than through ``rlcap.train.checkpoint`` because rewards, which load it, sit
    below ``train`` (docs/ARCHITECTURE.md)."""
    folder = Path(folder)
    weights = folder / f"{EMBEDDING}.safetensors"
    if not (folder / "checkpoint.json").is_file() or not weights.is_file():
        raise RlcapError(f"{folder} is not a checkpoint of an embedding model (no checkpoint.json or "
                         f"{weights.name}); train one with algorithm=embedding")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        cfg = EmbeddingModelConfig(**trainer_section(config)["model"])
        fc_dim = int(config["feature_dims"]["fc"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RlcapError(f"cannot read the embedding model's config in {folder}: {exc}") from exc
    vocab = Vocab.load(folder / "vocab.json")
    # Its random initialisation is overwritten at once; it must not draw from the global generator,
    # or a run that builds this reward after restoring its random state would not resume exactly.
    with torch.random.fork_rng(devices=[]):
        model = EmbeddingModel(cfg, len(vocab), fc_dim)
    model.load_state_dict(load_file(str(weights)))
    return model.eval(), vocab
