"""The Python API behind the CLI: train, evaluate, caption and the reference captioners."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlcap.devices import resolve_device
from rlcap.methods import load_run_config, method  # noqa: F401 (the API's: a recipe as its method's run config)
from rlcap.run_config import RunConfig

log = logging.getLogger(__name__)


def train(cfg: RunConfig, resume: bool = False, overwrite: bool = False) -> Any:
    """Run the loop named by ``cfg.algorithm`` (:data:`rlcap.methods.registry.METHODS`) in ``cfg.out_dir``.

    A folder that holds a run with the same settings continues it; one with other settings is refused,
    unless ``resume`` (continue it, applying the settings a run may change) or ``overwrite`` (replace
    it) is given (:mod:`rlcap.train.run_folder`). A run that fails before it has started puts back the
    run ``overwrite`` was to replace. One training at a time in a run folder: its lock
    (:func:`rlcap.locks.hold_run_folder`) is taken before anything is written there, which also checks
    that the folder can be written, and released however the training ends."""
    from rlcap.locks import hold_run_folder
    from rlcap.distributed import finish_together, launched_rank
    from rlcap.train.run_folder import abandon_start, open_run_folder

    loop = method(cfg.algorithm).train
    main = launched_rank() == 0  # under torchrun, rank 0 holds the run folder and cleans it up
    resolve_device(cfg.device)  # a device this machine cannot use fails before any work
    with hold_run_folder(cfg.out_dir) if main else contextlib.nullcontext():
        try:
            if main:
                open_run_folder(cfg, resume, overwrite)
            result = loop(cfg)  # (its forward passes in cfg.precision: rlcap.devices.Precision)
            finish_together()  # under torchrun: no rank leaves while another still works (rank 0's last save)
            if main and cfg.track.artifacts:
                send_artifacts(cfg, result.steps)
            return result
        except BaseException:
            if main:
                abandon_start(cfg.out_dir)
            raise


def send_artifacts(cfg: RunConfig, step: int) -> None:
    """``track.artifacts``: the run's HTML report (written now, ``OUT/report.html``) and ``best/hf/`` (a transformers
    policy's folder and model card, when the run has one) to the run's trackers that keep files (W&B, MLflow), their
    recorded runs continued. A failure is one warning (rlcap.track.fanout): the trained run is not lost for it."""
    from rlcap.report import write_report
    from rlcap.track.fanout import KEEP_FILES, Trackers

    keeping = [name for name in cfg.track.to if name in KEEP_FILES]
    if not keeping:
        return
    out = Path(cfg.out_dir)
    files = {"report.html": write_report(out, out / "report.html")}
    if (out / "best" / "hf").is_dir():
        files["best/hf"] = out / "best" / "hf"
    trackers = Trackers(out, dataclasses.replace(cfg.track, to=keeping, required=False), step, {})
    trackers.log_artifacts(files)
    trackers.close()


def coco_results(predictions: dict[str, str]) -> list[dict[str, Any]]:
    """COCO results format. Ids stay the strings they are in the dataset, except that when every id
    is an integer written without leading zeros ("42", not "0042") all are written as integers, as
    COCO's own are: then reading an id back as a string (``rlcap score``) gives the same id."""
    as_int = all(_plain_integer(i) for i in predictions)
    return [{"image_id": int(i) if as_int else i, "caption": c} for i, c in predictions.items()]


def _plain_integer(text: str) -> bool:
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))


def write_json(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON, written atomically (:func:`rlcap.files.write_json`: a full disk or
    a read-only folder is one line, :class:`rlcap.files.WriteError`)."""
    from rlcap.files import write_json as write

    write(path, obj, indent=2)


def evaluation_metrics() -> list[str]:
    """The metrics of every evaluation table: pycocoevalcap's default set
    (:func:`rlcap.metrics.default_metrics`: METEOR when Java is there, SPICE by the Python port,
    ``spice_impl: python``) plus SPIDEr."""
    from rlcap.metrics import default_metrics

    return [*default_metrics(), "SPIDEr"]


def evaluate(checkpoint: str | Path, split: str = "test", beam_size: int | None = None, max_len: int | None = None,
             out_dir: str | Path | None = None, references: tuple[str, ...] = (),
             data_overrides: list[str] | None = None, batch_size: int = 100,
             progress: bool = False, length_penalty: float | None = None,
             dataset: str | Path | None = None, no_repeat_ngram: int | None = None,
             device: str = "auto", precision: str | None = None, clip: str | Path | None = None,
             images: str | Path | None = None, objects: str | Path | None = None,
             reader: str | Path | None = None, qa: str | Path | None = None) -> dict[str, Any]:
    """Caption ``split`` with a checkpoint and score it; optionally reference captioners too. ``clip``: a local
    CLIP folder, which adds CLIP-S and RefCLIP-S ([Hessel21]) from the pictures in ``images`` (None: the
    dataset's own folder, where its file names are relative to). ``objects``: a file of the pictures' objects (a
    shapes dataset, COCO instance annotations: :func:`rlcap.data.objects.read_object_truth`), which adds CHAIR_i,
    CHAIR_s and Coverage ([Rohrbach18]), and Colour-err on shapes. ``reader`` and ``qa``: a held-out text-only
    reader's folder and the questions by image id, which add QA-acc ([Xing26], :mod:`rlcap.eval.qa_accuracy`).
    ``device``: where the model decodes (auto: CUDA when torch sees it, else the CPU); ``precision``: its
    forward passes' (None: the run's own, which its validation decoded in).

    Decoding settings left as None are the checkpoint's own (its run's ``decode`` section). The data are
    the checkpoint's, found and checked as :meth:`rlcap.eval.open_run.OpenRun.data_config` says, with
    ``data_overrides``; ``dataset``: a folder built by ``rlcap data concepts`` to evaluate on instead
    (its captions encoded with the checkpoint's vocabulary, unknown words as ``<unk>``).

    Returns ``{"model": {metric: value}, "references": {name: {metric: value}}, "evaluated": {checkpoint, split,
    data, decoding}}`` and, with ``out_dir``, writes ``predictions.json`` (COCO results format), ``scores.json``
    (that dict) and ``per_image.json``, and ``predictions_NAME.json`` and ``per_image_NAME.json`` for each
    reference captioner; the checkpoint keeps what its architecture keeps of them (an hf checkpoint's model card takes
    the scores when it decoded with the checkpoint's own settings: :meth:`rlcap.models.architecture.Architecture
    .evaluated`).
    """
    import time

    from rlcap.data.objects import read_object_truth
    from rlcap.decoding.split import decode_split
    from rlcap.eval.clip_score import add_clip_scores, check_split_pictures, load_clip
    from rlcap.eval.open_run import evaluation_record, open_run
    from rlcap.eval.qa_accuracy import add_qa_scores, load_judge
    from rlcap.files import check_writable
    from rlcap.metrics.scoring import object_metrics
    from rlcap.models.architectures import architecture
    from rlcap.train.validation import score_predictions

    if out_dir is not None:
        check_writable(out_dir, folder=True)  # before the decoding, not after it
    truth = read_object_truth(objects) if objects is not None else None  # (a bad file: before the decoding)
    run = open_run(checkpoint, device, beam_size=beam_size, max_len=max_len, length_penalty=length_penalty,
                   no_repeat_ngram=no_repeat_ngram, precision=precision)
    data_cfg = run.data_config(data_overrides, dataset)
    data = run.data((split, "train") if references else (split,), data_config=data_cfg)
    clip_model = load_clip(clip, run.device) if clip is not None else None  # (a bad folder: before the decoding)
    if clip_model is not None:
        check_split_pictures(data_cfg, data.splits[split], images)  # (a missing picture too)
    judge = load_judge(reader, qa, str(run.device)) if (reader, qa) != (None, None) else None  # (before decoding)
    dec = run.decoding
    metrics = evaluation_metrics() + ([*object_metrics(truth)] if truth is not None else [])
    log.info("decoding %d images of split %s (beam %d)", len(data.splits[split]), split, dec.beam_size)
    started = time.perf_counter()
    # A bar only on a terminal: redirected to a file it is one long line of carriage returns.
    predictions = decode_split(run.policy, data.splits[split], run.vocab, dec, batch_size, progress=progress,
                               precision=run.precision)
    log.info("decoded %d images in %.1f s", len(predictions), time.perf_counter() - started)
    result = score_predictions(data.splits[split], predictions, metrics, objects=truth)
    if clip_model is not None:
        add_clip_scores(result, clip_model, data_cfg, data.splits[split], images)
    if judge is not None:
        add_qa_scores(result, *judge)
    scores: dict[str, Any] = {"model": result.corpus, "references": {}, "spice_impl": "python",
                              "evaluated": evaluation_record(checkpoint, split, data_cfg, run)}
    reference_preds = {}
    for name in references:
        preds = REFERENCE_CAPTIONERS[name](data.splits["train"], data.splits[split])
        reference_preds[name] = score_predictions(data.splits[split], preds, metrics, objects=truth)
        scores["references"][name] = reference_preds[name].corpus
    if out_dir is not None:
        _write_evaluation(Path(out_dir), predictions, result, reference_preds, scores)
        architecture(run.config["model"]["arch"]).evaluated(Path(checkpoint), scores)  # (an hf model card)
    log.info("evaluated %s on %s (beam %d): %s", checkpoint, split, dec.beam_size, result.corpus)
    return scores


def _write_evaluation(out: Path, predictions: Any, result: Any, reference_preds: dict[str, Any],
                      scores: dict[str, Any]) -> None:
    """What :func:`evaluate` writes to ``out``: the predictions, per-image scores (the model's and each reference
    captioner's) and ``scores.json``."""
    write_json(out / "predictions.json", coco_results(predictions))
    write_json(out / "per_image.json", result.per_image)
    for name, ref in reference_preds.items():
        write_json(out / f"predictions_{name}.json", coco_results(ref.predictions))
        write_json(out / f"per_image_{name}.json", ref.per_image)
    write_json(out / "scores.json", scores)


def lookahead(checkpoint: str | Path, lambdas: list[float], split: str = "val", beam_size: int | None = None,
              max_len: int | None = None, length_penalty: float | None = None, out_dir: str | Path | None = None,
              data_overrides: list[str] | None = None, batch_size: int = 100, progress: bool = False,
              dataset: str | Path | None = None) -> Any:
    """CIDEr-D of ``split`` decoded by lookahead inference ([Shi18], Fig. 1) at each lambda, with an
    actor-critic checkpoint (policy and value network, on the CPU); the best lambda is the one to use.
    The data are found as :func:`evaluate` finds them (``data_overrides``, ``dataset``).

    Returns :class:`rlcap.eval.lookahead.LookaheadChoice`; with ``out_dir``, writes ``lookahead.json``."""
    from rlcap.eval.lookahead import lookahead_scores, write_choice
    from rlcap.eval.open_run import open_run
    from rlcap.files import check_writable

    if out_dir is not None:
        check_writable(out_dir, folder=True)
    run = open_run(checkpoint, "cpu", value=True, beam_size=beam_size, max_len=max_len, length_penalty=length_penalty)
    data = run.data((split,), data_overrides, dataset)
    choice = lookahead_scores(run.policy, run.value, data.splits[split], run.vocab, lambdas, run.decoding, batch_size,
                              progress=progress, precision=run.precision)
    if out_dir is not None:
        write_choice(Path(out_dir) / "lookahead.json", choice, split, str(checkpoint))
    return choice


def _nearest_neighbour(train: Any, query: Any) -> dict[str, str]:
    from rlcap.reference_captioners import nearest_neighbour_predictions

    return nearest_neighbour_predictions(train, query)


def _template(train: Any, query: Any) -> dict[str, str]:
    from rlcap.reference_captioners import template_predictions

    return template_predictions(train, query)


# Captioners that need no training, scored beside a model (not RL baselines); "template" reads the
# concept features of a dataset built by `rlcap data concepts` (docs/CONCEPTS.md)
REFERENCE_CAPTIONERS: dict[str, Callable[[Any, Any], dict[str, str]]] = {
    "nearest_neighbour": _nearest_neighbour, "template": _template}


def caption_images(checkpoint: str | Path, images: list[str | Path], beam_size: int | None = None,
                   max_len: int | None = None, image_size: int | None = None, batch_size: int = 16,
                   on_bad_image: Callable[[str, str], None] | None = None, video_frames: int = 16,
                   device: str = "auto", precision: str | None = None) -> dict[str, str]:
    """Caption image (or video) files end to end: frozen encoder, then the checkpoint's model, both on
    ``device`` (auto: CUDA when torch sees it, else the CPU), the model's forward passes in ``precision``
    (None: the run's own).

    A video file (``.mp4``, ``.avi``, ...) is read with PyAV, ``video_frames`` frames evenly spaced
    (as ``rlcap features`` samples by default), each frame's pooled vector one region; a model
    trained on video features captions it. A corrupt or empty video is one clear error (or goes to
    ``on_bad_image``).

    A folder among ``images`` stands for every image under it, a datasets dataset for its pictures
    (:func:`rlcap.encoders.sources.named_images`, which names each caption: a file by its path, a dataset's picture
    by its row, ``DATASET train row 0``).
    The images are encoded by the encoder of the checkpoint's training features, as its store recorded it
    (EfficientNet-Lite0 at ``image_size``, by default the size the features were extracted at; or the
    ``hf:`` model from its folder), so the model sees features like those it was trained on. A file
    that cannot be read as an image raises :class:`DataError`, or, given ``on_bad_image``, is
    reported to it as ``(name, reason)`` and left out.
    """
    import torch

    from rlcap.decoding.options import decode as decode_with
    from rlcap.encoders.load import CountsRegions, checkpoint_encoder
    from rlcap.data.media import is_video
    from rlcap.encoders.sources import named_images
    from rlcap.encoders.video import read_frames
    from rlcap.errors import DataError
    from rlcap.eval.open_run import open_run
    from rlcap.models.base import Feats

    run = open_run(checkpoint, device, beam_size=beam_size, max_len=max_len, precision=precision)
    # a few images: a compilation of the decoding steps (5-30 s) would cost more than it saves
    model, vocab, dec, where = run.policy, run.vocab, run.decoding.eager(), run.device
    encoder = checkpoint_encoder(checkpoint, run.config["feature_dims"], image_size, where,  # its features' encoder
                                 trained_tower=run.config["model"].get("train_vision", "frozen") != "frozen")

    def features(images: list[Any]) -> tuple[Any, Any]:
        return encoder.features(torch.from_numpy(encoder.prepare(images)))  # fc (B, Dfc), att (B, N, Datt)

    out: dict[str, str] = {}
    named = named_images(images)  # (name, picture)

    def decode(feats: Feats) -> torch.Tensor:
        with run.precision.forward():
            return decode_with(model, feats, dec).tokens

    order = [name for name, _ in named]
    videos = [(name, p) for name, p in named if is_video(p)]
    if videos and isinstance(encoder, CountsRegions):  # (its store holds pictures' image tokens, no frame vectors)
        raise DataError(f"{videos[0][0]}: {checkpoint} is a vision-language model policy, which captions pictures, "
                        "not videos")
    for name, path in videos:  # frames sampled as `rlcap features` does by default, each frame a region
        try:
            frames = read_frames(path, n_frames=video_frames)
        except DataError as exc:
            if on_bad_image is None:
                raise
            on_bad_image(name, str(exc))
            continue
        with torch.inference_mode():
            per_frame, _ = features(frames)  # (F, D)
            feats = Feats(per_frame.mean(0, keepdim=True), per_frame[None],
                          torch.ones(1, len(frames), dtype=torch.bool, device=where))
            out[name] = vocab.decode(decode(feats)[0].tolist())
    pictures = [(name, p) for name, p in named if not is_video(p)]
    for start in range(0, len(pictures), batch_size):
        chunk, loaded = _read_images(pictures[start:start + batch_size], on_bad_image)
        if not chunk:
            continue
        with torch.inference_mode():
            fc, att = features(loaded)
            feats = Feats(fc, att, torch.ones(att.shape[:2], dtype=torch.bool, device=where))
            tokens = decode(feats)
        for name, row in zip(chunk, tokens):
            out[name] = vocab.decode(row.tolist())
    return {name: out[name] for name in order if name in out}


def _read_images(named: list[tuple[str, Any]], on_bad_image: Callable[[str, str], None] | None,
                 ) -> tuple[list[str], list[Any]]:
    """The names of the readable pictures of ``named`` (name, picture) and their RGB images; a bad one raises, or
    goes to ``on_bad_image`` as (name, reason)."""
    from rlcap.encoders.images import load_image
    from rlcap.errors import DataError

    good, images = [], []
    for name, path in named:
        try:
            images.append(load_image(path))  # DataError names the file
        except DataError as exc:
            if on_bad_image is None:
                raise
            on_bad_image(name, str(exc))
            continue
        good.append(name)
    return good, images
