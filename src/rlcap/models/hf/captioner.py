"""A transformers captioner from a local folder as an rlcap policy: VisionEncoderDecoder, BLIP, GIT.

The model is loaded from a folder as ``save_pretrained`` wrote it (nothing downloaded). Its vision tower is
frozen and read from the feature store: ``rlcap features --encoder hf:DIR`` stores, for a captioner, every
token of its tower's output, which is exactly what its text decoder reads. The tower module is replaced by
:class:`StoredTower`, which hands those stored tokens on where the model expected its tower's output, so the
model's own forward runs unchanged on features instead of pixels (the stored tokens go in as a
``(B, 1, T, D)`` "pixel_values", the shape every model accepts). What is read depends on what the model
declares and returns, not on its family:

* **the decoding call**: the model's own forward when it returns a key/value cache (VisionEncoderDecoder,
  GIT); else its decoder (``get_decoder()``) with the stored tokens as ``encoder_hidden_states`` (BLIP, whose
  forward keeps no cache). A model that keeps the image in its self-attention cache (GIT's image prefix) is
  given the image at the first step only; one with cross-attention at every step (its cache holds the
  cross-attention keys after the first).
* **the state** of rlcap's decoding: the cache's key and value tensors (batch first, so beam search reorders
  them as any state) and the decoder's last hidden state, rebuilt into the model's cache at each step.
* **sampling with autograd**: without it, then scored in one teacher-forced pass, without dropout
  (:class:`rlcap.models.base.ScoresSamples`, models/hf/scoring.py); the first step runs once per image and its
  cache serves the image's n rows (:meth:`HFCaptioner.expand_memory`).
* **the words**: rlcap's ids keep PAD, BOS, EOS and UNK at 0-3 (:mod:`rlcap.data.vocab`) and give the
  tokenizer's other ids the places after them (:class:`TokenIds`); logits are gathered into that order, so
  every decoder, loss and reward runs unchanged.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcap.data.feats import Feats
from rlcap.data.hf_text import captioner_config, tokenizer_ids
from rlcap.data.vocab import PAD
from rlcap.encoders.hf import vision_forward
from rlcap.errors import RlcapError
from rlcap.models.base import Tensors
from rlcap.models.hf.cache import flatten_cache, last_hidden, output_cache, rebuild_cache
from rlcap.models.hf.export import generation_settings, write_weights
from rlcap.models.hf.image_side import StoredTower, swap_out
from rlcap.models.hf.parts import layer_stack
from rlcap.models.hf.scoring import ScoredInOnePass, first_step_once
from rlcap.models.hf.weights import HFWeights, HoldsHFWeights
from rlcap.transformers_io import import_transformers, load_weights_of, no_bars

log = logging.getLogger(__name__)


def is_transformers_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder ``save_pretrained`` wrote (a config.json naming its architecture), not an rlcap
    checkpoint (whose config.json is a run's)."""
    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("architectures"))


class HFCaptioner(ScoredInOnePass, HoldsHFWeights):
    """The Captioner interface (:mod:`rlcap.models.base`) over a transformers captioner read from ``folder``."""

    def __init__(self, folder: str | Path, vocab_size: int | None = None, att_dim: int | None = None,
                 train: str = "all", lora_rank: int = 8, lora_alpha: float = 16.0):
        """``vocab_size``, ``att_dim``: the run's text vocabulary and stored tokens, checked against the model's;
        ``train``: what trains (``model.train``: :mod:`rlcap.models.hf.weights`, the decoder's layer stack its
        ``decoder`` and LoRA's)."""
        super().__init__()
        transformers = import_transformers()
        self.folder = Path(folder).expanduser().resolve()
        _, cls = captioner_config(self.folder)  # (a missing folder, or no captioner: one line)
        with no_bars(transformers):
            model = load_weights_of(cls, self.folder)
        # the tower's weights are the feature store's, not the policy's: kept aside (not a submodule) for the export
        tower, config = vision_forward(model)
        side = swap_out(model, tower, StoredTower(getattr(tower, "config", config)))
        self._text_and_pixels: tuple[Any, Any] | None = None  # tokenizer and image processor (export_pretrained)
        self.model = model
        self.text_input = "decoder_input_ids" if model.config.is_encoder_decoder else "input_ids"
        head = model.get_output_embeddings()
        _, self.ids = tokenizer_ids(self.folder, model.config, head.out_features if head is not None
                                    else model.config.get_text_config().vocab_size)
        self.vocab_size = self.ids.size
        width = self._tower_width()
        if att_dim is not None and att_dim != width:
            raise RlcapError(f"model.path={self.folder} reads {width}-d tokens of its image tower, but the feature store "
                             f"holds {att_dim}-d regions: extract them with `rlcap features --encoder hf:{self.folder}`")
        if vocab_size is not None and vocab_size != self.vocab_size:
            raise RlcapError(f"model.path={self.folder} writes {self.vocab_size} tokens, but the run's vocabulary has "
                             f"{vocab_size}: an hf run reads text through the model's own tokenizer")
        self._probe()
        self.weights = HFWeights(model, self.folder, side, train, lora_rank, lora_alpha,
                                 stacks=[layer_stack(self.decoder)])
        self.train()  # (from_pretrained leaves the model in eval mode: its dropout follows this module's mode)

    def _probe(self) -> None:
        """How the model decodes (module docstring): through its own forward when that returns a cache, else its
        decoder; whether the image is in its self-attention cache; how many tensors each cache holds."""
        device = next(self.model.parameters()).device
        dummy = torch.zeros(1, 1, 2, self._tower_width(), device=device)
        start = torch.tensor([[self.ids.start]], device=device)
        with torch.no_grad():
            out = self.model(pixel_values=dummy, use_cache=True, output_hidden_states=True, **{self.text_input: start})
            self.through_model = output_cache(out) is not None
            if not self.through_model:
                params = inspect.signature(self.decoder.forward).parameters
                if "encoder_hidden_states" not in params:
                    raise RlcapError(f"{self.folder}: its forward keeps no key/value cache and its decoder reads no "
                                     "encoder_hidden_states: rlcap cannot decode it step by step")
                out = self.decoder(input_ids=start, encoder_hidden_states=dummy[:, 0], use_cache=True,
                                   output_hidden_states=True)
        self.hidden_size = last_hidden(out).shape[-1]  # what hidden(state) gives: a learned baseline's input width
        self_kv, cross_kv = flatten_cache(output_cache(out))
        self.n_self, self.n_cross = len(self_kv), None if cross_kv is None else len(cross_kv)
        self.image_in_cache = self_kv[0].shape[2] > 1  # more than the one text token cached: an image prefix
        call = self.model.forward if self.through_model else self.decoder.forward
        params = inspect.signature(call).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"  # (transformers renames it in 5.x)
        self.positions = "position_ids" in params
        # a decoding step needs the last position's logits only; without this a model with an image prefix (GIT)
        # computes its output layer over every image token at the first step (as generate() avoids too)
        self.keeps_logits = "logits_to_keep" in params

    def export_pretrained(self, folder: str | Path, decode: Mapping[str, Any] | None = None,
                          previous: Path | None = None) -> None:
        """The policy as a transformers folder (config, weights with the frozen tower, generation config, tokenizer
        and image processor), which ``from_pretrained`` loads and whose ``generate()`` from pixels decodes as rlcap
        does: its generation config suppresses the pad and start tokens and the end tokens rlcap does not end on
        (``TokenIds.other_ends``), which rlcap never writes, and carries the
        run's ``decode`` settings (:func:`generation_settings`). ``previous``: the folder this export replaces,
        whose tower file is linked when it is this tower's (:mod:`rlcap.models.hf.export`)."""
        transformers = import_transformers()
        suppress = sorted({self.ids.pad, self.ids.start, *self.ids.other_ends} - {self.ids.end, None})
        self.model.generation_config.suppress_tokens = suppress or None
        for key, value in generation_settings(decode or {}).items():
            setattr(self.model.generation_config, key, value)
        side = self.weights.side
        with no_bars(transformers):  # (the stored tower in its place has no weights: the state leaves it out)
            write_weights(self.model, self.weights.merged_state(), side.modules.state_dict(), side.prefix,
                          self.weights.digest, Path(folder), previous)
        with no_bars(transformers):
            if self._text_and_pixels is None:  # read from the model's folder once, not at every save
                self._text_and_pixels = tuple(auto.from_pretrained(self.folder, local_files_only=True) for auto in
                                              (transformers.AutoTokenizer, transformers.AutoImageProcessor))
            for part in self._text_and_pixels:
                part.save_pretrained(folder)

    def check_store(self, records: Mapping[str, Any], store: str) -> None:
        """Refuse features written by another encoder than this model's own tower (:class:`ReadsOwnTower`): the
        store's ``encoder`` must be this model's class and its ``tower_weights`` this tower's (``rlcap features
        --encoder hf:DIR`` records both for a captioner). A store that records neither passes, with a warning."""
        self.weights.check_store(records, store, "the tokens of its tower", unrecorded_passes=True)

    def text_positions(self) -> int | None:
        """How many text tokens the decoder reads at most (its position table: :class:`LimitedPositions`); None
        for a decoder without one."""
        text = self.model.config.get_text_config()
        positions = getattr(text, "max_position_embeddings", None)  # (GPT-2's n_positions under this name too)
        return int(positions) if positions else None

    @property
    def decoder(self) -> nn.Module:
        return self.model.get_decoder()  # (not a submodule of its own: its weights are the model's)

    def _tower_width(self) -> int:
        config = self.model.config
        vision = getattr(config, "vision_config", None) or getattr(config, "encoder", None) or config
        return int(vision.hidden_size)

    def encode(self, feats: Feats) -> Tensors:
        """The stored tower tokens (B, T, D), what the text decoder reads."""
        return (feats.att,)

    def init_state(self, memory: Tensors) -> Tensors:
        return ()  # no cache yet: the first step reads the image

    def hidden(self, state: Tensors) -> torch.Tensor:
        return state[0]

    def _run(self, tokens: torch.Tensor, image: torch.Tensor, cache: Any, done: int,
             attention: torch.Tensor | None = None, last_only: bool = False) -> Any:
        """One forward over ``tokens`` (hf ids, (B, T)), the ``done`` text tokens before them in ``cache``: the
        model's or its decoder's output (``last_only``: the last position's logits only). Text positions count
        text tokens only (an image prefix has none)."""
        kwargs: dict[str, Any] = {self.cache_arg: cache, "use_cache": True, "output_hidden_states": True,
                                  "attention_mask": attention}
        if last_only and self.keeps_logits:
            kwargs["logits_to_keep"] = 1
        if self.positions:
            kwargs["position_ids"] = torch.arange(done, done + tokens.shape[1], device=tokens.device).expand_as(tokens)
        if not self.through_model:
            return self.decoder(input_ids=tokens, encoder_hidden_states=image, **kwargs)
        if done == 0 or not self.image_in_cache:
            kwargs["pixel_values"] = image[:, None]
        return self.model(**{self.text_input: tokens}, **kwargs)

    def read(self, image: torch.Tensor, state: Tensors, tokens: torch.Tensor, last_only: bool = False) -> Any:
        """The model's output over ``tokens`` (hf ids, (B, t)) read after the text its ``state`` holds."""
        cache = rebuild_cache(state[1:1 + self.n_self], state[1 + self.n_self:] if self.n_cross else None) \
            if state else None
        prefix = image.shape[1] if self.image_in_cache else 0
        done = state[1].shape[2] - prefix if state else 0  # text tokens read so far
        return self._run(tokens, image, cache, done, last_only=last_only)

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """``tokens`` (B,) rlcap ids -> rlcap log-probabilities (B, V) and the state (hidden, cache tensors)."""
        if not state and len(memory) == 2:  # the first step of rows expanded n an image: once per image
            return first_step_once(self, memory, tokens)
        out = self.read(memory[-1], state, self.ids.hf_ids(tokens)[:, None], last_only=True)
        self_kv, cross_kv = flatten_cache(output_cache(out))
        hidden = last_hidden(out)[:, -1]  # (B, H)
        logprobs = torch.log_softmax(self.ids.rlcap_logits(out.logits[:, -1].float()), dim=-1)
        return logprobs, (hidden, *self_kv, *(cross_kv or ()))

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing: ``tokens`` (B*S, T) rlcap ids from BOS -> logits (B*S, T, V) in rlcap's order."""
        image = feats.att.repeat_interleave(seq_per_img, dim=0) if seq_per_img > 1 else feats.att
        out = self._run(self.ids.hf_ids(tokens), image, None, 0, attention=(tokens != PAD).long())
        logits = out.logits[:, -tokens.shape[1]:]  # (a prefix model returns the image positions' too)
        return self.ids.rlcap_logits(logits.float())
