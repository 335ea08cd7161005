"""Image-caption retrievers behind one interface: the reward models of distinctive captioning ([Chaffin24]).

A retriever embeds raw captions, ``embed_captions(list[str]) -> (N, D)``, and images, each kind
from what it reads, into one space where a dot product is a cosine (rows L2-normalised); its
``temperature`` is the one it was trained with (its softmax's, 1 / CLIP's logit scale), the
default of the contrastive rewards' tau.

- :class:`DualEncoderRetriever`: rlcap's own dual encoder, the embedding model of [Shi18]
  (``models/embedding.py``) trained by ``algorithm: retriever`` (``rlcap retrieval train``).
  Images are read from the feature store: ``embed_feats(feats)``. The offline default.
- :class:`ClipRetriever`: CLIP through ``transformers``' ``CLIPModel`` from a local checkpoint
  folder (``from_pretrained(folder, local_files_only=True)``; never downloaded). Images are read
  from the image files through CLIP's own preprocessing: ``embed_images(list[PIL.Image])``.
  ``transformers`` is an optional dependency (``pip install rlcap[clip]``).

Rewards do not embed images while training: every image is embedded once, before training, into
an image bank (``rlcap.retrieval.bank``), as [Chaffin24 sec. 3.4] does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from rlcap.data.feats import Feats
from rlcap.data.vocab import Vocab
from rlcap.encoders.hf import HF_PREFIX, local_folder
from rlcap.errors import RlcapError
from rlcap.models.embedding import EmbeddingModel, encode_captions, load_embedding_model, trainer_section

CAPTION_BATCH = 256  # captions embedded per forward pass


class Retriever(Protocol):
    temperature: float

    def embed_captions(self, captions: list[str]) -> torch.Tensor: ...


class DualEncoderRetriever:
    """rlcap's dual encoder: captions through its LSTM and vocabulary, images from their features."""

    kind = "dual_encoder"

    def __init__(self, model: EmbeddingModel, vocab: Vocab, temperature: float, device: str = "cpu"):
        self.model, self.vocab, self.temperature, self.device = model.eval().to(device), vocab, temperature, device

    @torch.no_grad()
    def embed_captions(self, captions: list[str]) -> torch.Tensor:
        """Raw captions -> (N, D) unit rows (tokenized as the training data, unknown words UNK)."""
        out = [self.model.embed_texts(encode_captions(captions[i:i + CAPTION_BATCH], self.vocab).to(self.device))
               for i in range(0, len(captions), CAPTION_BATCH)]
        return torch.cat(out).cpu() if out else torch.zeros(0, self.model.text_map.out_features)  # cpu: as the rows

    @torch.no_grad()
    def embed_feats(self, feats: Feats) -> torch.Tensor:
        """Images' features (their pooled ``fc``) -> (B, D) unit rows."""
        return self.model.embed_images(feats.to(self.device)).cpu()


class ClipRetriever:
    """CLIP from a local folder holding ``config.json``, the weights, the tokenizer and the
    image processor's files (what ``save_pretrained`` writes)."""

    kind = "clip"

    def __init__(self, folder: str | Path, device: str = "cpu"):
        try:
            from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel
        except ImportError as exc:
            raise RlcapError("a CLIP retriever needs transformers: pip install 'rlcap[clip]'") from exc
        folder = Path(folder)
        try:
            self.model = CLIPModel.from_pretrained(folder, local_files_only=True).eval().to(device)
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            self.processor = AutoImageProcessor.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise RlcapError(f"cannot load a CLIP checkpoint from {folder}: {exc}") from exc
        self.device = device
        self.temperature = float(1.0 / self.model.logit_scale.detach().exp())
        self.max_length = int(self.model.config.text_config.max_position_embeddings)

    @torch.no_grad()
    def embed_captions(self, captions: list[str]) -> torch.Tensor:
        out = []
        for i in range(0, len(captions), CAPTION_BATCH):
            enc = self.tokenizer(captions[i:i + CAPTION_BATCH], padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            out.append(_features(self.model.get_text_features(**enc)))
        return F.normalize(torch.cat(out), dim=-1).cpu()

    @torch.no_grad()
    def embed_images(self, images: list[Any]) -> torch.Tensor:
        """PIL images -> (B, D) unit rows, through CLIP's own resizing, cropping and normalisation."""
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"].to(self.device)
        return F.normalize(_features(self.model.get_image_features(pixel_values=pixels)), dim=-1).cpu()


def _features(out: Any) -> torch.Tensor:
    """``get_*_features``' projected embeddings: a tensor (transformers 4) or ``pooler_output`` (5)."""
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def is_clip_folder(folder: Path) -> bool:
    config = folder / "config.json"
    if not config.is_file() or (folder / "checkpoint.json").is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "clip"
    except (OSError, ValueError):
        return False


def load_retriever(folder: str | Path, device: str = "cpu") -> DualEncoderRetriever | ClipRetriever:
    """A dual-encoder checkpoint (``rlcap retrieval train``) or a local CLIP folder, by what it holds. A CLIP
    folder may be named ``hf:DIR``, as ``rlcap features --encoder hf:DIR`` names it for the captioner's features."""
    named_hf = str(folder).startswith(HF_PREFIX)
    folder = local_folder(folder)
    if named_hf and not is_clip_folder(folder):
        raise RlcapError(f"{HF_PREFIX}{folder}: the retrieval reward reads a CLIP (config.json with model_type 'clip') "
                         "from a transformers folder; this one holds none")
    if is_clip_folder(folder):
        return ClipRetriever(folder, device)
    model, vocab = load_embedding_model(folder)
    return DualEncoderRetriever(model, vocab, _trained_temperature(folder), device)


def _trained_temperature(folder: Path) -> float:
    """The InfoNCE temperature the dual encoder was trained with (0.07 for one trained by eq. 5's hinge)."""
    try:
        section = trainer_section(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError) as exc:
        raise RlcapError(f"cannot read the retriever's config in {folder}: {exc}") from exc
    return float(section.get("temperature", 0.07)) if section.get("loss") == "infonce" else 0.07
