"""The seam between the RL loop and generation: what draws the words of a policy that is sampled without autograd
and scored in one teacher-forced pass (:class:`rlcap.models.base.ScoresSamples`: every transformers policy).

The loop never calls an engine itself. :func:`rlcap.decoding.sample` with autograd on (every RL method's rollout)
asks the policy's engine for the words (:meth:`GenerationEngine.generate`: the policy's image side, expanded n rows
an image, and a :class:`Request` in; token ids in rlcap's order, their log-probabilities under the engine and
their lengths out, as a :class:`~rlcap.decoding.result.DecodeResult`), then scores them with the policy in rlcap,
with autograd (``score_samples``): the log-probabilities the loss differentiates are always the policy's own. A
policy's engine is its ``generation_engine`` attribute; without one, :data:`OWN` (rlcap's lockstep decoding, with
the policy's key/value cache: ``rlcap.decoding.sampling.OwnEngine``).

An engine such as vLLM or SGLang would plug in here (not built: neither runs on the machines rlcap is developed
on): its ``generate`` turns the request into the engine's prompts (the policy's prompt text and picture, or its
image tokens as prompt embeddings), sampling parameters (``temperature``, ``top_k``, ``top_p``, ``max_len``, a seed
per request) and maps its token ids to rlcap's (``policy.ids``). Its weights must follow the policy's after each
optimizer step: TRL merges LoRA adapters into the weights and loads them into vLLM (``merged_state`` of
:class:`rlcap.models.hf.weights.HFWeights` gives those), verl loads the adapters alone. docs/SCALING.md says more.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from rlcap.decoding.result import DecodeResult
from rlcap.models.base import Tensors


class Request(NamedTuple):
    """What to generate: ``rows`` captions (n an image, one image's adjacent) of at most ``max_len`` words, drawn
    by ``sampler`` (a :class:`rlcap.decoding.word_distribution.Sampler`: temperature, top-k, top-p) with rlcap's
    pre-drawn numbers ``uniform`` (max_len, rows) float64 (an engine with its own random numbers may ignore them:
    its draws are then its own, as they are in any RL library that samples with vLLM); ``prefix`` (rows, P): each
    row's first words, forced (None: none); ``exit_every`` and ``compile``: rlcap's own decoding's settings."""

    rows: int
    max_len: int
    sampler: Any
    uniform: torch.Tensor
    prefix: torch.Tensor | None = None
    exit_every: int = 1
    compile: bool = False


@runtime_checkable
class GenerationEngine(Protocol):
    """Draws sampled captions of ``model`` without autograd (module docstring): ``memory`` is the policy's
    ``expand_memory(encode(feats), n)``. The result's ``tokens`` (rows, T) are rlcap's ids, PAD after the EOS;
    ``mask`` is ``tokens != PAD``; ``logprobs`` and ``entropy`` (rows, T) are the engine's, no more than a record:
    rlcap scores the words again with autograd, and reuses the drawn values only from its own decoding (whose
    distribution is the scoring pass's, to 1e-5: :func:`rlcap.decoding.scoring.score_rows`'s ``drawn``)."""

    def generate(self, model: Any, memory: Tensors, request: Request) -> DecodeResult: ...


def engine_of(model: Any, own: GenerationEngine) -> GenerationEngine:
    """The policy's engine: its ``generation_engine`` when it has one, else ``own`` (rlcap's decoding)."""
    engine = getattr(model, "generation_engine", None)
    return own if engine is None else engine
