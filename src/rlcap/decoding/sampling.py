"""Left-to-right decoding, one word per row and step: greedy, sampling, and continuing from a state.

All rows advance in lockstep (row r's position p at step p), which every model supports, the
transformer's key/value cache included. A prefix is forced in that same loop: at step p, a row
whose prefix has a word at p takes it instead of choosing.
"""

from __future__ import annotations

import torch

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding.policy import Chooser, banned_words, entropy, most_likely, sampler, word_logprobs
from rlcap.decoding.result import DecodeResult, check_prefix, outside_inference, zero_pads
from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats, Tensors, expand_memory
from rlcap.models.linear import weight_grads_once

CONTINUE_METHODS = ("greedy", "sample")


def _steps(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, steps: int, choose: Chooser,
           done: torch.Tensor, prefix: torch.Tensor | None = None, return_hidden: bool = False) -> DecodeResult:
    """Up to ``steps`` words for R rows from ``state``; the first step reads ``word`` (R,).

    ``done`` (R,): rows already ended (they emit PAD). ``prefix`` (R, P): forced words, PAD-padded;
    forced positions count in ``mask`` but get logprob and entropy 0. Stops once every row has ended.
    """
    with weight_grads_once(model):  # with autograd: one weight-gradient product per layer, not one per word
        return _lockstep(model, memory, state, word, steps, choose, done, prefix, return_hidden)


def _lockstep(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, steps: int, choose: Chooser,
              done: torch.Tensor, prefix: torch.Tensor | None, return_hidden: bool) -> DecodeResult:
    forced_len = 0 if prefix is None else prefix.size(1)
    ban = None
    tokens, logprobs, entropies, hiddens = [], [], [], []
    for p in range(steps):
        step_lp, state = model.step(memory, state, word)  # (R, V)
        if ban is None:
            ban = banned_words(step_lp.size(1), step_lp)
        step_lp = word_logprobs(step_lp, ban)  # (R, V) what is sampled from, and differentiated
        if return_hidden:
            hiddens.append(model.hidden(state))  # (R, H) what this step's word is chosen from
        with torch.no_grad():
            word = choose(step_lp.detach())  # (R,)
        counts = ~done  # (R,) rows whose word here is generated (not PAD, not forced)
        if p < forced_len:
            forcing = prefix[:, p] != PAD  # (R,)
            word = torch.where(forcing, prefix[:, p], word)
            counts = counts & ~forcing
        word = word.masked_fill(done, PAD)
        logprobs.append(torch.where(counts, step_lp.gather(1, word[:, None]).squeeze(1), 0.0))  # (R,)
        entropies.append(torch.where(counts, entropy(step_lp), 0.0))  # (R,)
        tokens.append(word)
        done = done | (word == EOS)
        if bool(done.all()):
            break
    tokens_t, logprobs_t = torch.stack(tokens, 1), torch.stack(logprobs, 1)  # (R, T)
    mask = tokens_t != PAD
    hidden = zero_pads(torch.stack(hiddens, 1), mask) if return_hidden else None  # (R, T, H)
    return DecodeResult(tokens_t, logprobs_t, mask, logprobs_t.sum(1), torch.stack(entropies, 1), hidden)


def continue_decoding(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, max_steps: int,
                      method: str = "sample", temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                      generator: torch.Generator | None = None, done: torch.Tensor | None = None,
                      return_hidden: bool = False) -> DecodeResult:
    """Decode up to ``max_steps`` more words for R rows from a given model state (lower level than ``sample``).

    ``memory``: the model's memory for the R rows (``expand_memory(model, model.encode(feats), n)``);
    ``state``: the model's state before reading ``word`` (R,), each row's last word so far (BOS at
    the start), which the first step reads; ``done`` (R,) bool: rows already ended (they give PAD).
    ``method``: ``greedy`` or ``sample`` (temperature, top-k, top-p and generator as in ``sample``).
    Returns the continuation only, (R, S) with S <= max_steps, positions counted from the first
    new word. Autograd follows the caller's mode, as in ``sample``.
    """
    if method not in CONTINUE_METHODS:
        raise ConfigError(f"continue_decoding: unknown method {method!r}; "
                          f"expected one of {', '.join(CONTINUE_METHODS)}")
    if max_steps < 1:
        raise ConfigError(f"continue_decoding: max_steps must be >= 1, got {max_steps}")
    choose = most_likely if method == "greedy" else sampler(temperature, top_k, top_p, generator)
    done = torch.zeros_like(word, dtype=torch.bool) if done is None else done
    return _steps(model, memory, state, word, max_steps, choose, done, return_hidden=return_hidden)


def _rollout(model: Captioner, feats: Feats, n: int, max_len: int, choose: Chooser,
             prefix: torch.Tensor | None, return_hidden: bool) -> DecodeResult:
    """Left-to-right decoding of n rows per image from BOS, forcing ``prefix`` (B*n, P) if given."""
    rows = feats.fc.size(0) * n
    prefix = check_prefix(prefix, rows, max_len, model.vocab_size)
    memory = expand_memory(model, model.encode(feats), n)
    word = torch.full((rows,), BOS, dtype=torch.long, device=feats.fc.device)  # (R,)
    done = torch.zeros(rows, dtype=torch.bool, device=word.device)  # (R,) EOS already emitted
    if getattr(model, "scores_decoded", False) and torch.is_grad_enabled() and prefix is None and not return_hidden:
        return _decode_then_score(model, memory, word, max_len, choose, done)
    return _steps(model, memory, model.init_state(memory), word, max_len, choose, done, prefix, return_hidden)


def _decode_then_score(model: Captioner, memory: Tensors, word: torch.Tensor, steps: int, choose: Chooser,
                       done: torch.Tensor) -> DecodeResult:
    """What :func:`_steps` returns with autograd, for a model that can score whole sequences
    (``scores_decoded``: the transformer): the words are decoded without autograd, their dropout
    masks recorded, then one teacher-forced pass under those masks gives the differentiable
    log-probabilities and entropies, equal to the word-by-word ones up to float rounding."""
    fixed = tuple(t.detach() for t in memory)
    with torch.no_grad(), model.record_dropout() as tape:
        out = _lockstep(model, fixed, model.init_state(fixed), word, steps, choose, done, None, False)
    inputs = torch.cat([word[:, None], out.tokens[:, :-1]], 1)  # (R, T) the word each step read
    step_lp = model.score_decoded(memory, inputs, tape)  # (R, T, V)
    lp = word_logprobs(step_lp, banned_words(step_lp.size(-1), step_lp))  # as _lockstep, per step
    logprobs = torch.where(out.mask, lp.gather(2, out.tokens[..., None]).squeeze(2), 0.0)  # (R, T)
    entropies = torch.where(out.mask, entropy(lp.flatten(0, 1)).view_as(logprobs), 0.0)  # (R, T)
    return DecodeResult(out.tokens, logprobs, out.mask, logprobs.sum(1), entropies)


def greedy(model: Captioner, feats: Feats, max_len: int, prefix: torch.Tensor | None = None,
           return_hidden: bool = False) -> DecodeResult:
    """The most likely word at each step: (B, T) rows. Runs without autograd.

    ``prefix`` (B, P): each caption's first words (PAD-padded on the right, no BOS); decoding
    continues after them and ``tokens`` holds the whole caption (see :mod:`rlcap.decoding`).
    """
    with torch.inference_mode():
        result = _rollout(model, feats, 1, max_len, most_likely, prefix, return_hidden)
    return outside_inference(result)


def sample(model: Captioner, feats: Feats, n: int, max_len: int, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, generator: torch.Generator | None = None,
           prefix: torch.Tensor | None = None, return_hidden: bool = False) -> DecodeResult:
    """n sampled captions per image, (B*n, T) rows, samples of one image adjacent.

    Autograd follows the caller's mode: with gradients enabled, ``logprobs``, ``entropy`` and
    ``hidden`` are differentiable (for policy gradients and learned baselines). Temperature, top-k
    and top-p change only how words are drawn; the returned log-probabilities are the model's own.
    ``prefix`` (B*n, P): each row's first words, forced (see :mod:`rlcap.decoding`).
    """
    return _rollout(model, feats, n, max_len, sampler(temperature, top_k, top_p, generator), prefix, return_hidden)
