"""Greedy decoding, sampling, beam search and Monte-Carlo rollouts over any captioner's ``step``
(see models/base.py).

Every decoder returns a :class:`DecodeResult` whose rows of one image are adjacent (image 0's
n rows, then image 1's, ...). Conventions shared by all of them:

* captions are cut at EOS: the EOS is kept, later positions hold PAD, and ``mask`` is True up to
  and including the EOS. A caption that never ends has ``max_len`` words and no EOS.
* PAD and BOS are never generated (their log-probabilities are ignored when choosing), so
  ``mask == (tokens != PAD)``.
* ``logprobs`` and ``entropy`` are those of the model's own distribution (before temperature,
  top-k or top-p), 0 at padded positions. T is the number of steps run: decoding stops early
  once every row has ended, checked every ``exit_every`` steps (1 on the CPU; 0, never, on a GPU,
  where T is then ``max_len``); the columns after every row has ended hold PAD.
* ``compile=True`` runs each step compiled by ``torch.compile`` (decoding/stepping.py); sampling
  draws its uniform numbers for the whole decode before the first step.
* ``prefix`` (R, P) long, optional: the first words of each row's caption (no BOS, PAD-padded on
  the right, so lengths may differ). Decoding continues after them; ``tokens`` is the whole
  caption and ``max_len`` counts the prefix. Prefix words count in ``mask`` but have logprob and
  entropy 0 (they were not chosen), so ``scores`` and ``logprobs.sum(1)`` are the continuation's
  log-probability given the prefix and a policy gradient over them touches generated words only.
  (Their log-probability under the model is what teacher forcing gives, when a caller needs it.)
  A prefix holding EOS has ended: the row is the prefix. A None or zero-width prefix decodes
  exactly as without one.
* ``return_hidden``: ``hidden`` (R, T, H) holds ``model.hidden(state)`` for the state each
  position's word was chosen from (position p: after reading BOS and words 0..p-1), forced
  prefix words included, 0 at padded positions; with autograd on (sampling) it carries gradient.
* :func:`prefix_rollouts` samples K continuations of every prefix of B captions in one batch,
  rows ordered (b, t, k); :func:`continue_decoding` continues from a given model state.
* A run's settings travel as one :class:`Decoding` (decoding/settings.py), built once per run; :func:`decode`
  decodes as one says (greedy, sampling or beam search), and ``sample``, ``beam_search``, ``prefix_rollouts``
  and ``continue_decoding`` take one too.
"""

from rlcap.decoding.beam import beam_search
from rlcap.decoding.lookahead import lookahead_search
from rlcap.decoding.options import decode
from rlcap.decoding.word_distribution import banned_words, draw, entropy, filter_logits, word_logprobs
from rlcap.decoding.result import DecodeResult
from rlcap.decoding.rollouts import prefix_rollouts
from rlcap.decoding.sampling import continue_decoding, greedy, sample
from rlcap.decoding.settings import Decoding
from rlcap.decoding.stepping import resolve_compile, resolve_exit_every

__all__ = ["DecodeResult", "Decoding", "banned_words", "beam_search", "continue_decoding", "decode", "draw", "entropy",
           "filter_logits", "greedy", "lookahead_search", "prefix_rollouts", "resolve_compile", "resolve_exit_every",
           "sample", "word_logprobs"]
