"""An encoder-decoder vision-language model from a local folder as an rlcap policy: Florence-2, whose language
model is a BART encoder-decoder prompted by a task token.

What the model declares decides what is read, as its own ``forward`` does:

* **the prompt** (``prompt``, default the processor's captioning task token ``<CAPTION>``, which Florence-2's
  processor turns into "What does the image describe?"): put through the folder's processor once, with a blank
  picture, which gives the token ids the language encoder reads, the image token (``config.image_token_id``)
  repeated where the picture's tokens go. The prompt is context: it goes into the encoder, never into the
  caption, the loss or ``data.max_len``.
* **the picture's tokens**: the store's ``att`` (B, h*w, C) are the cells of the vision tower's map, what
  ``rlcap features --encoder hf:DIR`` writes for the folder (rlcap.encoders.hf). :meth:`encode` gives them to
  the model's own ``get_image_features`` in the tower's place (:class:`StoredMap`): its frozen projector adds
  their positions and their mean and projects them to the language model's width (h*w + 1 tokens), and they go
  where the prompt's image tokens are in its embeddings (the model's ``masked_scatter``); then the language
  encoder runs. The memory is that encoder's states, once per image, which every sample's decoder attends to.
* **the caption** comes from the decoder, started as ``generate()`` starts it: ``decoder_start_token_id``,
  then the generation config's ``forced_bos_token_id`` where it forces one (BART's ``</s> <s>``); both are
  the decoder's prefix, read at the first step, never words of the caption.

The vision tower is taken out of the model and kept aside, frozen (the store holds its output; the export
writes it back); the projector stays, frozen. Sampling runs without autograd and is scored in one teacher-forced pass
(:mod:`rlcap.models.hf.scoring`); the words' ids are the tokenizer's (:class:`rlcap.data.hf_text.TokenIds`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from rlcap.data.feats import Feats
from rlcap.data.hf_text import captioner_config, tokenizer_ids
from rlcap.encoders.hf_vlm import blank, load_processor
from rlcap.errors import ConfigError, RlcapError
from rlcap.models.base import Tensors
from rlcap.models.hf.cache import flatten_cache, last_hidden, output_cache, rebuild_cache
from rlcap.models.hf.export import generation_settings
from rlcap.models.hf.scoring import ScoredInOnePass, first_step_once
from rlcap.models.hf.vlm import DTYPES, declare_dtype
from rlcap.models.hf.prompt import instruction
from rlcap.models.hf.image_side import StoredMap, swap_out
from rlcap.models.hf.parts import language_parameters, layer_stacks
from rlcap.models.hf.weights import HFWeights, HoldsHFWeights
from rlcap.transformers_io import import_transformers, load_weights_of, no_bars

log = logging.getLogger(__name__)

CAPTION_TASK = "<CAPTION>"  # Florence-2's captioning task token (its processor's task_prompts_without_inputs)


@runtime_checkable
class DeclaresTasks(Protocol):
    """A processor that turns task tokens into prompts (Florence-2's)."""

    task_prompts_without_inputs: Mapping[str, str]


def is_seq2seq_vlm(folder: str | Path) -> bool:
    """Whether ``folder`` holds an encoder-decoder whose config declares an image token: its language encoder
    reads the picture's tokens inside a text prompt (Florence-2), unlike a captioner whose decoder attends to
    the tower alone (VisionEncoderDecoder, BLIP)."""
    config, _ = captioner_config(folder)
    return bool(config.is_encoder_decoder) and "image_token_id" in config.to_dict()


def default_prompt(processor: Any, folder: Path) -> str:
    """The captioning task token the processor declares (:data:`CAPTION_TASK`), else a one-line refusal."""
    if isinstance(processor, DeclaresTasks) and CAPTION_TASK in processor.task_prompts_without_inputs:
        return CAPTION_TASK
    raise RlcapError(f"{folder}: its processor declares no {CAPTION_TASK} task: set model.prompt to the text the "
                     "model is prompted with")


def check_prompt_length(length: int, text: Any, folder: Path) -> None:
    """Refuse a prompt (with the picture's tokens) longer than the language encoder's learned positions
    (``max_position_embeddings``), which it has no embedding for, in one line."""
    if length > int(text.max_position_embeddings):
        raise ConfigError(f"model.prompt: with the picture's tokens the prompt is {length} tokens, more than the "
                          f"{text.max_position_embeddings} positions of the language encoder of {folder}: shorten it")


class Seq2SeqVLMCaptioner(ScoredInOnePass, HoldsHFWeights):
    """The Captioner interface (:mod:`rlcap.models.base`) over an encoder-decoder VLM read from ``folder``, sampled
    without autograd and scored in one pass (:class:`~rlcap.models.hf.scoring.ScoredInOnePass`)."""

    def __init__(self, folder: str | Path, vocab_size: int | None = None, att_dim: int | None = None,
                 train: str = "all", lora_rank: int = 8, lora_alpha: float = 16.0, prompt: str = "",
                 dtype: str = "float32", gradient_checkpointing: bool = False):
        """``prompt``: the task the model is prompted with (empty: :func:`default_prompt`); ``dtype``: the weights
        as loaded, float32 or bfloat16 (LoRA adapters in float32 either way); ``gradient_checkpointing``: the
        language model's layers recomputed in the backward pass."""
        super().__init__()
        if dtype not in DTYPES:
            raise ConfigError(f"model.dtype: {dtype!r} is not one of {', '.join(DTYPES)}")
        transformers = import_transformers()
        self.folder = Path(folder).expanduser().resolve()
        _, cls = captioner_config(self.folder)
        with no_bars(transformers):  # (in the folder's dtype: the tower kept aside stays the store's, below)
            self.model = load_weights_of(cls, self.folder)
            processor = load_processor(self.folder)
        export_dtype = DTYPES[dtype] if self.model.config.dtype == DTYPES[dtype] else torch.float32
        self.prompt = instruction(processor, prompt) or default_prompt(processor, self.folder)
        log.info("%s: the prompt its language encoder reads with each picture: %r", self.folder, self.prompt)
        inputs = processor(images=[blank((32, 32))], text=[self.prompt], return_tensors="pt")
        self.register_buffer("prompt_ids", inputs["input_ids"], persistent=False)  # (1, L)
        check_prompt_length(self.prompt_ids.shape[1], self.model.config.get_text_config(), self.folder)
        tower = self.model.get_encoder(modality="image")
        with torch.no_grad():  # the tower's map (1, C, h, w): what the store holds, as h*w cells of C
            self.grid = tuple(tower(inputs["pixel_values"]).last_hidden_state.shape[1:])
        side = swap_out(self.model, tower, StoredMap())
        self.model.to(DTYPES[dtype])  # the language model and projector; the tower as loaded, what the store holds
        text = self.model.config.get_text_config()
        _, self.ids = tokenizer_ids(self.folder, self.model.config, int(text.vocab_size))
        self.vocab_size = self.ids.size
        forced = self.model.generation_config.forced_bos_token_id
        self.prefix = [self.ids.start] + ([int(forced)] if forced is not None else [])  # hf ids the decoder starts on
        if att_dim is not None and att_dim != self.grid[0]:
            raise RlcapError(f"model.path={self.folder} reads {self.grid[0]}-d cells of its image tower's map, but "
                             f"the feature store holds {att_dim}-d regions: extract them with `rlcap features "
                             f"--encoder hf:{self.folder}`")
        if vocab_size is not None and vocab_size != self.vocab_size:
            raise RlcapError(f"model.path={self.folder} writes {self.vocab_size} tokens, but the run's vocabulary has "
                             f"{vocab_size}: an hf run reads text through the model's own tokenizer")
        self.weights = HFWeights(self.model, self.folder, side, train, lora_rank, lora_alpha,
                                 stacks=layer_stacks(self.model), language=language_parameters(self.model),
                                 export_dtype=export_dtype)
        if gradient_checkpointing:
            self.model.activation_checkpointing_enable()
        with torch.no_grad():  # how many tensors the decoder's self-attention cache holds (keys, values a layer)
            states = torch.zeros(1, 1, int(text.hidden_size), dtype=self.model.dtype)  # cpu: as the model is loaded
            probe = self.read(states, (), torch.tensor([self.prefix]))  # cpu: as the model is loaded
        self.n_self = len(flatten_cache(output_cache(probe))[0])
        self.train()

    def encode(self, feats: Feats) -> Tensors:
        """The language encoder's states (B, L, D) over the prompt with the picture's tokens in it: the stored
        cells of the tower's map (B, h*w, C) through the model's own ``get_image_features`` (its frozen projector,
        the tower's place holding the map) into the prompt's image tokens."""
        cells = feats.att  # (B, h*w, C)
        channels, high, wide = self.grid
        if cells.shape[1:] != (high * wide, channels):
            raise RlcapError(f"model.path={self.folder} reads {high * wide} cells of {channels} a picture, the store "
                             f"holds {cells.shape[1]} of {cells.shape[2]}: extract them with `rlcap features "
                             f"--encoder hf:{self.folder}`")
        grid = cells.transpose(1, 2).reshape(cells.shape[0], channels, high, wide).to(self.model.dtype)  # (B,C,h,w)
        image = self.model.get_image_features(pixel_values=grid).pooler_output  # (B, N, D)
        ids = self.prompt_ids.expand(cells.shape[0], -1)  # (B, L)
        embeds = self.model.get_input_embeddings()(ids)  # (B, L, D)
        mask = (ids == self.model.config.image_token_id)[..., None].expand_as(embeds)
        embeds = embeds.masked_scatter(mask, image.to(embeds.dtype))
        return (self.model.get_encoder()(inputs_embeds=embeds).last_hidden_state,)

    def read(self, states: torch.Tensor, state: Tensors, tokens: torch.Tensor, last_only: bool = False) -> Any:
        """The model's output over ``tokens`` (hf ids, (B, t)) after the text its ``state`` holds, attending to the
        encoder's ``states`` (B, L, D)."""
        from transformers.modeling_outputs import BaseModelOutput

        cache = rebuild_cache(state[1:1 + self.n_self], state[1 + self.n_self:]) if state else None
        return self.model(encoder_outputs=BaseModelOutput(last_hidden_state=states), decoder_input_ids=tokens,
                          cache=cache, use_cache=True, output_hidden_states=True, logits_to_keep=1 if last_only else 0)

    def check_store(self, records: Mapping[str, Any], store: str) -> None:
        """Refuse features of another tower than this model's (:class:`~rlcap.models.base.ReadsOwnTower`): the
        store's ``encoder`` must be this model's class and its ``tower_weights`` this tower's."""
        self.weights.check_store(records, store, "the cells of its tower's map")

    def init_state(self, memory: Tensors) -> Tensors:
        return ()  # no cache yet: the first step reads the decoder's prefix

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """``tokens`` (B,) rlcap ids -> rlcap log-probabilities (B, V) and the state (hidden, cache tensors); the
        first step reads the decoder's prefix in place of BOS."""
        if not state and len(memory) == 2:  # the first step of rows expanded n an image: once per image
            return first_step_once(self, memory, tokens)
        hf = torch.tensor([self.prefix], device=tokens.device).expand(tokens.shape[0], -1) if not state \
            else self.ids.hf_ids(tokens)[:, None]
        out = self.read(memory[-1], state, hf, last_only=True)
        self_kv, cross_kv = flatten_cache(output_cache(out))
        logprobs = torch.log_softmax(self.ids.rlcap_logits(out.logits[:, -1].float()), dim=-1)
        return logprobs, (last_hidden(out)[:, -1], *self_kv, *(cross_kv or ()))

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing: ``tokens`` (B*S, T) rlcap ids from BOS -> logits (B*S, T, V) in rlcap's order."""
        (states,) = self.encode(feats)
        states = states.repeat_interleave(seq_per_img, dim=0) if seq_per_img > 1 else states
        prefix = torch.tensor([self.prefix], device=tokens.device).expand(tokens.shape[0], -1)
        out = self.read(states, (), torch.cat([prefix, self.ids.hf_ids(tokens[:, 1:])], 1))
        return self.ids.rlcap_logits(out.logits[:, len(self.prefix) - 1:].float())

    def hidden(self, state: Tensors) -> torch.Tensor:
        return state[0]

    def text_positions(self) -> int | None:
        """The decoder's position table, less the prefix's positions beyond BOS's."""
        return int(self.model.config.get_text_config().max_position_embeddings) - (len(self.prefix) - 1)

    def export_pretrained(self, folder: str | Path, decode: Mapping[str, Any] | None = None,
                          previous: Path | None = None) -> None:
        """The policy as a transformers folder (config, weights with the frozen tower, generation config with the
        run's ``decode`` settings, processor), which ``from_pretrained`` loads and whose ``generate()`` from pixels
        and the prompt decodes as rlcap does (``previous`` is not read: the folder is written whole)."""
        transformers = import_transformers()
        state = {**self.weights.merged_state(), **self.weights.side.state()}
        with torch.device("meta"):  # (no random initialisation: no time, no memory, the global RNG untouched)
            model = type(self.model)(self.model.config)
        model.load_state_dict(state, assign=True)
        model.generation_config = copy.deepcopy(self.model.generation_config)
        model.generation_config.suppress_tokens = sorted({self.ids.pad} - {self.ids.end, None}) or None
        model.generation_config.forced_eos_token_id = None  # (BART's: the last word EOS; rlcap's stops at max_len)
        settings = generation_settings(decode or {})
        if "max_new_tokens" in settings:  # (the forced <s> is a new token to generate(), not a step to rlcap)
            settings["max_new_tokens"] += len(self.prefix) - 1
        for key, value in settings.items():
            setattr(model.generation_config, key, value)
        with no_bars(transformers):
            model.save_pretrained(folder)
            transformers.AutoProcessor.from_pretrained(self.folder, local_files_only=True).save_pretrained(folder)
        declare_dtype(Path(folder), self.weights.export_dtype)
