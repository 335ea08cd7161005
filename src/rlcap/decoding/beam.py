"""Beam search batched over images and beams, optionally from each image's prefix.

Each step is :func:`beam_step`, a function of tensors that ``compile=True`` compiles; ``exit_every``
says how often the loop checks whether every beam has ended (decoding/stepping.py). The search's settings come
as one :class:`rlcap.decoding.settings.Decoding`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding.word_distribution import banned_words, entropy, word_logprobs
from rlcap.decoding.result import DecodeResult, check_prefix, outside_inference, zero_pads
from rlcap.decoding.settings import Decoding
from rlcap.decoding.stepping import stepper
from rlcap.distributed import ended_everywhere
from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats, Tensors, expand_memory, select_batch


def beam_search(model: Captioner, feats: Feats, decoding: Decoding, *, n_best: int = 1,
                prefix: torch.Tensor | None = None, return_hidden: bool = False) -> DecodeResult:
    """Beam search batched over images and beams: (B*n_best, T) rows, best first per image, with ``decoding``'s
    ``beam_size``, ``max_len``, ``length_penalty``, ``no_repeat_ngram``, ``exit_every`` and ``compile`` (its method
    is not read: a beam of size 1 searches too).

    One ``model.step`` per time step over all B*beam_size rows. Beams are ranked by their summed
    log-probability; a beam that has emitted EOS stays in the beam with its score fixed (it
    continues with PAD at no cost) until every beam has ended or ``max_len`` is reached. The final
    ranking divides by ``length ** length_penalty`` (EOS counted; 0 disables it).

    ``prefix`` (B, P): every beam of image b starts with ``prefix[b]`` (PAD-padded, no BOS). Forced
    words cost nothing: scores rank the continuations given the prefix; ``length`` counts the prefix.
    An image with fewer than ``n_best`` possible captions (its prefix ends with EOS or fills
    ``max_len``) repeats its best one.

    ``no_repeat_ngram`` n > 0: a beam never writes an n-gram it already holds (the continuation that
    would repeat one is out of the search; the words' log-probabilities stay the model's), as
    ``no_repeat_ngram_size`` in Hugging Face's ``generate``. Forced prefix words are exempt.

    ``exit_every`` and ``compile`` as in :func:`rlcap.decoding.sample`: with ``exit_every=0`` every
    search runs ``max_len`` steps, the ended beams padded.
    """
    if not 1 <= n_best <= decoding.beam_size:
        raise ConfigError(f"beam_search: n_best must be in [1, beam_size={decoding.beam_size}], got {n_best}")
    if decoding.no_repeat_ngram < 0:
        raise ConfigError(f"beam_search: no_repeat_ngram must be >= 0, got {decoding.no_repeat_ngram}")
    with torch.inference_mode():
        prefix = check_prefix(prefix, feats.fc.size(0), decoding.max_len, model.vocab_size)
        result = _beam_search(model, feats, decoding, n_best, prefix, return_hidden)
    return outside_inference(result)


def _force(cand: torch.Tensor, words: torch.Tensor, rows: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Candidates (R, V) where each of ``rows`` (R,) bool can only continue with its ``words`` (R,), at no cost."""
    only = torch.full_like(cand, float("-inf")).scatter_(1, words[:, None], scores[:, None].to(cand.dtype))
    return torch.where(rows[:, None], only, cand)


def repeated_ngrams(tokens: torch.Tensor, n: int, vocab_size: int) -> torch.Tensor:
    """(R, V) bool: the words that would make each row of ``tokens`` (R, T) end with an n-gram it
    already holds (its last n - 1 words followed by the word, seen before). All False while T < n."""
    r, t = tokens.shape
    if t < n:
        return torch.zeros(r, vocab_size, dtype=torch.bool, device=tokens.device)
    windows = tokens.unfold(1, n, 1)  # (R, W, n) every n-gram held
    seen = (windows[:, :, :n - 1] == tokens[:, t - n + 1:][:, None, :]).all(-1)  # (R, W) its n-1 words are the tail
    hits = torch.zeros(r, vocab_size, device=tokens.device).scatter_add_(1, windows[:, :, -1], seen.float())
    return hits > 0


class BeamKind(NamedTuple):
    """What one beam step's graph is made for besides its tensors (hashable: it keys the compiled steps)."""

    beams: int           # beams per image coming in (1 at the first step, then up to k)
    k: int               # beams per image kept
    return_hidden: bool  # also the hidden state each new beam's word was chosen from


def beam_step(model: Captioner, memory: Tensors, state: Tensors, word: torch.Tensor, scores: torch.Tensor,
              done: torch.Tensor, forced: torch.Tensor | None, repeats: torch.Tensor | None, *,
              kind: BeamKind) -> tuple:
    """One step of every beam: R = I * kind.beams rows in, R' = I * min(k, beams * V) out.

    ``scores`` (R,) summed logprobs; ``done`` (R,) bool: EOS already emitted; ``forced`` (R,): each beam's prefix
    word here, PAD where none (None: the search has no prefix; with one, a beam without a caption, score -inf,
    counts as ended); ``repeats`` (R, V) bool: words that would repeat an n-gram (None: allowed). Returns (word,
    logprob, entropy (R',), hidden (R', H) or None, src (R',) the beam each new one extends, scores (R',),
    done (R',), state).
    """
    beams, k = kind.beams, kind.k
    step_lp, state = model.step(memory, state, word)  # (R, V)
    v = step_lp.size(1)
    step_lp = word_logprobs(step_lp, banned_words(v, scores))  # (R, V) -inf at PAD and BOS, never generated
    cand = (step_lp + scores[:, None]).masked_fill(done[:, None], float("-inf"))  # (R, V) every continuation's
    if repeats is not None:  # score; an ended beam's only continuation is PAD, at no cost
        cand = cand.masked_fill(repeats, float("-inf"))
    cand[:, PAD] = torch.where(done, scores, float("-inf"))  # (cand is this step's own tensor)
    silent = done  # (R,) rows whose next word has no logprob: ended, or forced
    if forced is not None:
        silent = done | (forced != PAD)
        cand = _force(cand, forced, silent & ~done, scores)
    images = cand.size(0) // beams
    top, idx = cand.view(images, beams * v).topk(min(k, beams * v), dim=1)  # (I, k') over all beams' words
    src = (idx // v + torch.arange(images, device=idx.device)[:, None] * beams).view(-1)  # (R',) row each extends
    word = (idx % v).view(-1)  # (R',)
    was_silent = silent.index_select(0, src)
    word_lp = step_lp.view(images, beams * v).gather(1, idx).view(-1).masked_fill(was_silent, 0.0)  # (R',)
    word_ent = entropy(step_lp).index_select(0, src).masked_fill(was_silent, 0.0)  # (R',)
    hidden = model.hidden(state).index_select(0, src) if kind.return_hidden else None  # (R', H) chosen from
    scores = top.view(-1)
    done = done.index_select(0, src) | (word == EOS)
    if forced is not None:  # a beam without a caption (score -inf, see beam_search) must not delay the end
        done = done | (scores == float("-inf"))
    return word, word_lp, word_ent, hidden, src, scores, done, select_batch(state, src)


def _beam_search(model: Captioner, feats: Feats, decoding: Decoding, n_best: int, prefix: torch.Tensor | None,
                 return_hidden: bool) -> DecodeResult:
    """Beams per image grow 1 -> k over the first steps (all beams start identical, so the first
    step runs once per image); row r of the state belongs to image r // beams. While an image is in
    its prefix, only its first beam has a finite score; the others are dropped once it is free."""
    b, device, v = feats.fc.size(0), feats.fc.device, model.vocab_size
    k, max_len = decoding.beam_size, decoding.max_len
    no_repeat_ngram, exit_every = decoding.no_repeat_ngram, decoding.exit_every
    encoded = model.encode(feats)
    memory, state = encoded, model.init_state(encoded)
    beams = 1
    forced_cols = None if prefix is None else F.pad(prefix[:, :max_len], (0, max_len - min(max_len, prefix.size(1))),
                                                    value=PAD)  # (B, max_len)
    word = torch.full((b,), BOS, dtype=torch.long, device=device)  # (R,) R = B * beams
    scores = torch.zeros(b, device=device)  # (R,) summed logprobs
    done = torch.zeros(b, dtype=torch.bool, device=device)  # (R,) EOS already emitted
    hist: tuple[torch.Tensor, ...] = (torch.zeros(b, 0, dtype=torch.long, device=device),  # tokens, logprobs,
                                      torch.zeros(b, 0, device=device), torch.zeros(b, 0, device=device))  # entropy
    for p in range(max_len):
        step = stepper(model, beam_step, decoding.compile, device, kind=BeamKind(beams, k, return_hidden))
        forced = None if forced_cols is None else forced_cols[:, p].repeat_interleave(beams, output_size=b * beams)
        repeats = repeated_ngrams(hist[0], no_repeat_ngram, v) if no_repeat_ngram else None  # (R, V)
        word, word_lp, word_ent, hidden, src, scores, done, state = step(model, memory, state, word, scores, done,
                                                                         forced, repeats)
        new = (word, word_lp, word_ent) + ((hidden,) if return_hidden else ())
        if return_hidden and p == 0:  # the state this step's words were chosen from
            hist += (hidden.new_zeros(b, 0, hidden.size(1)),)
        hist = tuple(torch.cat([h.index_select(0, src), x[:, None]], 1) for h, x in zip(hist, new))  # (R', t+1)
        if min(k, beams * v) != beams:  # memory is never reordered: beams of an image share it
            beams = min(k, beams * v)
            memory = expand_memory(model, encoded, beams)
        if exit_every and (p + 1) % exit_every == 0 and p + 1 < max_len and ended_everywhere(done, model):
            break
    return _best(hist, scores, b, beams, decoding.length_penalty, n_best)


def _best(hist: tuple[torch.Tensor, ...], scores: torch.Tensor, b: int, beams: int, length_penalty: float,
          n_best: int) -> DecodeResult:
    """The n_best hypotheses of each image by ``score / length ** length_penalty``, best first."""
    tokens, logprobs, ent = hist[:3]  # (R, T)
    mask = tokens != PAD
    final = scores / mask.sum(1).to(scores.dtype) ** length_penalty if length_penalty else scores  # (R,)
    order = final.view(b, beams).argsort(dim=1, descending=True)[:, :n_best]  # (B, n_best)
    found = final.view(b, beams).gather(1, order).isfinite()  # (B, n_best) False: no such caption
    order = torch.where(found, order, order[:, :1])
    keep = (order + torch.arange(b, device=tokens.device)[:, None] * beams).view(-1)  # (B*n_best,)
    hidden = zero_pads(hist[3][keep], mask[keep]) if len(hist) > 3 else None
    return DecodeResult(tokens[keep], logprobs[keep], mask[keep], final[keep], ent[keep], hidden)
