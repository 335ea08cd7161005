"""CLIP-S and RefCLIP-S ([Hessel21]): the formulas, on cosines a CLIP has computed (no torch here; the embedding
is :mod:`rlcap.eval.clip_score`). The one implementation: the metric (``rlcap eval --clip``, numpy float64) and the
``clip_s`` and ``ref_clip_s`` rewards (:mod:`rlcap.rewards.retrieval`, torch tensors on the run's device) call
these functions, which read an array or a tensor alike.

- CLIP-S(c, v) = w * max(cos(E_c, E_v), 0), w = 2.5 ([Hessel21 eq. 1]), E_c the CLIP text embedding of
  ``"A photo depicts " + c`` (the prefix of the authors' code, ``CLIPCapDataset``), E_v the image's;
- RefCLIP-S(c, R, v) = H-Mean(CLIP-S(c, v), max(max_{r in R} cos(E_c, E_r), 0)) ([Hessel21 eq. 2]), the
  references embedded with the same prefix (their code runs them through the same dataset class);
- the corpus value is the mean of the per-caption values, as their code reports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CLIP_S_WEIGHT = 2.5  # w of [Hessel21 eq. 1]: stretches the cosines CLIP gives captions (about 0..0.4) towards 0..1
CLIP_S_PREFIX = "A photo depicts"  # prepended to every caption and reference (their CLIPCapDataset's default)
CLIP_METRICS = ("CLIP-S", "RefCLIP-S")


def with_prefix(caption: str, prefix: str = CLIP_S_PREFIX) -> str:
    """``caption`` as CLIP reads it for CLIP-S: after the prefix and one space (their code adds the space)."""
    return f"{prefix if prefix.endswith(' ') else prefix + ' '}{caption}"


def _values(x: Any) -> Any:
    """A tensor as it is (its dtype and device); anything else as a float64 array."""
    return x if hasattr(x, "clamp") else np.asarray(x, dtype=np.float64)


def clip_s(cosines: Any, weight: float = CLIP_S_WEIGHT) -> Any:
    """Per-caption CLIP-S from the image-caption cosines (N,) -> (N,): ``weight * max(cos, 0)`` (an array or a
    tensor, as given)."""
    return weight * _values(cosines).clip(min=0)


def refclip_s(clip_s_values: Any, best_reference_cosines: Any) -> Any:
    """Per-caption RefCLIP-S (N,): the harmonic mean of CLIP-S (N,) and the caption's best cosine with its
    references (N,), clipped at 0; 0 where both are 0 (the harmonic mean's limit). Arrays or tensors."""
    a, b = _values(clip_s_values), _values(best_reference_cosines).clip(min=0)
    total = a + b
    return 2 * a * b / (total + (total == 0))  # (where both are 0: 0 / 1)


def clip_scores(ids: list[str], cosines: np.ndarray, best_reference_cosines: np.ndarray | None,
                weight: float = CLIP_S_WEIGHT) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Corpus and per-caption CLIP-S (and RefCLIP-S with the references' cosines) of the captions of ``ids``:
    ``({metric: mean}, {id: {metric: value}})``."""
    per = {"CLIP-S": clip_s(cosines, weight)}
    if best_reference_cosines is not None:
        per["RefCLIP-S"] = refclip_s(per["CLIP-S"], best_reference_cosines)
    corpus = {name: float(values.mean()) if len(values) else float("nan") for name, values in per.items()}
    per_image = {i: {name: float(values[k]) for name, values in per.items()} for k, i in enumerate(ids)}
    return corpus, per_image
