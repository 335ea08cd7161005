"""Left-to-right decoding, one word per row and step: greedy, sampling, and continuing from a state.

All rows advance in lockstep (row r's position p at step p), which every model supports, the
transformer's key/value cache included. A prefix is forced in that same loop: at step p, a row
whose prefix has a word at p takes it instead of choosing. Each step is :func:`lockstep_step`, a
function of tensors that ``compile=True`` compiles; ``exit_every`` says how often the loop checks
whether every row has ended (decoding/stepping.py). ``sample`` and ``continue_decoding`` take their settings
as one :class:`rlcap.decoding.settings.Decoding`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding.engine import GenerationEngine, Request, engine_of
from rlcap.decoding.word_distribution import (Chooser, banned_words, entropy, most_likely, sampler, uniforms,
                                              word_logprobs)
from rlcap.decoding.result import DecodeResult, check_prefix, outside_inference, zero_pads
from rlcap.decoding.scoring import forced_positions, sampling_mode, score_rows
from rlcap.decoding.settings import Decoding
from rlcap.decoding.stepping import resolve_exit_every, stepper
from rlcap.distributed import ended_everywhere, whole_weights
from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats, ScoresDecoded, ScoresSamples, Tensors, expand_memory
from rlcap.models.linear import weight_grads_once

CONTINUE_METHODS = ("greedy", "sample")


class Plan(NamedTuple):
    """How a lockstep decode chooses its words and runs its steps (one per decode, read by every step)."""

    choose: Chooser                # each row's word from its log-probabilities (R, V) and numbers (R,)
    uniform: torch.Tensor | None   # (steps, R) float64: the chooser's numbers (None: it draws none)
    return_hidden: bool            # keep the hidden state each word was chosen from
    exit_every: int                # steps between two checks that every row has ended (0: never)
    compile: bool                  # each step compiled by torch.compile


def lockstep_step(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, done: torch.Tensor,
                  uniform: torch.Tensor | None, forced: torch.Tensor | None, *, choose: Chooser,
                  return_hidden: bool) -> tuple:
    """One word for each of R rows -> (word (R,), state, done (R,), logprob (R,), entropy (R,), hidden (R, H) or None).

    ``word`` (R,): what the step reads; ``done`` (R,) bool: rows already ended (they emit PAD); ``uniform`` (R,)
    float64: the step's numbers for ``choose`` (None: it draws none); ``forced`` (R,): the prefix's word at this
    position, PAD where there is none (None: no prefix). A forced word counts in the mask but gets logprob and
    entropy 0. PAD and BOS are banned (:func:`banned_words`, made on the device: the step reads nothing on the host).
    """
    step_lp, state = model.step(memory, state, word)  # (R, V)
    ban = banned_words(step_lp.size(1), step_lp.new_empty(0, dtype=torch.get_default_dtype()))  # (V,) fp32: the sum
    step_lp = word_logprobs(step_lp, ban)  # (R, V) what is sampled from, and differentiated (fp32 at least)
    hidden = model.hidden(state) if return_hidden else None  # (R, H) what this step's word is chosen from
    chosen = choose(step_lp.detach(), uniform)  # (R,)
    counts = ~done  # (R,) rows whose word here is generated (not PAD, not forced)
    if forced is not None:
        forcing = forced != PAD  # (R,)
        chosen = torch.where(forcing, forced, chosen)
        counts = counts & ~forcing
    word = chosen.masked_fill(done, PAD)
    logprob = torch.where(counts, step_lp.gather(1, word[:, None]).squeeze(1), 0.0)  # (R,)
    return word, state, done | (word == EOS), logprob, torch.where(counts, entropy(step_lp), 0.0), hidden


def _steps(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, steps: int, done: torch.Tensor,
           prefix: torch.Tensor | None, plan: Plan) -> DecodeResult:
    """Up to ``steps`` words for R rows from ``state``; the first step reads ``word`` (R,).

    ``done`` (R,): rows already ended (they emit PAD). ``prefix`` (R, P): forced words, PAD-padded;
    forced positions count in ``mask`` but get logprob and entropy 0. Every ``plan.exit_every`` steps
    (0: never), stops if every row has ended.
    """
    if plan.compile:  # (weight_grads_once keeps Python state for the backward pass, which a compiled step cannot)
        return _lockstep(model, memory, state, word, steps, done, prefix, plan)
    with weight_grads_once(model):  # with autograd: one weight-gradient product per layer, not one per word
        return _lockstep(model, memory, state, word, steps, done, prefix, plan)


def _lockstep(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, steps: int, done: torch.Tensor,
              prefix: torch.Tensor | None, plan: Plan, on_step: Callable[[], None] | None = None) -> DecodeResult:
    """:func:`_steps`'s loop; ``on_step`` is called after each step (a dropout tape's ``end_step``)."""
    step = stepper(model, lockstep_step, plan.compile, word.device, choose=plan.choose,
                   return_hidden=plan.return_hidden)
    forced = None if prefix is None else F.pad(prefix[:, :steps], (0, steps - min(steps, prefix.size(1))),
                                               value=PAD)  # (R, steps)
    uniform, exit_every = plan.uniform, plan.exit_every
    columns = []  # (word, logprob, entropy, hidden) of each step
    for p in range(steps):
        word, state, done, *kept = step(model, memory, state, word, done, None if uniform is None else uniform[p],
                                        None if forced is None else forced[:, p])
        columns.append((word, *kept))
        if on_step is not None:
            on_step()
        if exit_every and (p + 1) % exit_every == 0 and p + 1 < steps and ended_everywhere(done, model):
            break
    words, logprobs, entropies, hiddens = zip(*columns)
    tokens_t, logprobs_t = torch.stack(words, 1), torch.stack(logprobs, 1)  # (R, T)
    mask = tokens_t != PAD
    hidden = zero_pads(torch.stack(hiddens, 1), mask) if plan.return_hidden else None  # (R, T, H)
    return DecodeResult(tokens_t, logprobs_t, mask, logprobs_t.sum(1), torch.stack(entropies, 1), hidden)


def continue_decoding(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, decoding: Decoding, *,
                      generator: torch.Generator | None = None, done: torch.Tensor | None = None,
                      return_hidden: bool = False) -> DecodeResult:
    """Decode up to ``decoding.max_len`` more words for R rows from a given model state (lower level than ``sample``).

    ``memory``: the model's memory for the R rows (``expand_memory(model, model.encode(feats), n)``);
    ``state``: the model's state before reading ``word`` (R,), each row's last word so far (BOS at
    the start), which the first step reads; ``done`` (R,) bool: rows already ended (they give PAD).
    ``decoding.method``: ``greedy`` or ``sample`` (its temperature, top-k, top-p, ``exit_every`` and ``compile``,
    and ``generator``, as in ``sample``). Returns the continuation only, (R, S) with S <= ``decoding.max_len``,
    positions counted from the first new word. Autograd follows the caller's mode, as in ``sample``.
    """
    if decoding.method not in CONTINUE_METHODS:
        raise ConfigError(f"continue_decoding: unknown method {decoding.method!r}; "
                          f"expected one of {', '.join(CONTINUE_METHODS)}")
    steps, greedy_choice = decoding.max_len, decoding.method == "greedy"
    choose = most_likely if greedy_choice else sampler(decoding.temperature, decoding.top_k, decoding.top_p)
    uniform = None if greedy_choice else uniforms(steps, word.size(0), word.device, generator)  # (S, R)
    done = torch.zeros_like(word, dtype=torch.bool) if done is None else done
    plan = Plan(choose, uniform, return_hidden, decoding.exit_every, decoding.compile)
    return _steps(model, memory, state, word, steps, done, None, plan)


def _rollout(model: Captioner, feats: Feats, n: int, max_len: int, prefix: torch.Tensor | None, plan: Plan,
             micro_batch: int = 0) -> DecodeResult:
    """Left-to-right decoding of n rows per image from BOS, forcing ``prefix`` (B*n, P) if given."""
    rows, device = feats.fc.size(0) * n, feats.fc.device
    prefix = check_prefix(prefix, rows, max_len, model.vocab_size)
    encoded = model.encode(feats)
    word = torch.full((rows,), BOS, dtype=torch.long, device=device)  # (R,)
    done = torch.zeros(rows, dtype=torch.bool, device=device)  # (R,) EOS already emitted
    if isinstance(model, ScoresSamples) and model.scores_samples and torch.is_grad_enabled():
        return _sample_then_score(model, encoded, n, word, max_len, done, prefix, plan, micro_batch)
    memory = expand_memory(model, encoded, n)
    scores_decoded = isinstance(model, ScoresDecoded) and model.scores_decoded
    if scores_decoded and torch.is_grad_enabled() and prefix is None and not plan.return_hidden:
        return _decode_then_score(model, memory, word, max_len, done, plan)
    with sampling_mode(model):  # (a policy that scores its samples decodes without dropout)
        return _steps(model, memory, model.init_state(memory), word, max_len, done, prefix, plan)


def _decode_then_score(model: Captioner, memory: Tensors, word: torch.Tensor, steps: int, done: torch.Tensor,
                       plan: Plan) -> DecodeResult:
    """What :func:`_steps` returns with autograd, for a model that can score whole sequences
    (``scores_decoded``: the transformer): the words are decoded without autograd, their dropout
    masks recorded, then one teacher-forced pass under those masks gives the differentiable
    log-probabilities and entropies, equal to the word-by-word ones up to float rounding."""
    fixed = tuple(t.detach() for t in memory)
    with torch.no_grad(), model.record_dropout() as tape:
        out = _lockstep(model, fixed, model.init_state(fixed), word, steps, done, None,
                        plan._replace(return_hidden=False), tape.end_step)
    inputs = torch.cat([word[:, None], out.tokens[:, :-1]], 1)  # (R, T) the word each step read
    step_lp = model.score_decoded(memory, inputs, tape)  # (R, T, V)
    lp = word_logprobs(step_lp, banned_words(step_lp.size(-1), step_lp))  # as lockstep_step, per step
    logprobs = torch.where(out.mask, lp.gather(2, out.tokens[..., None]).squeeze(2), 0.0)  # (R, T)
    entropies = torch.where(out.mask, entropy(lp.flatten(0, 1)).view_as(logprobs), 0.0)  # (R, T)
    return DecodeResult(out.tokens, logprobs, out.mask, logprobs.sum(1), entropies)


def _sample_then_score(model: ScoresSamples, encoded: Tensors, n: int, word: torch.Tensor, steps: int,
                       done: torch.Tensor, prefix: torch.Tensor | None, plan: Plan, micro_batch: int) -> DecodeResult:
    """What :func:`_steps` returns with autograd, for a policy sampled without it and scored in one pass
    (:class:`ScoresSamples`: a transformers captioner): the words are decoded under ``torch.no_grad`` with the
    model's cache, then the teacher-forced scoring pass (:func:`rlcap.decoding.scoring.score_rows`, in
    micro-batches of ``micro_batch`` rows) gives the differentiable log-probabilities, entropies and hidden
    states; both without dropout (``dropout_off``), so that they are the distribution's the words were drawn from."""
    engine = engine_of(model, OWN)  # (rlcap/decoding/engine.py: the seam an engine such as vLLM plugs into)
    request = Request(word.size(0), steps, plan.choose, plan.uniform, prefix, plan.exit_every, plan.compile)
    with model.dropout_off():
        with torch.no_grad(), whole_weights(model):  # (FSDP2: each rank decodes its own number of steps)
            out = engine.generate(model, expand_memory(model, encoded, n), request)
        inputs = torch.cat([word[:, None], out.tokens[:, :-1]], 1)  # (R, T) the word each step read
        forced = forced_positions(prefix, out.tokens.size(1))  # (R, T) or None
        counts = out.mask if forced is None else out.mask & ~forced  # (R, T) the words chosen, not forced
        drawn = (out.logprobs, out.entropy) if engine is OWN else None  # (another engine's: a record only)
        logprobs, entropies, hidden = score_rows(model, encoded, n, inputs, out.tokens, counts, plan.return_hidden,
                                                 micro_batch, drawn=drawn)
    return DecodeResult(out.tokens, logprobs, out.mask, logprobs.sum(1), entropies, hidden)


class OwnEngine:
    """rlcap's own decoding as a :class:`~rlcap.decoding.engine.GenerationEngine`: lockstep steps over the policy's
    key/value cache, the words drawn with the request's pre-drawn numbers (compiled or not, as it says)."""

    def generate(self, model: Captioner, memory: Tensors, request: Request) -> DecodeResult:
        word = torch.full((request.rows,), BOS, dtype=torch.long, device=memory[0].device)  # (R,)
        done = torch.zeros(request.rows, dtype=torch.bool, device=word.device)  # (R,)
        plan = Plan(request.sampler, request.uniform, False, request.exit_every, request.compile)
        return _lockstep(model, memory, model.init_state(memory), word, request.max_len, done, request.prefix, plan)


OWN: GenerationEngine = OwnEngine()


def greedy(model: Captioner, feats: Feats, max_len: int, prefix: torch.Tensor | None = None,
           return_hidden: bool = False, exit_every: int | None = None, compile: bool = False) -> DecodeResult:
    """The most likely word at each step: (B, T) rows. Runs without autograd.

    ``prefix`` (B, P): each caption's first words (PAD-padded on the right, no BOS); decoding
    continues after them and ``tokens`` holds the whole caption (see :mod:`rlcap.decoding`).
    ``exit_every`` (None: as :func:`rlcap.decoding.stepping.resolve_exit_every` chooses for the device) and
    ``compile`` as a :class:`rlcap.decoding.settings.Decoding`'s.
    """
    plan = Plan(most_likely, None, return_hidden, resolve_exit_every(exit_every, feats.fc.device), compile)
    with torch.inference_mode():
        result = _rollout(model, feats, 1, max_len, prefix, plan)
    return outside_inference(result)


def sample(model: Captioner, feats: Feats, n: int, decoding: Decoding, *, generator: torch.Generator | None = None,
           prefix: torch.Tensor | None = None, return_hidden: bool = False, micro_batch: int = 0) -> DecodeResult:
    """n sampled captions per image, (B*n, T) rows, samples of one image adjacent, with ``decoding``'s sampling
    settings (``max_len``, ``temperature``, ``top_k``, ``top_p``, ``exit_every``, ``compile``; its method is not read).

    Autograd follows the caller's mode: with gradients enabled, ``logprobs``, ``entropy`` and
    ``hidden`` are differentiable (for policy gradients and learned baselines). Temperature, top-k
    and top-p change only how words are drawn; the returned log-probabilities are the model's own.
    ``prefix`` (B*n, P): each row's first words, forced (see :mod:`rlcap.decoding`). The words are
    drawn with ``max_len`` uniform numbers per row, all taken from ``generator`` (or torch's global
    generator) before the first step.

    ``exit_every``: check whether every row has ended once every this many steps and stop if so; 0:
    never check (T = max_len, the ended rows padded). ``compile``: run each step compiled by ``torch.compile``
    (the same words and, up to float rounding, log-probabilities and gradients as eager, from the same seed).

    With autograd, a policy that scores samples (:class:`rlcap.models.base.ScoresSamples`: a transformers
    captioner) is sampled without autograd and without dropout, then scored in teacher-forced passes of
    ``micro_batch`` rows each (0: one pass; ``rl.micro_batch``): the same words and, up to float rounding, the
    log-probabilities, entropies and hidden states of its steps (:func:`_sample_then_score`).
    """
    d = decoding
    draws = uniforms(d.max_len, feats.fc.size(0) * n, feats.fc.device, generator)  # (max_len, B*n)
    plan = Plan(sampler(d.temperature, d.top_k, d.top_p), draws, return_hidden, d.exit_every, d.compile)
    return _rollout(model, feats, n, d.max_len, prefix, plan, micro_batch)
