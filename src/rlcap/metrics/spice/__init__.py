"""SPICE 1.0 (Anderson et al. 2016): a Python port (default) and the official jar.

- ``SpiceScorer(refs).score(candidates, image_ids)``: per-caption F, references parsed once, candidate
  parses and scores cached (the reward API); ``compute_score(gts, res)``: pycocoevalcap's interface.
- ``spice(cands, refs, corenlp_dir)``: the official ``spice-1.0.jar`` with the user's CoreNLP 3.6.0.

The port (``spice_impl: python``) parses with spaCy instead of CoreNLP; its agreement with the
official parser is measured in docs/METRICS.md.
"""

from rlcap.metrics.spice.official import CORENLP_JARS, corenlp_jars, spice
from rlcap.metrics.spice.scorer import SpiceScorer, compute_score, prepare

SPICE_IMPLEMENTATIONS = ("python", "official-jar")

__all__ = [
    "CORENLP_JARS",
    "SPICE_IMPLEMENTATIONS",
    "SpiceScorer",
    "compute_score",
    "corenlp_jars",
    "prepare",
    "spice",
]
