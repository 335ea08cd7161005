"""The reference policy of the KL term (``rl.kl_coef``, beta) and the term each sampling loop adds to its loss.

The reference is the run's starting policy ([Shao24]'s pi_ref, the model RL starts from). For a policy of
rlcap's own kind, or a transformers one that trains its weights, it is a frozen copy, made when the run starts
from the weights it starts with (sharing the modules the policy keeps frozen outside its weights, a transformers
policy's image side kept aside: :class:`~rlcap.models.base.KeepsFrozenAside`) and held as the part ``reference``
(no optimizer): every checkpoint saves it and a resumed run loads it back, so that it stays the first start's
weights exactly. For a policy that trains
LoRA adapters (``model.train: lora``) it is the same module with its adapters switched off
(:class:`~rlcap.models.base.TrainsAdapters`): the frozen weights under them, no second copy in memory, as TRL
takes its reference for a peft model. (A LoRA run started from a LoRA checkpoint of the same rank keeps that
checkpoint's adapters: its reference is the weights before them.)

The reference scores without dropout (eval mode), as a reference model does. With beta = 0 nothing is built and
no loop computes anything more. docs/RL.md, "The KL term".
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import torch

from rlcap.data.loader import Batch
from rlcap.errors import ConfigError
from rlcap.methods.samples import teacher_forced_logprobs
from rlcap.models.base import KeepsFrozenAside, TrainsAdapters
from rlcap.rl.kl import kl_penalty
from rlcap.train.logger import Stats
from rlcap.train.optimizer import Part
from rlcap.train.session import Session, add_part

REFERENCE = "reference"  # the part holding the frozen copy


def adapters_are_reference(policy: torch.nn.Module) -> bool:
    """Whether the policy's reference is itself with its adapters off (a LoRA policy), not a copy."""
    return isinstance(policy, TrainsAdapters) and policy.trains_adapters


def add_reference(session: Session) -> None:
    """Build the reference of a run with ``rl.kl_coef > 0``, after its policy and before :func:`resume_or_start`:
    nothing for beta = 0 or a LoRA policy; else a frozen copy of the policy as it starts (a resumed run: the
    copy its checkpoint saved). A run started ``init_from`` a checkpoint that holds a reference of its own
    takes its starting policy, not that reference."""
    policy = session.model.module
    if session.cfg.rl.kl_coef == 0 or adapters_are_reference(policy):
        return
    shared = policy.frozen_aside() if isinstance(policy, KeepsFrozenAside) else []  # (not copied: frozen in both)
    reference = copy.deepcopy(policy, memo={id(m): m for m in shared}).requires_grad_(False).eval()
    if not session.resuming:
        session.parts[REFERENCE] = Part(reference)  # the starting weights, saved with every checkpoint
        return
    if REFERENCE not in session.source.weights:
        raise ConfigError(f"rl.kl_coef={session.cfg.rl.kl_coef}: {session.out_dir / 'last'} holds no reference "
                          "policy (the run started with rl.kl_coef 0): resume it with rl.kl_coef=0, or start anew")
    add_part(session, REFERENCE, reference, None)  # the reference the run started with, as saved


@torch.no_grad()
def reference_logprobs(session: Session, batch: Batch, tokens: torch.Tensor, n: int) -> torch.Tensor:
    """log pi_ref of given captions (B*n, T), ``n`` per image of ``batch``, teacher-forced in eval mode; 0 at
    padded positions. The frozen copy's, or the policy's own with its adapters off (each in the run's precision)."""
    if REFERENCE in session.parts:
        logprobs, _ = teacher_forced_logprobs(session.module(REFERENCE), batch, tokens, n)
        return logprobs
    policy = session.model
    was_training = policy.training
    policy.eval()
    with policy.module.adapters_off():
        logprobs, _ = teacher_forced_logprobs(policy, batch, tokens, n)
    policy.train(was_training)
    return logprobs


class Scored(NamedTuple):
    """Captions a loss learns from: ``tokens`` (B*n, T), ``n`` per image of the batch, their ``logprobs`` under the
    policy (B*n, T, with gradient) and the words the loss counts, ``mask`` (B*n, T)."""

    tokens: torch.Tensor
    logprobs: torch.Tensor
    mask: torch.Tensor
    n: int


def add_kl(session: Session, loss: torch.Tensor, batch: Batch, *scored: Scored) -> tuple[torch.Tensor, Stats]:
    """``loss + beta * KL`` and ``{"kl": KL}`` to log, KL the k3 estimate averaged over the words of every
    :class:`Scored` together (:func:`rlcap.rl.kl.kl_penalty`: the words of the batch, as the REINFORCE loss
    averages, so that beta weighs a word's KL as the loss weighs its advantage); ``loss`` and ``{}`` when
    ``rl.kl_coef`` is 0."""
    beta = session.cfg.rl.kl_coef
    if beta == 0:
        return loss, {}
    ref = [reference_logprobs(session, batch, s.tokens, s.n) for s in scored]
    flat = lambda tensors: torch.cat([t.flatten() for t in tensors])[None]  # noqa: E731  (1, words of all)
    kl = kl_penalty(flat([s.logprobs for s in scored]), flat(ref), flat([s.mask for s in scored]))
    return loss + beta * kl, {"kl": kl.detach()}
