"""How much the simulated annotators agree, and other statistics of a captioned dataset.

Human agreement follows the COCO protocol: one caption of each image is held out as the
candidate and scored against the others with CIDEr-D as pycocoevalcap computes it (document
frequencies from the references of the scored images). The inputs are Karpathy-schema image
entries (``{"split", "sentences": [{"tokens", ...}]}``), so COCO and shapes are measured alike.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from rlcap.data.synthetic.annotators import _second_object
from rlcap.data.synthetic.captions import COLOUR_WORDS, RELATION_WORDS, SHAPE_WORDS, Style, noun_phrase, position_phrase
from rlcap.data.synthetic.scenes import Scene, relation
from rlcap.errors import DataError


class CaptionStats(NamedTuple):
    """Statistics of the captions of a set of images."""

    n_images: int
    n_captions: int
    vocab_size: int  # distinct tokens
    mean_length: float  # tokens per caption
    share_4_to_16: float  # captions with 4..16 tokens
    distinct_share: float  # distinct captions / captions
    images_sharing: float  # images with a caption identical to one of another image
    top_caption: str  # the most frequent caption
    top_caption_images: int  # how many images have it


def select(images: Sequence[dict], split: str | None) -> list[dict]:
    """The entries of ``split`` (all when None); raises if there are none."""
    chosen = [im for im in images if split is None or im["split"] == split]
    if not chosen:
        raise DataError(f"no images in split {split!r}")
    return chosen


def caption_stats(images: Sequence[dict], split: str | None = None) -> CaptionStats:
    """Vocabulary, lengths and how often captions repeat, over the images of ``split``."""
    chosen = select(images, split)
    captions = [" ".join(s["tokens"]) for im in chosen for s in im["sentences"]]
    per_image = [{" ".join(s["tokens"]) for s in im["sentences"]} for im in chosen]
    images_with = Counter(c for caps in per_image for c in caps)  # caption -> images having it
    lengths = [len(c.split()) for c in captions]
    top, top_count = images_with.most_common(1)[0]
    return CaptionStats(
        n_images=len(chosen),
        n_captions=len(captions),
        vocab_size=len({w for c in captions for w in c.split()}),
        mean_length=sum(lengths) / len(lengths),
        share_4_to_16=sum(4 <= n <= 16 for n in lengths) / len(lengths),
        distinct_share=len(set(captions)) / len(captions),
        images_sharing=sum(any(images_with[c] > 1 for c in caps) for caps in per_image)
        / len(chosen),
        top_caption=top,
        top_caption_images=top_count,
    )


def human_agreement(images: Sequence[dict], split: str | None = "test", holdout: int = 0,
                    candidates: Sequence[str] | None = None) -> float:
    """Corpus CIDEr-D of caption ``holdout`` of each image against the image's other captions.

    ``candidates``: one caption per chosen image to score instead of caption ``holdout``, against
    the same references (e.g. :func:`scene_consensus`). Uses pycocoevalcap's CIDEr-D (an optional
    dependency) on the lower-case tokens.
    """
    try:
        from pycocoevalcap.cider.cider import Cider
    except ImportError as exc:
        raise DataError("human agreement needs pycocoevalcap (pip install rlcap[dev])") from exc
    chosen = select(images, split)
    if candidates is not None and len(candidates) != len(chosen):
        raise DataError(f"{len(candidates)} candidates for {len(chosen)} images")
    refs: dict[int, list[str]] = {}
    cands: dict[int, list[str]] = {}
    for k, im in enumerate(chosen):
        sentences = [" ".join(s["tokens"]) for s in im["sentences"]]
        if len(sentences) <= holdout + 1 and len(sentences) < 2:
            raise DataError(f"image {im.get('imgid', k)} has {len(sentences)} captions; need 2+")
        cands[k] = [sentences[holdout] if candidates is None else " ".join(re.findall(r"[a-z]+", candidates[k].lower()))]
        refs[k] = sentences[:holdout] + sentences[holdout + 1:]
    score, _ = Cider().compute_score(refs, cands)
    return float(score)


def names_salient_object(scene: dict, caption: str) -> tuple[bool, bool]:
    """Does ``caption`` name the colour, and the shape, of the scene's salient object?

    ``scene`` is a record's ``"scene"`` entry (objects most salient first). Any of the words the
    annotators use counts (violet for purple, disc for circle, ...). Used to tell perception
    errors from wording when a captioner is diagnosed on shapes.
    """
    first = scene["objects"][0]
    text = " " + " ".join(caption.lower().replace(".", " ").replace(",", " ").split()) + " "
    colour = any(f" {w} " in text for w in COLOUR_WORDS[first["colour"]])
    shape = any(f" {name} " in text for pair in SHAPE_WORDS[first["shape"]] for name in pair)
    return colour, shape


def salient_object_accuracy(scenes: dict[str, dict], predictions: dict[str, str]) -> dict[str, float]:
    """Share of predicted captions naming the salient object's colour, its shape, and both."""
    if not predictions:
        raise DataError("no predictions to check")
    missing = [i for i in predictions if i not in scenes]
    if missing:
        raise DataError(f"no scene for image {missing[0]!r}")
    named = [names_salient_object(scenes[i], c) for i, c in predictions.items()]
    n = len(named)
    return {"colour": sum(c for c, _ in named) / n, "shape": sum(s for _, s in named) / n,
            "both": sum(c and s for c, s in named) / n}


def salient_template(scene: dict, size: bool) -> str:
    """The salient object in the usual words: 'a red star', with ``size`` 'a big red star'."""
    first = scene["objects"][0]
    words = [{"large": "big", "small": "small"}.get(first["size"], "")] if size else []
    words = [w for w in words if w] + [first["colour"], SHAPE_WORDS[first["shape"]][0][0]]
    return ("an " if words[0][0] in "aeiou" else "a ") + " ".join(words)


def scene_consensus(scene: dict) -> str:
    """What a captioner that perceives the scene rightly can say in the words the annotators of
    captions version 2 share: the salient object with its size, and where the next one is, in the
    usual words ("a big red circle above a blue square"; one object: where it is)."""
    usual = Style(size_prob=1.0, texture_prob=0.0, synonym_prob=0.0, large_word="big")
    rng = random.Random(0)  # every choice below is forced but the corner wording of a lone object
    objs = Scene.from_dict(scene).objects
    first = noun_phrase(objs[:1], usual, rng)
    if len(objs) == 1:
        return f"{first} {position_phrase(objs[0], rng)}"
    return f"{first} {RELATION_WORDS[relation(objs[0], objs[1])][0]} {_second_object(objs[0], objs[1], usual, rng)}"
