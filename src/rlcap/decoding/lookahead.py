"""Lookahead inference: beam search that ranks words by the policy and the value network together.

[Shi18 Fig. 1] and sec. 1: the policy network proposes words and
the value network judges the state each would lead to. Following Ren et al. 2017, whose
"lookahead inference" [Shi18] retells, a candidate word ``w`` of a beam in state ``s_t`` is ranked by

    lambda * log pi(w_1..w_t, w) + (1 - lambda) * v(s_{t+1})

where the first term is the beam's summed log-probability with ``w`` appended (what plain beam
search ranks by) and ``v(s_{t+1})`` the value of the state after reading ``w``: an estimate of the
reward of the finished caption, so it is not summed over steps. ``lambda = 1`` is plain beam search.
"""

from __future__ import annotations

import torch

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding.word_distribution import banned_words, entropy, word_logprobs
from rlcap.decoding.result import DecodeResult, outside_inference
from rlcap.distributed import ended_everywhere
from rlcap.errors import ConfigError
from rlcap.models.base import Captioner, Feats, expand_memory, select_batch
from rlcap.models.value import ValueModel


def lookahead_search(model: Captioner, value_net: ValueModel, feats: Feats, beam_size: int, max_len: int,
                     lam: float, length_penalty: float = 0.0, n_best: int = 1, candidates: int = 0) -> DecodeResult:
    """Beam search ranked by ``lam * log pi + (1 - lam) * v(s_{t+1})``: (B*n_best, T) rows, best first.

    Args:
        model: the policy; value_net: its critic (both usually in eval mode).
        lam: in [0, 1]; 1 gives exactly :func:`rlcap.decoding.beam_search`'s captions and scores.
        candidates: words per beam whose next state the value network scores at each step, the
            beam's most likely ones (0: ``beam_size``). At ``lam = 1`` nothing outside them can be
            chosen; below 1 a larger number lets the value promote less likely words.
        beam_size, max_len, length_penalty, n_best: as for beam search; the final ranking is
            ``lam * logprob / length ** length_penalty + (1 - lam) * v`` of the finished caption.

    A caption that ends with EOS is valued at the state EOS was chosen from: the state after
    reading EOS is terminal, and the value network is never trained on it (docs/RL.md).
    """
    if not 0.0 <= lam <= 1.0:
        raise ConfigError(f"lookahead: lambda must be in [0, 1], got {lam}")
    if not 1 <= n_best <= beam_size:
        raise ConfigError(f"lookahead: n_best must be in [1, beam_size={beam_size}], got {n_best}")
    if candidates and candidates < beam_size:
        raise ConfigError(f"lookahead: candidates must be 0 or at least beam_size={beam_size}, got {candidates}")
    with torch.inference_mode():
        result = _lookahead(model, value_net, feats, beam_size, max_len, lam, length_penalty, n_best,
                            candidates or beam_size)
    return outside_inference(result)


def _lookahead(model: Captioner, value_net: ValueModel, feats: Feats, k: int, max_len: int, lam: float,
               length_penalty: float, n_best: int, c: int) -> DecodeResult:
    """As beam search (decoding/beam.py, without a prefix): beams grow 1 -> k; row r belongs to image
    r // beams. Each step: the policy's next-word log-probabilities, each beam's ``c`` best words,
    the value of the state each leads to, then the ``k`` best of the ``beams * c`` by the mixed rank."""
    b, device = feats.fc.size(0), feats.fc.device
    encoded = model.encode(feats)
    memory, state = encoded, model.init_state(encoded)
    word = torch.full((b,), BOS, dtype=torch.long, device=device)  # (R,)
    value, vstate = value_net.step(value_net.start(feats), word)  # (R,) v(s_0), after the image and BOS
    beams, ban = 1, None
    scores = torch.zeros(b, device=device)  # (R,) summed logprobs
    done = torch.zeros(b, dtype=torch.bool, device=device)  # (R,) EOS already emitted
    hist = tuple(torch.zeros(b, 0, dtype=dt, device=device) for dt in (torch.long, torch.float, torch.float))
    for _ in range(max_len):
        step_lp, state = model.step(memory, state, word)  # (R, V)
        if ban is None:
            ban = banned_words(step_lp.size(1), step_lp)
        step_lp = word_logprobs(step_lp, ban)  # (R, V) PAD and BOS are never generated
        cand = step_lp + scores[:, None]  # (R, V) summed log-probability of every continuation
        cand.masked_fill_(done[:, None], float("-inf"))
        cand[:, PAD] = torch.where(done, scores, float("-inf"))  # an ended beam continues with PAD, at no cost
        # 1. each beam's c most likely continuations
        top_lp, top_w = cand.topk(min(c, cand.size(1)), dim=1)  # (R, c)
        rows, c_now = top_w.size(0), top_w.size(1)
        # 2. the value of the state each leads to; EOS and ended beams keep the value of their state
        expanded = select_batch(vstate, torch.arange(rows, device=device).repeat_interleave(c_now))  # (R*c, ...)
        cand_v, cand_state = value_net.step(expanded, top_w.reshape(-1))  # (R*c,)
        cand_v = torch.where((top_w == EOS) | done[:, None], value[:, None], cand_v.view(rows, c_now))  # (R, c)
        # 3. rank by the mixture, keep the k best of each image
        rank = lam * top_lp + (1.0 - lam) * cand_v  # (R, c); lam = 1 is exactly top_lp
        rank.masked_fill_(top_lp == float("-inf"), float("-inf"))  # impossible words stay so (also at lam = 0)
        new_beams = min(k, beams * c_now)
        _, idx = rank.view(b, beams * c_now).topk(new_beams, dim=1)  # (B, k')
        flat = (idx + torch.arange(b, device=device)[:, None] * beams * c_now).view(-1)  # (R',) into (R*c)
        src = flat // c_now  # (R',) the beam each new beam extends
        word, was_done = top_w.view(-1)[flat], done.index_select(0, src)
        word_lp = step_lp[src, word].masked_fill(was_done, 0.0)  # (R',)
        word_ent = entropy(step_lp).index_select(0, src).masked_fill(was_done, 0.0)  # (R',)
        hist = tuple(torch.cat([h.index_select(0, src), x[:, None]], 1)
                     for h, x in zip(hist, (word, word_lp, word_ent)))  # (R', t+1)
        state, vstate = select_batch(state, src), select_batch(cand_state, flat)
        if new_beams != beams:  # memory is never reordered: beams of an image share it
            memory, beams = expand_memory(model, encoded, new_beams), new_beams
        scores, value = top_lp.view(-1)[flat], cand_v.view(-1)[flat]
        done = was_done | (word == EOS)
        if ended_everywhere(done, model):
            break
    return _best(hist, scores, value, lam, b, beams, length_penalty, n_best)


def _best(hist: tuple[torch.Tensor, ...], scores: torch.Tensor, value: torch.Tensor, lam: float, b: int, beams: int,
          length_penalty: float, n_best: int) -> DecodeResult:
    """The n_best captions of each image by ``lam * score / length ** length_penalty + (1 - lam) * value``."""
    tokens, logprobs, ent = hist  # (R, T)
    mask = tokens != PAD
    ranked = scores / mask.sum(1).to(scores.dtype) ** length_penalty if length_penalty else scores  # (R,)
    final = lam * ranked + (1.0 - lam) * value  # (R,)
    order = final.view(b, beams).argsort(dim=1, descending=True)[:, :n_best]  # (B, n_best)
    keep = (order + torch.arange(b, device=tokens.device)[:, None] * beams).view(-1)  # (B*n_best,)
    return DecodeResult(tokens[keep], logprobs[keep], mask[keep], final[keep], ent[keep])
