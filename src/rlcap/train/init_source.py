"""Where a run starts (``init_from``: a checkpoint, or a transformers captioner's folder) and whether that fits
its data, checked once the data is loaded.

``init_from`` hands a run a checkpoint's weights and its vocabulary. Weights trained on other
captions (a video checkpoint on shapes) or on features of another kind would train, and give a
model that never says this data's words or reads features it was not made for. So a checkpoint
whose vocabulary lacks words of the run's training captions, or whose features had another image
size, is refused unless ``allow_init_mismatch=true``; one whose feature sizes differ is refused
always (its weights cannot take those features). A sequence-level (RL) loop started without
``init_from`` trains from random weights: that is allowed, with a warning line (not for an architecture whose captioner
starts from a folder's trained weights: a transformers captioner's ``model.path``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from rlcap.config import from_dict
from rlcap.data.loader import CaptionData
from rlcap.data.vocab import SPECIALS, Vocab
from rlcap.errors import DataError
from rlcap.models.architectures import architecture, folder_section
from rlcap.models.model_config import ModelConfig
from rlcap.train.checkpoint import Checkpoint, load_checkpoint

log = logging.getLogger(__name__)


def init_checkpoint(cfg: Any) -> Checkpoint | None:
    """The checkpoint of ``cfg.init_from``; None for a folder of an architecture's own kind (a transformers
    captioner's: an ``hf/`` export, a downloaded captioner), which makes the run's model section the one its
    architecture starts there (``model.arch=hf`` with ``model.path`` there: its weights and tokenizer start the run)."""
    section = folder_section(cfg.model, cfg.init_from)
    if section is not None:
        cfg.model = section
        return None
    return load_checkpoint(cfg.init_from, with_trainer=False)


def model_section(cfg: Any, source: Checkpoint, init: Checkpoint | None) -> ModelConfig:
    """The model a run builds to load ``source``'s weights: that checkpoint's architecture (an RL run's config
    names only init_from, and on resume the run's own checkpoint is the source; an hf policy's ``model.path`` is
    the checkpoint's own hf/, rlcap.train.checkpoint); from ``init`` (init_from), how to train it (model.train,
    LoRA's rank and alpha) is the run's own where its recipe or overrides set it, to the default or not
    (``cfg.sets``). A LoRA checkpoint's adapters then go into a policy that trains otherwise merged
    (the policy's ``adapt_weights``, given the checkpoint's model section)."""
    taken = from_dict(ModelConfig, source.config["model"])
    if init is None:
        return taken
    keys = architecture(taken.arch).training_keys  # (how its architecture trains it, not what it is)
    taken = dataclasses.replace(taken, **{k: getattr(cfg.model, k) for k in keys if cfg.sets(f"model.{k}")})
    # model keys a recipe or an override set that are not used
    unused = [f"model.{k}={v}" for k, v in vars(cfg.model).items()
              if k not in keys and cfg.sets(f"model.{k}") and v != getattr(taken, k)]
    if unused:
        log.warning("%s are not used: a run with init_from takes the architecture of %s", ", ".join(unused),
                    cfg.init_from)
    return taken


def check_start(cfg: Any, init: Checkpoint | None, data: CaptionData) -> None:
    """Check ``init`` (the checkpoint of ``cfg.init_from``; None when resuming or starting fresh)
    against ``data``; :class:`DataError` for a mismatch (see the module docstring).
    ``cfg``: a :class:`rlcap.run_config.RunConfig`."""
    if not cfg.init_from:
        if cfg.FROM_XE and not architecture(cfg.model.arch).starts_trained:  # (hrl also refuses the model it then builds)
            log.warning("algorithm=%s starts from random weights (no init_from): it is meant to continue an XE "
                        "model; pass init_from=XE_RUN/best", cfg.algorithm)
        return
    if init is None:  # resuming (the run's own checkpoint, checked when the run started), or from a transformers
        return        # captioner's folder (model.arch=hf: the captioner checks the store it reads)
    _check_feature_sizes(cfg, init, data)
    _check_vocabulary(cfg, init, data)


def _check_feature_sizes(cfg: Any, init: Checkpoint, data: CaptionData) -> None:
    trained = init.config["feature_dims"]
    split = next(iter(data.splits.values()))
    if (split.fc_dim, split.att_dim) != (trained["fc"], trained["att"]):
        raise DataError(f"init_from {cfg.init_from} takes {trained['fc']}-d pooled and {trained['att']}-d region "
                        f"features, but {cfg.data.features} holds {split.fc_dim}-d and {split.att_dim}-d ones: "
                        "its weights cannot read them; give features made with its encoder")
    size, stored = trained["image_size"], split.image_size
    if size is None or stored is None or int(size) == int(stored):  # stores that record no size: not checked
        return
    if not cfg.allow_init_mismatch:
        raise DataError(f"init_from {cfg.init_from} was trained on features of {size}-px images, but "
                        f"{cfg.data.features} holds features of {stored}-px images: pass data.features=FILE "
                        f"extracted with `rlcap features --image-size {size}`, or allow_init_mismatch=true")
    log.warning("init_from %s was trained on %s-px features; continuing on %s-px ones (allow_init_mismatch)",
                cfg.init_from, size, stored)


def missing_words(init_vocab: Vocab, token_lists: list[list[str]], min_count: int) -> list[str]:
    """Words seen at least ``min_count`` times in ``token_lists`` that ``init_vocab`` lacks, most
    frequent first: the words a run on these captions would build a vocabulary of, and could not say."""
    own = Vocab.build(token_lists, min_count)
    return [w for w in own.itos[len(SPECIALS):] if w not in init_vocab.stoi]


def _check_vocabulary(cfg: Any, init: Checkpoint, data: CaptionData) -> None:
    if "train" not in data.splits or not isinstance(init.vocab, Vocab):  # (a tokenizer's subwords spell any word)
        return
    captions = [words for image in data.splits["train"].tokens for words in image]  # one token list each
    # the checkpoint's own min_count: the vocabulary its run built from its captions
    min_count = init.config["data"]["min_count"]
    missing = missing_words(init.vocab, captions, min_count)
    if not missing:
        return
    words = len(Vocab.build(captions, min_count)) - len(SPECIALS)
    examples = ", ".join(repr(w) for w in missing[:3])
    if not cfg.allow_init_mismatch:
        raise DataError(f"init_from {cfg.init_from}: its vocabulary ({len(init.vocab)} words) lacks {len(missing)} "
                        f"of the {words} words of this run's training captions ({examples}, ...): it was trained "
                        "on other captions; start from a checkpoint trained on this data, or pass "
                        "allow_init_mismatch=true to train with its vocabulary (those words become <unk>)")
    log.warning("init_from %s lacks %d of the %d words of the training captions (%s): they are <unk> "
                "(allow_init_mismatch)", cfg.init_from, len(missing), words, examples)
