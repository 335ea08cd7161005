"""Decoding steps as pure functions of tensors, compiled by ``torch.compile`` when asked; when to stop.

A decoder's loop calls one step per word (``model.step``, the policy, the choice, the PAD / EOS / prefix
bookkeeping). A step reads tensors only: the model's memory and state, the last words, which rows have
ended, the step's uniform numbers (drawn for the whole decode before the loop,
:func:`rlcap.decoding.word_distribution.uniforms`) and the prefix's forced words. It never reads a value on the host,
so on a GPU the CPU queues step after step without waiting. The loop itself reads whether every row has
ended once every ``exit_every`` steps (:func:`resolve_exit_every`): on the CPU such a read costs nothing
and stopping early skips the steps that would only write PAD; on a GPU each read drains the queue.

``compile=True`` wraps the step in ``torch.compile`` without graph breaks (``fullgraph``), with CUDA
graphs on CUDA (the ``reduce-overhead`` mode) and the default mode elsewhere, and with inductor's
``fallback_random``: dropout inside a compiled step draws from torch's generator in eager's order, so a
compiled decode gives the words an eager one gives from the same seed. The compiled steps are kept per
model (a weak dictionary: they go with the model) and per kind of step (greedy or sampling settings,
hidden states, prefix), each with a code object of its own: dynamo keeps its graphs per code object and
stops compiling one after ``torch._dynamo.config.recompile_limit`` graphs, which the models and kinds
of step of one process would otherwise share. A model whose step dynamo cannot compile as one graph, or
only as more graphs than that limit, decodes eagerly from then on, said in one log line. (The tiny
transformers captioners of the tests, GPT-2 and GIT decoders whose state is rebuilt into a transformers
cache every step, compile.)

With CUDA graphs, a replay overwrites the outputs of the previous one; the step's outputs are copied
as they come out (a few small tensors and the state), so the tokens, log-probabilities and states a
decoder keeps are its own. With autograd on, the compiled step has a compiled backward pass; the
weight gradients are then taken step by step (``weight_grads_once`` serves the eager step only).

The transformer's key/value cache grows one position a step. Its step is compiled with dynamic shapes,
dynamo's answer to a size that changes between calls: the lengths 0 and 1 get graphs of their own (dynamo
specialises those sizes) and one graph, the length a symbol, serves every later position; a new number of
rows adds three more, with the rows a symbol too. The alternative, a cache of ``max_len`` positions and a
mask of the positions written, keeps every shape fixed but costs every decode, eager ones included: a state
is never changed in place (rollouts and beam search keep and reorder earlier states), so writing one
position would copy the whole cache each step, and each step would attend over ``max_len`` positions.
Fixed shapes would matter most for a step with autograd, and the transformer compiles none: sampling with
gradients decodes without them, then scores the words in one pass (``scores_decoded``). With CUDA graphs,
one graph is recorded per cache length and number of rows, on first use.
"""

from __future__ import annotations

import logging
import types
import weakref
from typing import Any, Callable

import torch

from rlcap.errors import ConfigError
from rlcap.models.base import same_kind

log = logging.getLogger(__name__)

COMPILE_SETTINGS = ("auto", True, False)

_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {key: step}, or _EAGER
_EAGER = "eager"  # a model whose step dynamo could not trace


def auto_exit_every(device: torch.device | str) -> int:
    """What ``exit_every`` auto is on ``device``: 1 on the CPU, where the check is free, 0 elsewhere (on CUDA
    each check waits for the device). A run has no setting for it (auto is right on every device); a test that
    decodes on the CPU as on CUDA replaces this function (tests/train/test_host_syncs.py)."""
    return 1 if torch.device(device).type == "cpu" else 0


def resolve_exit_every(setting: int | None, device: torch.device | str) -> int:
    """Steps between two checks that every row has ended (0: never; decode ``max_len`` steps).

    ``setting``: None or -1 (auto): :func:`auto_exit_every`; else the number itself (>= 0)."""
    if setting is None or setting == -1:
        return auto_exit_every(device)
    if setting < 0:
        raise ConfigError(f"exit_every: expected -1 (auto), 0 (never) or a number of steps, got {setting}")
    return setting


def resolve_compile(setting: bool | str, device: torch.device | str) -> bool:
    """Whether decoding compiles its steps: ``auto`` compiles on CUDA only, ``True`` / ``False`` as given (a run
    has no setting for it; a caller that wants a compiled decode on the CPU passes ``True``: the decoders'
    ``compile``, :meth:`rlcap.decoding.settings.Decoding.on`). torch's own ``TORCHDYNAMO_DISABLE=1`` turns every
    compilation off.

    On the CPU the step's time is in its matrix products: UpDown at the field's size, sampling 10 or 50
    images x 5 with autograd and its backward pass took 1-5% less CPU time compiled, greedy decoding none
    (one thread, timed by hand), against compilations of 5-30 s per kind of decode."""
    if setting not in COMPILE_SETTINGS:
        raise ConfigError(f"compile: expected one of auto, true, false, got {setting!r}")
    return torch.device(device).type == "cuda" if setting == "auto" else bool(setting)


def stepper(model: torch.nn.Module, step: Callable, compile: bool, device: torch.device, **static: Any) -> Callable:
    """``step`` with the keywords ``static`` bound (hashable: they key the cache): itself, or when
    ``compile`` its compiled form, made once per model and key (see the module docstring)."""
    if not compile:
        return lambda *args: step(*args, **static)
    cache = _COMPILED.setdefault(model, {})
    if cache is _EAGER:
        return lambda *args: step(*args, **static)
    key = (step.__name__, device.type, *sorted(static.items()))
    if key not in cache:
        cache[key] = _Compiled(model, step, static, device)
    return cache[key]


def _own_code(fn: Callable) -> Callable:
    """``fn`` with a copy of its code object: dynamo's graphs for it are kept apart from ``fn``'s."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _copies(out: Any) -> Any:
    """Every tensor of a step's output (nested tuples, None) copied out of the CUDA graph's memory."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, tuple):
        return same_kind(out, [_copies(x) for x in out])
    return out


class _Compiled:
    """A compiled step that falls back to the eager one for good if dynamo cannot trace the model."""

    def __init__(self, model: torch.nn.Module, step: Callable, static: dict[str, Any], device: torch.device):
        self.model = weakref.ref(model)
        self.step, self.static = step, static
        self.cudagraphs = device.type == "cuda"
        options = {**torch._inductor.list_mode_options("reduce-overhead" if self.cudagraphs else "default"),
                   "fallback_random": True}
        self.compiled = torch.compile(_own_code(step), fullgraph=True, options=options)

    def __call__(self, *args: Any) -> Any:
        if self.compiled is not None:
            try:
                out = self.compiled(*args, **self.static)
            except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit) as exc:
                self._give_up(exc)
            else:
                return _copies(out) if self.cudagraphs else out
        return self.step(*args, **self.static)

    def _give_up(self, exc: Exception) -> None:
        model = self.model()
        name = type(model).__name__
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("decoding: torch.compile cannot compile %s's step (%s); it decodes eagerly", name, reason)
        self.compiled = None
        if model is not None:
            _COMPILED[model] = _EAGER
