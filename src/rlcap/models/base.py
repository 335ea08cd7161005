"""The interface every captioner implements.

Models return logits or log-probabilities; losses, rewards and baselines live outside them.

Decoding contract (used by :mod:`rlcap.decoding`):

* ``memory = model.encode(feats)`` encodes the images once: a tuple of tensors, batch first.
* ``memory = expand_memory(model, memory, n)`` repeats each image n times (samples or beams);
  rows of one image stay adjacent (``repeat_interleave``). By default that is
  :func:`expand_batch`; a model may define ``expand_memory(memory, n)`` to keep some tensors
  once per image (UpDown's regions, which are large), and its ``step`` then accepts both forms.
* ``state = model.init_state(memory)``: a tuple of tensors, batch first.
* ``logprobs, state = model.step(memory, state, tokens)``: ``tokens`` (B,) the previous word
  (BOS at the first step); ``logprobs`` (B, V) log-softmax over the vocabulary.
  Beam search reorders ``state`` with :func:`select_batch`; ``memory`` is never reordered
  because beams of one image share it.
* ``h = model.hidden(state)``: (B, H) the top layer's output that the logits of the ``step`` which
  returned ``state`` were computed from (before any output dropout), i.e. the summary of the image
  and the words read so far that a value network or a learned baseline reads (``return_hidden``
  in decoding). Pure: no parameters, no computation beyond picking or viewing, differentiable
  when the state is. A model whose state does not already hold that tensor (the transformer's
  key/value cache) adds it to the state tuple; every state tensor stays batch first, so
  ``select_batch`` reorders it with the rest. ShowTell: ``h``; UpDown: ``h_lang``.
* ``logits = model(feats, tokens)`` teacher forcing: ``tokens`` (B, T) starting with BOS;
  ``logits`` (B, T, V), position t predicting token t+1.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import torch

from rlcap.data.feats import Feats
from rlcap.errors import ConfigError

log = logging.getLogger(__name__)

Tensors = tuple[torch.Tensor, ...]


def expand_batch(tensors: Tensors, n: int) -> Tensors:
    """Repeat each row n times, keeping one image's rows adjacent: (B, ...) -> (B*n, ...)."""
    # output_size given: without it repeat_interleave reads the size from the device (a host synchronisation)
    return tuple(t.repeat_interleave(n, dim=0, output_size=t.size(0) * n) for t in tensors)


@runtime_checkable
class ExpandsMemory(Protocol):
    """A model that repeats its own memory for n rows per image, keeping some tensors once per image (UpDown's
    regions, the transformer's cross-attention keys and values); its ``step`` then accepts both forms."""

    def expand_memory(self, memory: Tensors, n: int) -> Tensors: ...


def expand_memory(model: object, memory: Tensors, n: int) -> Tensors:
    """The model's own ``expand_memory`` (:class:`ExpandsMemory`) if it has one, else :func:`expand_batch`."""
    return model.expand_memory(memory, n) if isinstance(model, ExpandsMemory) else expand_batch(memory, n)


def select_batch(tensors: Tensors, index: torch.Tensor) -> Tensors:
    """Pick rows by ``index`` (K,) from every tensor: (B, ...) -> (K, ...). A NamedTuple state
    (the HRL captioner's) stays one."""
    return same_kind(tensors, [t.index_select(0, index) for t in tensors])


def same_kind(template: Tensors, tensors: list[torch.Tensor]) -> Tensors:
    """``tensors`` as a state of ``template``'s kind: the same NamedTuple (the HRL captioner's
    :class:`~rlcap.models.hrl.HrlState`), else a plain tuple."""
    return type(template)(*tensors) if hasattr(template, "_fields") else tuple(tensors)


class Captioner(Protocol):
    vocab_size: int

    def encode(self, feats: Feats) -> Tensors: ...

    def init_state(self, memory: Tensors) -> Tensors: ...

    def step(self, memory: Tensors, state: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]: ...

    def hidden(self, state: Tensors) -> torch.Tensor: ...

    def __call__(self, feats: Feats, tokens: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class Shardable(Protocol):
    """A policy that FSDP2 shards (``distributed.strategy: fsdp2``, :mod:`rlcap.train.optimizer`): ``shard_units()``
    gives the module whose forward every pass goes through (the root) and the blocks under it, one FSDP unit each
    (a transformers model and its decoder layers); ``consolidated(state)``, the whole weights gathered on one
    process (its own names), for the span of an export that reads them instead of its sharded parameters."""

    def shard_units(self) -> tuple[torch.nn.Module, list[torch.nn.Module]]: ...

    def consolidated(self, state: dict[str, torch.Tensor]) -> AbstractContextManager[None]: ...


@runtime_checkable
class ReadsOwnTower(Protocol):
    """A policy that reads the stored output of its own image tower (a transformers captioner): it refuses, in
    one line naming both, a feature store whose records (``feature_dims``: ``encoder``, ``tower_weights``) are
    not its tower's."""

    def check_store(self, records: Mapping[str, Any], store: str) -> None: ...


@runtime_checkable
class LimitedPositions(Protocol):
    """A policy whose text decoder reads at most ``text_positions()`` tokens (its position table; None: no
    limit)."""

    def text_positions(self) -> int | None: ...


@runtime_checkable
class ScoresDecoded(Protocol):
    """A model that can score whole decoded sequences in one teacher-forced pass (the transformer): sampling with
    autograd decodes without it, then scores the words (:func:`rlcap.decoding.sample`) when ``scores_decoded``."""

    scores_decoded: bool


@runtime_checkable
class ScoresSamples(Protocol):
    """A policy that is sampled without autograd and scored in one teacher-forced pass, as RL libraries for large
    language models do (TRL, torchtune): with gradients enabled, :func:`rlcap.decoding.sample` decodes under
    ``torch.no_grad`` with the model's cache, then takes the log-probabilities, entropies and hidden states the
    losses read from :meth:`score_samples` over the decoded words, ``micro_batch`` rows a pass
    (:func:`rlcap.decoding.scoring.score_rows`), the words' log-probabilities and entropies gathered per pass
    (no (R, T, V) log-probabilities kept for the whole batch). Prefixes (MIXER) and ``return_hidden`` (learned
    baselines, actor-critic) take it too. A transformers captioner implements it (models/hf/captioner.py).

    * ``scores_samples``: whether sampling with autograd takes this route (False: autograd through every step,
      what a benchmark compares it with).
    * ``dropout_off()``: a context in which the policy computes without dropout; both passes run in it, so that
      the scored log-probabilities are those of the distribution the words were drawn from. Re-entrant (a pass
      recomputed in the backward pass enters it again).
    * ``score_samples(memory, inputs, return_hidden)``: ``memory`` is ``expand_memory(model, memory of the
      images, n)`` for R rows (n adjacent rows an image; n = 1 for a micro-batch that splits an image's rows),
      ``inputs`` (R, T) the word each step read (BOS, then the decoded words; PAD after a row's EOS). Returns the
      scores (R, T, V) that ``step`` computes at each position (log-probabilities or logits: the caller
      renormalises them without PAD and BOS, :func:`rlcap.decoding.word_logprobs`) and, with ``return_hidden``,
      ``model.hidden`` of each step's state (R, T, H), else None; equal to the step-by-step values up to float
      rounding (tests/models/test_hf_scoring.py).
    """

    scores_samples: bool

    def dropout_off(self) -> AbstractContextManager[None]: ...

    def score_samples(self, memory: Tensors, inputs: torch.Tensor,
                      return_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]: ...


@runtime_checkable
class MarksSegments(Protocol):
    """A hierarchical captioner (HRL's manager and worker): ``segment_start(state)`` (B,) whether the word just
    read began a new segment, where the manager sets a new goal."""

    def segment_start(self, state: Any) -> torch.Tensor: ...


@runtime_checkable
class StatesHiddenSize(Protocol):
    """A policy whose ``hidden(state)`` width is not the model section's ``hidden_dim`` (a transformers
    captioner: its text decoder's width), which it states as ``hidden_size``."""

    hidden_size: int


@runtime_checkable
class ExportsPretrained(Protocol):
    """A policy that also saves itself as a transformers folder (``hf/`` of a checkpoint) that ``from_pretrained``
    loads; ``decode``: the run's decode section, so that its ``generate()`` decodes as the run does; ``previous``:
    the folder the export replaces (what did not change is taken from there)."""

    def export_pretrained(self, folder: Any, decode: Mapping[str, Any] | None = None,
                          previous: Any = None) -> None: ...


@runtime_checkable
class TrainsAdapters(Protocol):
    """A policy that may train adapters (LoRA) over weights that stay frozen: ``trains_adapters`` says whether this
    one does, and ``adapters_off()`` is a context in which it computes without them, the frozen weights' function
    (a KL term's reference policy with no second copy: rlcap.methods.reference)."""

    trains_adapters: bool

    def adapters_off(self) -> AbstractContextManager[None]: ...


@runtime_checkable
class KeepsFrozenAside(Protocol):
    """A policy that holds frozen modules outside its weights (a transformers policy's image side, kept aside for
    its export while it reads a feature store): ``frozen_aside()`` lists them, and a copy of the policy that
    only computes (the KL term's reference: rlcap.methods.reference) shares them instead of copying them."""

    def frozen_aside(self) -> list[torch.nn.Module]: ...


def frozen_aside(module: object) -> list[torch.nn.Module]:
    """The frozen modules ``module`` keeps outside its weights (:class:`KeepsFrozenAside`); none for another."""
    return module.frozen_aside() if isinstance(module, KeepsFrozenAside) else []


def release_loaded_file(modules: torch.nn.Module) -> None:
    """Let go of the resident pages of the file ``modules``' weights were loaded from, keeping their values.

    ``from_pretrained`` leaves every weight a view of one private map of its safetensors file, and the map lives
    while any weight of it does. An image side kept aside outlives the language model's loaded weights when those
    are sharded (FSDP2 copies each rank's shard and drops them) or moved to an accelerator: it keeps the whole map,
    and every page of it that was read (all of the language model's, read to be copied) resident in the process,
    1.2 GiB a rank for a 323M-parameter language model in float32. Those pages are dropped
    (:func:`rlcap.models.file_pages.drop_clean_pages`): the side stays a view of the file, read again from it when
    used (the export). Weights in a map whose pages cannot be dropped (some written; no ``/proc/self/smaps``) are
    copied into memory of their own instead. Called where the loaded weights are let go
    (:func:`rlcap.train.optimizer.shard_parts`, :func:`settle_aside`); on the CPU without sharding the language
    model's weights stay in the map and train there."""
    from rlcap.models.file_pages import drop_clean_pages

    with torch.no_grad():
        for tensor in drop_clean_pages(modules):
            tensor.data = tensor.data.clone()


def let_go_of_aside(module: object) -> None:
    """After a reader of the frozen modules ``module`` keeps aside (the export), let their pages of the loaded file
    go again (:func:`rlcap.models.file_pages.drop_clean_pages`, those weights' pages only: the language model's, in
    use where they are still the file's, stay)."""
    from rlcap.models.file_pages import drop_clean_pages

    for kept in frozen_aside(module):
        drop_clean_pages(kept, whole_maps=False)


def share_image_side(policy: object, features: Sequence[object]) -> bool:
    """Hand ``policy`` (:class:`AdoptsImageSide`) the image side of the encoder that computes ``features`` online
    (rlcap.encoders.online: their ``image_encoder``), to keep aside for its export instead of its own copy of the
    same weights: a process then holds the image side once (the encoder's, on the run's device), not twice.
    Returns whether the policy took it (an encoder that exposes its image side, ``tower``, the same weights as the
    policy's: the store check compared their digests; not when the policy trains its image side)."""
    if not isinstance(policy, AdoptsImageSide):
        return False
    encoders = {id(e): e for e in (getattr(f, "image_encoder", None) for f in features) if e is not None}
    towers = [t for t in (getattr(e, "tower", None) for e in encoders.values()) if isinstance(t, torch.nn.Module)]
    return any(any(t is kept for kept in frozen_aside(policy)) or policy.adopt_image_side(t) for t in towers)


def settle_aside(module: object, device: torch.device, features: Sequence[object]) -> None:
    """Where a part's frozen modules kept aside stay, once the part is on ``device``: the online encoder's image side
    instead of its own copy (:func:`share_image_side`), and, on an accelerator, the loaded file's pages let go
    (:func:`release_loaded_file`: the part's loaded weights were copied to the device)."""
    if share_image_side(module, features):
        log.info("the policy keeps aside the online encoder's image side for its export: one copy, not two")
    if device.type != "cpu":
        for kept in frozen_aside(module):
            release_loaded_file(kept)


@runtime_checkable
class AdoptsImageSide(Protocol):
    """A policy that keeps its frozen image side aside (:class:`KeepsFrozenAside`) and can take, instead of its own
    copy, modules that hold the same weights: the online encoder's image side, which computes the run's image tokens
    (rlcap.encoders.online), so that a process holds that side once. ``adopt_image_side`` returns whether it took
    them (the same names, shapes, dtypes and values; nothing taken otherwise, nor when the policy trains its image
    side)."""

    def adopt_image_side(self, side: torch.nn.Module) -> bool: ...


@runtime_checkable
class DescribesItself(Protocol):
    """A checkpoint part that states how it was built, recorded as its spec in the checkpoint's manifest (a value
    network: ``{"family": "value", "settings": {"features": "att"}}``), from which inference builds it again."""

    def part_spec(self) -> dict[str, Any]: ...


def check_policy_fits(model: object, records: Mapping[str, Any], store: str, lengths: Mapping[str, int]) -> None:
    """Refuse, before any step, a policy that cannot read this run's data: a feature store another encoder wrote
    (:class:`ReadsOwnTower`), or a setting of ``lengths`` (``data.max_len``: captions read after BOS;
    ``decode.max_len``: steps, each reading the token before) beyond its position table (:class:`LimitedPositions`)."""
    if isinstance(model, ReadsOwnTower):
        model.check_store(records, store)
    positions = model.text_positions() if isinstance(model, LimitedPositions) else None
    if positions is None:
        return
    for key, value in lengths.items():
        largest = positions - 1 if key == "data.max_len" else positions  # (a caption's tokens follow its BOS)
        if value > largest:
            raise ConfigError(f"{key}={value}: the model's text decoder has {positions} positions, so {key} can be "
                              f"at most {largest}: give {key}={largest} or less")
