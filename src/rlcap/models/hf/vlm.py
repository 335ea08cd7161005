"""An instruction vision-language model from a local folder as an rlcap policy: Qwen2-VL and Qwen2.5-VL,
SmolVLM/Idefics3, LLaVA, PaliGemma (a decoder-only image-text-to-text model: :func:`reads_image_tokens`).

Its image side (vision tower, projector, pixel shuffle or merger) is frozen and read from the feature store that
``rlcap features --encoder hf:DIR`` writes for it (:mod:`rlcap.encoders.hf_vlm`: the image tokens its language
model reads, and the picture's size); the image side's modules are taken out of the model and kept aside for the
export. A policy that trains its image side (``model.train_vision``: :mod:`rlcap.models.hf.vision_training`) keeps
it in the model and runs it in its prefill on the pictures' processor outputs (``Feats.pixels``). Everything else
comes from what the model and its processor declare, through the calls ``generate()`` makes, never from a table of
families:

* **the prompt** (:mod:`rlcap.models.hf.prompt`): ``model.prompt`` through the processor's chat template, the
  image tokens expanded by the processor for a picture of the stored size;
* **the image tokens** go in as the model's precomputed image features (``mm_encoder_outputs``), which its own
  forward scatters where the processor put the image tokens, in the form its ``get_image_features`` returns
  them (its output class; with the ``deepstack_features`` a store of Qwen3-VL holds beside them);
* **the positions and masks**: the model's ``_prepare_position_ids_for_generation`` for the prompt (Qwen2-VL's
  multimodal rotary positions), each caption token one past the last as ``generate()`` counts them, and its
  ``prepare_inputs_for_generation`` (PaliGemma's 1-based positions; its bidirectional prefix in the prefill, the
  caption read causally after it; in one pass over prompt and caption, the caption's token types from its
  ``_update_model_kwargs_for_generation``), as ``generate()`` calls them.

The prompt and picture are read once per image (the prefill, :meth:`HFVLMCaptioner.init_state`); its cache is then
repeated for the image's samples or beams (the memory ``(image tokens, fc)``, expanded as the images once and once
per row: :meth:`~HFVLMCaptioner.expand_memory`). rlcap's BOS stands for the prompt's last token: the first step's
log-probabilities are the prefill's. The state is ``(hidden, mask, last position, *cache)``, batch first, the first
state holding the prefill's logits too. Teacher forcing and the scoring pass of sampling without autograd read the
prefill of each image, then the captions in one pass with its cache repeated (one pass per row over prompt and
caption under gradient checkpointing, whose recomputed layers read no cache). The prompt is never part of the
caption: no loss on it, never decoded, not counted in ``data.max_len`` or ``decode.max_len``.

The language model's words map to rlcap's ids as a captioner's do (:class:`rlcap.data.hf_text.TokenIds`); what
trains (``model.train``), the LoRA adapters and the weights' names in a checkpoint are
:class:`rlcap.models.hf.captioner.HFCaptioner`'s, whose methods this subclass keeps (its own are the decoding, the
store check and the export).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlcap.data.feats import Feats
from rlcap.data.hf_text import TokenizerVocab, captioner_config, tokenizer_ids
from rlcap.encoders.hf_vlm import (blank, image_features, image_parts, image_token, load_processor, pixel_layout,
                                   reads_image_tokens, settings_json, store_layout, unpack_sizes, vision_side)
from rlcap.errors import DataError, RlcapError
from rlcap.models.base import Tensors, expand_batch
from rlcap.models.hf.adapters import Adapters, choose
from rlcap.models.hf.cache import flatten_cache, last_hidden, output_cache, rebuild_cache
from rlcap.models.hf.export import generation_settings, write_weights
from rlcap.models.hf.image_side import kept_in, take_out
from rlcap.models.hf.parts import layer_stack
from rlcap.models.hf.prompt import PromptInputs, policy_prompt
from rlcap.models.hf.scoring import ScoredInOnePass
from rlcap.models.hf.vision_training import RunsImageSide, projector_of
from rlcap.models.hf.weights import HFWeights, HoldsHFWeights
from rlcap.transformers_io import import_transformers, load_weights_of, no_bars

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # model.dtype: the weights as loaded


def is_vlm_folder(folder: str | Path) -> bool:
    """Whether ``folder`` holds an instruction vision-language model (:func:`reads_image_tokens`)."""
    config, model_class = captioner_config(folder)
    return reads_image_tokens(model_class, config)


def vlm_codec(folder: str | Path) -> TokenizerVocab:
    """The model's tokenizer as rlcap's vocabulary, its special tokens read from its language model's config (a
    vision-language model's own config may carry defaults of its class that its tokenizer does not have)."""
    config, _ = captioner_config(folder)
    text = config.get_text_config()
    tokenizer, ids = tokenizer_ids(folder, text, text.vocab_size)
    return TokenizerVocab(tokenizer.backend_tokenizer.to_str(), ids, tokenizer.all_special_ids)


class HFVLMCaptioner(ScoredInOnePass, HoldsHFWeights):
    """The Captioner interface over an instruction vision-language model read from ``folder`` (module docstring)."""

    def __init__(self, folder: str | Path, vocab_size: int | None = None, att_dim: int | None = None,
                 train: str = "all", lora_rank: int = 8, lora_alpha: float = 16.0, prompt: str = "",
                 dtype: str = "float32", gradient_checkpointing: bool = False, train_vision: str = "frozen"):
        super().__init__()
        transformers = import_transformers()
        self.folder = Path(folder).expanduser().resolve()
        config, model_class = captioner_config(self.folder)
        with no_bars(transformers):  # (in the folder's dtype: the image side kept aside stays the store's, below)
            model = load_weights_of(model_class, self.folder)
            self.processor = load_processor(self.folder)
        # what the export declares (declare_dtype): the dtype that holds both the image side and the language model
        # exactly, so that from_pretrained rounds neither
        export_dtype = DTYPES[dtype] if model.config.dtype == DTYPES[dtype] else torch.float32
        # the form the forward reads image features in (rlcap.models.hf.adapters), as get_image_features returns
        # them for a blank picture (before the image side is taken out)
        with torch.no_grad():
            probe = image_features(model, self.processor, blank((32, 32)))
        _, base, names = vision_side(model)
        # the image side's weights are the store's: kept aside for the export; or, trained, kept in the model
        self.trains_vision = train_vision != "frozen"
        projector = projector_of(nn.ModuleDict({n: getattr(base, n) for n in names}), lambda: image_features(
            model, self.processor, blank((32, 32)))) if train_vision == "projector" else []
        side = kept_in(model, base, names) if self.trains_vision else take_out(model, base, names)
        # the language model in model.dtype; the image side as the folder holds it, as `rlcap features` read it, so
        # that a float32 folder's store serves a bf16 policy (its tokens go into the bf16 language model as bf16)
        model.to(DTYPES[dtype])
        self.model = model
        _, self.ids = tokenizer_ids(self.folder, config.get_text_config(), model.get_output_embeddings().out_features)
        self.ids.forbid([image_token(self.processor)[1]])  # a caption never holds an image placeholder
        self.vocab_size = self.ids.size
        self.hidden_size = int(config.get_text_config().hidden_size)
        parts = len(image_parts(probe))
        if att_dim is not None and att_dim != parts * self.hidden_size:
            raise RlcapError(f"model.path={self.folder} reads {parts * self.hidden_size}-d image tokens, but the "
                             f"feature store "
                             f"holds {att_dim}-d regions: extract them with "
                             f"`rlcap features --encoder hf:{self.folder}`")
        if vocab_size is not None and vocab_size != self.vocab_size:
            raise RlcapError(f"model.path={self.folder} writes {self.vocab_size} tokens, but the run's vocabulary has "
                             f"{vocab_size}: an hf run reads text through the model's own tokenizer")
        self._processor_files = processor_files(self.folder)  # what the export writes beside the weights
        self.prompt = policy_prompt(self.processor, prompt, self.folder)
        self.prompts = PromptInputs(self.processor, self.prompt, inspect.signature(model.forward).parameters,
                                    int(config.get_text_config().max_position_embeddings))
        self.checkpointing = gradient_checkpointing
        self.adapters = self._adapters(probe)
        self.weights = HFWeights(model, self.folder, side, train, lora_rank, lora_alpha,
                                 stacks=[layer_stack(model.get_decoder())] + ([layer_stack(side.modules)] if
                                         train_vision == "lora" else []), export_dtype=export_dtype,
                                 vision=train_vision, projector=projector)
        self.image_side = RunsImageSide(model, pixel_layout(model, self.processor), side.dtype()) \
            if self.trains_vision else None
        self.train()

    def _adapters(self, probe: Any) -> Adapters:
        """What this model declares of the behaviours families differ by (rlcap.models.hf.adapters): from the
        image features ``probe`` and the prompt for a blank picture."""
        inputs = dict(self.prompts.one((32, 32)))
        ids = inputs.pop("input_ids")
        positions = self.model._prepare_position_ids_for_generation(ids, {"input_ids": ids, **inputs})
        return choose(self.model, probe, inputs, positions)

    @property
    def per_image(self) -> bool:
        """Whether the forward reads the image features as a tensor per picture (else one batch tensor)."""
        return self.adapters.images.per_picture

    # -- the model's own calls, as generate() makes them
    def _call(self, ids: torch.Tensor, kwargs: dict[str, Any], cache: Any, first: bool, images: Any,
              keep: int, use_cache: bool = True) -> Any:
        """The model's output over ``ids`` (B, t) after ``cache``, its inputs prepared by the model's
        ``prepare_inputs_for_generation`` (``images``: the image features of a first pass; ``keep``: the last
        positions whose logits are computed)."""
        if images is not None:
            kwargs = {**kwargs, "mm_encoder_outputs": {"image": self.adapters.images.output(images)}}
        inputs = self.model.prepare_inputs_for_generation(ids, cache=cache, is_first_iteration=first,
                                                          use_cache=use_cache, output_hidden_states=True,
                                                          logits_to_keep=keep, **kwargs)
        return self.model(**inputs)

    def _prompt(self, att: torch.Tensor, fc: torch.Tensor, n: int = 1) -> tuple[torch.Tensor, dict, Any]:
        """The prompt's token ids (B*n, L), the model's other inputs for them (mask, positions, token types, image
        placement) and the image features, n rows an image."""
        sizes = unpack_sizes(fc)
        inputs = self.prompts.batch(sizes, att.device)
        if n > 1:
            inputs = {k: v.repeat_interleave(n, dim=0) for k, v in inputs.items()}
        if att.dim() == 2:  # the pictures' processor outputs (Feats.pixels, (B, L)): the image side runs here
            tokens = self.image_side.tokens(att, sizes, self.prompts.image_tokens)
        else:
            tokens = [att[i, : self.prompts.image_tokens(size)] for i, size in enumerate(sizes)]
        rows = [tokens[i] for i in range(len(sizes)) for _ in range(n)]
        images = torch.cat(rows)  # (N, parts * D): the forward scatters them (self.adapters.images)
        ids = inputs.pop("input_ids")
        inputs["position_ids"] = self.model._prepare_position_ids_for_generation(ids, {"input_ids": ids, **inputs})
        return ids, inputs, images

    @contextmanager
    def _checkpointed(self) -> Iterator[None]:
        """Gradient checkpointing (``model.gradient_checkpointing``) over the passes that compute gradients only:
        transformers turns the cache off in layers it checkpoints, and decoding with autograd reads it."""
        if not (self.checkpointing and torch.is_grad_enabled()):
            yield
            return
        self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        try:
            yield
        finally:
            self.model.activation_checkpointing_disable()

    def _prefill(self, att: torch.Tensor, fc: torch.Tensor) -> Tensors:
        """Prompt and picture read (B rows) -> the first state: (hidden of the prompt's last token (B, H), prompt
        mask (B, L), its last position (B, P), the first step's logits (B, V), *cache)."""
        ids, kwargs, images = self._prompt(att, fc)
        with self._checkpointed():
            out = self._call(ids, kwargs, self.adapters.cache.empty(), True, images, keep=1)
        last = self.adapters.positions.last(kwargs["position_ids"])  # (B, P): the prompt's last token's
        self_kv, _ = flatten_cache(output_cache(out))
        self.n_kv = len(self_kv)
        logits = self.ids.rlcap_logits(out.logits[:, -1].float())  # (B, V)
        return (last_hidden(out)[:, -1], kwargs["attention_mask"], last, logits, *self_kv)

    def _read(self, state: Tensors, ids: torch.Tensor) -> Any:
        """The model's output over ``ids`` (B, t) (hf ids) after what ``state`` holds (its cache, mask and last
        position), logits at every position."""
        _, mask, last, *kv = state[:3] + state[-self.n_kv:]
        t = ids.shape[1]
        kwargs = {"attention_mask": torch.cat([mask, mask.new_ones(mask.shape[0], t)], dim=1),
                  "position_ids": self.adapters.positions.after(last, t)}  # (P, B, t) or (B, t)
        with self._checkpointed():
            return self._call(ids, kwargs, rebuild_cache(kv, None), False, None, keep=t)

    def _first(self, att: torch.Tensor, fc: torch.Tensor, n: int) -> Tensors:
        """The first state of n rows an image: the prefill of the B images, repeated."""
        return expand_batch(self._prefill(att, fc), n) if n > 1 else self._prefill(att, fc)

    # -- the Captioner interface
    def hidden(self, state: Tensors) -> torch.Tensor:
        return state[0]

    def encode(self, feats: Feats) -> Tensors:
        """The stored image tokens (or, with the image side trained, the pictures' processor outputs) and fc (the
        picture's size): the prefill runs in :meth:`init_state`."""
        return (self._images(feats), feats.fc)

    def _images(self, feats: Feats) -> torch.Tensor:
        """What the prefill reads of the pictures: their processor outputs (``Feats.pixels``, (B, L)) where the
        loader hands them, to a policy that trains its image side (``model.train_vision``: it runs it in the
        prefill, with autograd when that is on); else their tokens (B, N, D): a store's, or those ``rlcap caption``
        computes with the checkpoint's own image side, the same weights."""
        if feats.pixels is None:
            return feats.att
        if self.image_side is None:
            raise DataError(f"{self.folder}'s image side is frozen: it reads image tokens, not the pictures' "
                            "processor outputs (model.train_vision=frozen)")
        return feats.pixels

    def expand_memory(self, memory: Tensors, n: int) -> Tensors:
        """n rows an image: the images once (read once by :meth:`init_state`) and once per row."""
        images = memory[:2]
        return images if n == 1 else (*images, *expand_batch(images, n))

    def init_state(self, memory: Tensors) -> Tensors:
        """The prefill, once per image, repeated for the image's rows (module docstring)."""
        att, fc = memory[:2]
        return self._first(att, fc, memory[-1].shape[0] // att.shape[0])

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
        """``tokens`` (B,) rlcap ids -> rlcap log-probabilities (B, V) and the state (hidden, mask, last position,
        *cache); the first step (reading BOS, the prompt's last token) returns the prefill's."""
        hidden, mask, last = state[:3]
        if len(state) == 4 + self.n_kv:  # the first state: its step was the prefill's
            return torch.log_softmax(state[3], dim=-1), (hidden, mask, last, *state[4:])
        out = self._read(state, self.ids.hf_ids(tokens)[:, None])
        self_kv, _ = flatten_cache(output_cache(out))
        logprobs = torch.log_softmax(self.ids.rlcap_logits(out.logits[:, -1].float()), dim=-1)
        grown = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # (B, W + 1)
        return logprobs, (last_hidden(out)[:, -1], grown, last + 1, *self_kv)

    def teacher(self, att: torch.Tensor, fc: torch.Tensor, tokens: torch.Tensor, n: int = 1,
                return_hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing, n captions an image: prompt and picture read once per image (B), then the captions
        ``tokens`` (B*n, T) rlcap ids from BOS in one pass with that cache -> logits (B*n, T, V) in rlcap's order,
        position t predicting token t + 1 (the prompt's own positions left out), and with ``return_hidden`` the
        hidden states (B*n, T, H)."""
        if self.checkpointing and torch.is_grad_enabled():  # (a checkpointed layer reads no cache)
            return self._one_pass(att, fc, tokens, n, return_hidden)
        first = self._first(att, fc, n)
        logits, hidden = [first[3][:, None]], [first[0][:, None]]
        if tokens.shape[1] > 1:
            out = self._read(first, self.ids.hf_ids(tokens[:, 1:]))
            logits.append(self.ids.rlcap_logits(out.logits.float()))  # (B*n, T - 1, V)
            hidden.append(last_hidden(out))
        return torch.cat(logits, 1), torch.cat(hidden, 1) if return_hidden else None

    def _one_pass(self, att: torch.Tensor, fc: torch.Tensor, tokens: torch.Tensor, n: int,
                  return_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`teacher` as one pass over prompt and caption for each row, the caption's inputs extended by the
        model's own ``_update_model_kwargs_for_generation`` (as ``generate()`` extends them word by word): what
        gradient checkpointing takes, since the layers it recomputes read no cache."""
        ids, kwargs, images = self._prompt(att, fc, n)
        t = tokens.shape[1]
        kwargs = self.adapters.types.extend(self.model, kwargs, t - 1)
        ids = torch.cat([ids, self.ids.hf_ids(tokens[:, 1:])], dim=1)
        with self._checkpointed():
            out = self._call(ids, kwargs, None, True, images, keep=t, use_cache=False)
        logits = self.ids.rlcap_logits(out.logits[:, -t:].float())
        return logits, last_hidden(out)[:, -t:] if return_hidden else None

    def forward(self, feats: Feats, tokens: torch.Tensor, seq_per_img: int = 1) -> torch.Tensor:
        """Teacher forcing: ``tokens`` (B*S, T) rlcap ids from BOS -> logits (B*S, T, V) in rlcap's order."""
        return self.teacher(self._images(feats), feats.fc, tokens, seq_per_img)[0]

    def score_samples(self, memory: Tensors, inputs: torch.Tensor,
                      return_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The scores (R, T, V) of the steps that read ``inputs`` (R, T) (BOS, then the sampled words), logits in
        rlcap's order, from one teacher-forced pass, the prompt and picture read once per image
        (:class:`rlcap.models.base.ScoresSamples`)."""
        att, fc = memory[:2]
        return self.teacher(att, fc, inputs, inputs.shape[0] // att.shape[0], return_hidden)

    def banned(self) -> list[int]:
        """The model's tokens rlcap never writes: its pad and start tokens, its image placeholder and the end tokens
        it does not end on (:meth:`TokenIds.from_config`)."""
        return sorted({self.ids.pad, self.ids.start, image_token(self.processor)[1], *self.ids.other_ends}
                      - {self.ids.end, None})

    def text_positions(self) -> int | None:
        return None  # rotary positions: no table to run out of (the prompt's length comes first)

    def check_store(self, records: Mapping[str, Any], store: str) -> None:
        """Refuse features that are not this model's image tokens: the store's ``encoder`` must be this model's
        class, its ``tower_weights`` this image side's and its ``fc_layout`` the picture sizes it places them by and
        how its rows are laid out (the image side's weights as the folder holds them, whatever ``model.dtype``), and
        its image processor settings the folder's. A policy that trains its image side reads no store."""
        if self.trains_vision:
            if store:
                raise DataError(f"model.train_vision trains the image side, so the tokens of {store} (its starting "
                                "weights') would be stale from the first step: leave data.features unset and give "
                                "data.images=DIR, whose pictures the policy encodes at every step")
            return
        self.weights.check_store(records, store, "the image tokens",
                                 also={"fc_layout": store_layout(self.adapters.images.parts, self.hidden_size)})
        pixels = settings_json(self.processor.image_processor.to_dict())
        if records.get("preprocessing", pixels) != pixels:  # (another max_pixels: other grids, other token counts)
            raise DataError(f"{store} was written with other image processor settings than those of "
                            f"model.path={self.folder} (its preprocessor_config.json): extract the features again "
                            f"with `rlcap features --encoder hf:{self.folder}`")

    def export_pretrained(self, folder: str | Path, decode: Mapping[str, Any] | None = None,
                          previous: Path | None = None) -> None:
        """The policy as a transformers folder (config, weights with the frozen image side, generation config,
        processor with its tokenizer and chat template) whose ``generate()`` with the same prompt decodes as rlcap
        does: it ends captions on rlcap's end token, never writes the pad, start and image tokens, which rlcap
        never writes, renormalises after suppressing them (as rlcap's decoding does, so that beams rank alike), and
        takes the run's ``decode`` settings (:func:`generation_settings`)."""
        transformers = import_transformers()
        settings = self.model.generation_config
        settings.suppress_tokens = self.banned()
        settings.renormalize_logits = True  # (after suppressing them, as rlcap renormalises: beams rank alike)
        settings.eos_token_id = self.ids.end
        for key, value in generation_settings(decode or {}).items():
            setattr(settings, key, value)
        side, state = self.weights.side, self.weights.merged_state()
        tower = side.modules.state_dict()
        if self.trains_vision:  # in the model: its weights (LoRA's merged) go to the tower's file only
            names = {k.replace(".base_layer.", "."): k for k in side.state() if ".lora_" not in k}
            tower = {k.removeprefix(f"{side.prefix}.".lstrip(".")): state.pop(k) for k in names}
        with no_bars(transformers):
            write_weights(self.model, state, tower, side.prefix, self.weights.digest, Path(folder), previous)
        declare_dtype(Path(folder), self.weights.export_dtype)
        for name, data in self._processor_files.items():
            (Path(folder) / name).write_bytes(data)


def declare_dtype(folder: Path, dtype: torch.dtype) -> None:
    """``folder``'s config.json declaring ``dtype``, which ``from_pretrained`` loads every weight in by default
    (save_pretrained declares the first weight's): the image side is written as the folder the run started from
    held it, the language model in ``model.dtype``, and a float32 folder tuned in bf16 declares float32, so that
    its image side loads unrounded again (its store's digest still holds) and the bf16 weights exactly."""
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["dtype"] = str(dtype).removeprefix("torch.")
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


NOT_PROCESSOR = ("config.json", "generation_config.json", "README.md")  # a model folder's files that are no processor's


def processor_files(folder: Path) -> dict[str, bytes]:
    """The processor's files of a model folder as they are (tokenizer, image and video processors, chat template),
    read once: the export writes them again unchanged (a processor whose video processor needs torchvision cannot
    be saved by ``save_pretrained`` where torchvision is not installed, and the folder may be gone by the next
    save: a checkpoint's ``hf/`` that the run started from)."""
    weights = (".safetensors", ".bin", ".pt", ".pth")
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()
            and path.name not in NOT_PROCESSOR and not path.name.endswith(weights)
            and not path.name.endswith(".index.json")}
