"""A transformers captioner sampled without autograd and scored in one pass (rlcap.models.base.ScoresSamples).

:class:`rlcap.models.hf.captioner.HFCaptioner` implements the protocol with these functions:

* **its memory, expanded** for n rows an image (:func:`image_and_rows`), keeps the image once per image beside
  its copy per row. The first step (no cache yet, every row reading BOS) then runs once per image and its
  output and cache are repeated for the image's rows (:func:`first_step_once`): a model that keeps the image
  in its self-attention cache (GIT's image prefix, 197 tokens at base size) reads it once per image instead of
  once per sample, and one with cross-attention computes the image's keys and values once. Every later step
  reads the rows' copy. The words, log-probabilities and gradients are those of the per-row computation.
* **the scoring pass** (:func:`score_samples`) is that first step, then one forward over the T - 1 words
  after BOS with the first step's cache: the keys and values the decoding steps read, computed as they
  computed them, with one graph for the whole sequence instead of one per word.
* **without dropout** (:func:`eval_mode`): both passes run with the model in eval mode, so that the scored
  log-probabilities are those of the distribution the words were drawn from. transformers draws its attention
  dropout inside the attention kernels, where no mask can be recorded and replayed (rlcap's own transformer
  replays its masks: models/transformer.py); RL libraries for language models turn dropout off in the policy
  for the same reason (TRL's PPO and RLOO trainers; its GRPO trainer's ``disable_dropout``). docs/MODELS.md
  says what this changes for ``rl.rollout_dropout``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
from torch import nn

from rlcap.models.base import Tensors, expand_batch
from rlcap.models.hf.cache import last_hidden


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode (no dropout) within the block, then in the mode it was in (re-entrant)."""
    was_training = module.training
    module.train(False)
    try:
        yield
    finally:
        module.train(was_training)


def image_and_rows(memory: Tensors, n: int) -> Tensors:
    """A captioner's memory for n rows an image: ``(image (B, N, D),)`` -> ``(image, rows (B*n, N, D))``, the image
    once and once per row (:func:`first_step_once` reads the first); n = 1 leaves it as it is."""
    image = memory[0]
    return (image,) if n == 1 else (image, image.repeat_interleave(n, dim=0, output_size=image.size(0) * n))


def first_step_once(policy: Any, memory: Tensors, tokens: torch.Tensor) -> tuple[torch.Tensor, Tensors]:
    """The first step of rows expanded n an image (``memory`` from :func:`image_and_rows`): run on the B images,
    its log-probabilities (B*n, V) and state repeated for their rows. Every row reads BOS at the first step
    (the decoding contract, models/base.py), so each image's rows would compute the same."""
    images, rows = memory
    n = rows.size(0) // images.size(0)
    logprobs, state = policy.step((images,), (), tokens[::n])  # (B, V)
    logprobs, *state = expand_batch((logprobs, *state), n)
    return logprobs, tuple(state)


def score_samples(policy: Any, memory: Tensors, inputs: torch.Tensor,
                  return_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced scores (R, T, V) of the steps that read ``inputs`` (R, T) (BOS, then the words), rlcap's
    order, and the hidden states (R, T, H) with ``return_hidden``: the first step (log-probabilities), then
    the logits of one forward over ``inputs[:, 1:]`` read with its cache (:class:`ScoresSamples`)."""
    first, state = policy.step(memory, (), inputs[:, 0])  # (R, V), once per image
    scores, hidden = [first[:, None]], [state[0][:, None]]
    if inputs.size(1) > 1:
        out = policy.read(memory[-1], state, policy.ids.hf_ids(inputs[:, 1:]))
        scores.append(policy.ids.rlcap_logits(out.logits.float()))  # (R, T - 1, V)
        hidden.append(last_hidden(out))  # (R, T - 1, H)
    return torch.cat(scores, 1), torch.cat(hidden, 1) if return_hidden else None


class ScoredInOnePass:
    """What a transformers captioner (an ``nn.Module`` with ``step`` and ``read``, its memory one image tensor)
    needs of :class:`rlcap.models.base.ScoresSamples`: sampled without autograd, scored in one pass by
    :func:`score_samples`, both without dropout, its memory expanded by :func:`image_and_rows`."""

    scores_samples = True

    def dropout_off(self) -> AbstractContextManager[None]:
        return eval_mode(self)  # type: ignore[arg-type]

    def expand_memory(self, memory: Tensors, n: int) -> Tensors:
        return image_and_rows(memory, n)

    def score_samples(self, memory: Tensors, inputs: torch.Tensor,
                      return_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        return score_samples(self, memory, inputs, return_hidden)
