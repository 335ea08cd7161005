"""The Python API behind the CLI: train, evaluate, caption and baselines."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcap.config import load_config
from rlcap.errors import ConfigError
from rlcap.train.config import RunConfig

log = logging.getLogger(__name__)


def _trainers() -> dict[str, Callable[[RunConfig], Any]]:
    from rlcap.train.scst import train_scst
    from rlcap.train.sle import train_sle
    from rlcap.train.xe import train_xe

    # SLL (plain SCST) and SLL-ME (SCST with rl.entropy_weight > 0) share the SCST loop.
    return {"xe": train_xe, "scst": train_scst, "sll_sle": train_sle}


def load_run_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    return load_config(RunConfig, path, overrides)


def train(cfg: RunConfig) -> Any:
    """Run the loop named by ``cfg.algorithm``."""
    trainers = _trainers()
    if cfg.algorithm not in trainers:
        raise ConfigError(f"algorithm: {cfg.algorithm!r} is not one of {sorted(trainers)}")
    return trainers[cfg.algorithm](cfg)


def coco_results(predictions: dict[str, str]) -> list[dict[str, Any]]:
    """COCO results format; an all-digit id becomes an integer ``image_id`` as COCO expects."""
    return [{"image_id": int(i) if i.isdigit() else i, "caption": c} for i, c in predictions.items()]


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2), encoding="utf-8")
    tmp.replace(path)


DEFAULT_METRICS = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")


def evaluation_metrics() -> list[str]:
    """The pycocoevalcap metrics this machine can compute: METEOR needs Java and the jar in
    pycocoevalcap's wheel, SPICE (and so SPIDEr) the Stanford CoreNLP jars (RLCAP_CORENLP_DIR).
    What is left out is logged once, so a table without METEOR never passes silently."""
    from rlcap.errors import RlcapError
    from rlcap.metrics.java import java_executable, packaged_jar
    from rlcap.metrics.spice import corenlp_jars

    metrics = list(DEFAULT_METRICS)
    try:
        java_executable()
        packaged_jar("meteor/meteor-1.5.jar")
    except RlcapError as exc:
        metrics.remove("METEOR")
        log.warning("METEOR left out: %s", exc)
    try:
        corenlp_jars()
        metrics += ["SPICE", "SPIDEr"]
    except RlcapError as exc:
        log.info("SPICE and SPIDEr left out: %s", exc)
    return metrics


def evaluate(checkpoint: str | Path, split: str = "test", beam_size: int = 3, max_len: int = 16,
             out_dir: str | Path | None = None, baselines: tuple[str, ...] = (),
             data_overrides: list[str] | None = None, batch_size: int = 100,
             progress: bool = False, length_penalty: float = 0.0) -> dict[str, Any]:
    """Caption ``split`` with a checkpoint and score it; optionally the baselines too.

    Returns ``{"model": {metric: value}, "baselines": {name: {metric: value}}}`` and, with
    ``out_dir``, writes ``predictions.json`` (COCO results format), ``scores.json`` (that
    dict) and ``per_image.json``.
    """
    from rlcap.config import apply_overrides, from_dict
    from rlcap.data.loader import DataConfig, load_data
    from rlcap.train.evaluate import decode_split, score_predictions
    from rlcap.train.session import load_model

    model, vocab, config = load_model(checkpoint)
    data_cfg = from_dict(DataConfig, apply_overrides(dict(config["data"]), list(data_overrides or [])))
    splits = (split, "train") if baselines else (split,)
    data = load_data(data_cfg, splits, vocab=vocab)
    metrics = evaluation_metrics()
    predictions = decode_split(model, data.splits[split], vocab, beam_size, max_len, batch_size, progress=progress,
                               length_penalty=length_penalty)
    result = score_predictions(data.splits[split], predictions, metrics)
    scores: dict[str, Any] = {"model": result.corpus, "baselines": {}}
    baseline_preds = {}
    for name in baselines:
        preds = BASELINES[name](data.splits["train"], data.splits[split])
        baseline_preds[name] = preds
        scores["baselines"][name] = score_predictions(data.splits[split], preds, metrics).corpus
    if out_dir is not None:
        out = Path(out_dir)
        write_json(out / "predictions.json", coco_results(predictions))
        write_json(out / "per_image.json", result.per_image)
        for name, preds in baseline_preds.items():
            write_json(out / f"predictions_{name}.json", coco_results(preds))
        write_json(out / "scores.json", scores)
    log.info("evaluated %s on %s (beam %d): %s", checkpoint, split, beam_size, result.corpus)
    return scores


def _nearest_neighbour(train: Any, query: Any) -> dict[str, str]:
    from rlcap.baselines import nearest_neighbour_predictions

    return nearest_neighbour_predictions(train, query)


BASELINES: dict[str, Callable[[Any, Any], dict[str, str]]] = {"nearest_neighbour": _nearest_neighbour}


def caption_images(checkpoint: str | Path, images: list[str | Path], beam_size: int = 3, max_len: int = 16,
                   image_size: int | None = None, batch_size: int = 16) -> dict[str, str]:
    """Caption image files end to end: frozen encoder, then the checkpoint's model.

    ``image_size`` defaults to the size the checkpoint's training features were extracted at
    (recorded in the checkpoint), so the model sees features like those it was trained on.
    """
    import torch

    from rlcap.decoding import beam_search, greedy
    from rlcap.encoders.efficientnet import FEATURE_DIM, EfficientNetLite0Encoder
    from rlcap.errors import RlcapError
    from rlcap.encoders.images import load_image, preprocess
    from rlcap.models.base import Feats
    from rlcap.train.session import load_model

    model, vocab, config = load_model(checkpoint)
    dims = config["feature_dims"]
    if dims["fc"] != FEATURE_DIM or dims["att"] != FEATURE_DIM:
        raise RlcapError(f"{checkpoint} was trained on {dims['fc']}-d features; `caption` encodes images with "
                         f"EfficientNet-Lite0, whose features are {FEATURE_DIM}-d (train on `rlcap features` output)")
    size = image_size or int(dims["image_size"] or 224)
    encoder = EfficientNetLite0Encoder(size)
    out: dict[str, str] = {}
    paths = [Path(p) for p in images]
    for start in range(0, len(paths), batch_size):
        chunk = paths[start:start + batch_size]
        pixels = preprocess([load_image(p) for p in chunk], size)  # DataError names a bad file
        with torch.inference_mode():
            fc, att = encoder.encode(pixels)
            feats = Feats(fc, att, torch.ones(att.shape[:2], dtype=torch.bool))
            if beam_size <= 1:
                result = greedy(model, feats, max_len=max_len)
            else:
                result = beam_search(model, feats, beam_size=beam_size, max_len=max_len)
        for path, row in zip(chunk, result.tokens):
            out[str(path)] = vocab.decode(row.tolist())
    return out
