"""Encode a folder of images into an HDF5 feature store, resumably.

Images are decoded and resized in background threads (Pillow releases the GIL while it
decodes and resamples) while the main thread runs the network, so loading overlaps encoding.
Ids already in the output file are skipped, which makes a killed run resumable: run the same
command again and only the missing images are encoded. The file records a fingerprint of each
image file (size, modification time, content digest: :mod:`rlcap.data.features.fingerprint`),
so an id whose image changed since it was encoded (a regenerated dataset) is encoded again, in
place; rows written without a fingerprint (by an rlcap before it recorded them) count as changed.
An id whose file is gone keeps its features. The encoder input size is a file attribute: an
existing file of another ``image_size`` is refused (its grid has another shape).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from rlcap.data.embedded import EmbeddedImage
from rlcap.data.features import HDF5FeatureWriter
from rlcap.data.features.fingerprint import ImageFingerprint, file_stat, fingerprint, is_unchanged
from rlcap.devices import resolve_device
from rlcap.encoders.efficientnet import check_image_size
from rlcap.encoders.hf import HF_PREFIX
from rlcap.encoders.images import load_image
from rlcap.encoders.load import DEFAULT_ENCODER, CountsRegions, ImageEncoder, load_encoder
from rlcap.errors import ConfigError, DataError
from rlcap.files import WriteError, check_writable, write_error

logger = logging.getLogger(__name__)

ON_ERROR = ("raise", "skip")


@dataclass
class ExtractStats:
    """What one call to :func:`extract_features` did."""

    encoded: int = 0  # images encoded and written by this call (``changed`` included)
    already_done: int = 0  # ids found in the output file with an unchanged image, skipped
    changed: int = 0  # ids found in the output file whose image changed (or was never fingerprinted), re-encoded
    failed: list[tuple[str, str]] = field(default_factory=list)  # (id, reason), on_error="skip"
    seconds: float = 0.0

    @property
    def images_per_second(self) -> float:
        return self.encoded / self.seconds if self.seconds > 0 else 0.0


class _Batch(NamedTuple):
    ids: list[str]
    pixels: np.ndarray | None  # (b, ...) the encoder's prepared input, None when every image failed
    failed: list[tuple[str, str]]
    fingerprints: list[ImageFingerprint]  # of the files of ``ids``


def _load_batch(items: Sequence[tuple[str, Path]], encoder: ImageEncoder, on_error: str) -> _Batch:
    ids, images, failed, fingerprints = [], [], [], []
    for id, path in items:
        try:
            fingerprints.append(fingerprint(path))  # before decoding: a later write shows as a change
            images.append(load_image(path, draft_size=encoder.image_size))
        except DataError as exc:
            if on_error == "raise":
                raise
            del fingerprints[len(ids):]
            failed.append((id, str(exc)))
            continue
        ids.append(id)
    return _Batch(ids, encoder.prepare(images) if images else None, failed, fingerprints)


def _todo(images: Mapping[str, str | Path], writer: HDF5FeatureWriter) -> tuple[list[tuple[str, Path]], int]:
    """(id, file) to encode: ids not in ``writer`` and ids whose image changed; and how many changed.

    A file that stat cannot see is encoded when its id is new (and fails there) and keeps its
    stored features otherwise. Touched but identical files get their new stat recorded.
    """
    todo, changed, touched, gone = [], 0, [], 0
    for id, source in images.items():
        path = source if isinstance(source, EmbeddedImage) else Path(source)  # (a picture inside a dataset file)
        if id not in writer:
            todo.append((id, path))
        elif file_stat(path) is None:
            gone += 1
        else:
            try:
                same, now = is_unchanged(writer.fingerprint(id), path)
            except DataError:  # unreadable now: encoding it fails (or skips) as for any bad image
                same, now = False, writer.fingerprint(id)
            if not same:
                todo.append((id, path))
                changed += 1
            elif now != writer.fingerprint(id):
                touched.append((id, now))
    if touched:
        writer.set_fingerprints([id for id, _ in touched], [fp for _, fp in touched])
    if gone:
        logger.warning("%d images already in %s are not on disk; their stored features are kept", gone, writer.path)
    if changed:
        logger.info("%d images in %s changed since they were encoded (or have no fingerprint): encoding them again",
                    changed, writer.path)
    return todo, changed


def _batches(items: list[tuple[str, Path]], batch_size: int, encoder: ImageEncoder, on_error: str,
             num_workers: int) -> Iterator[_Batch]:
    """Loaded batches in order; ``num_workers`` threads keep up to ``num_workers + 1`` ahead."""
    chunks = [items[i: i + batch_size] for i in range(0, len(items), batch_size)]
    if num_workers == 0:
        for chunk in chunks:
            yield _load_batch(chunk, encoder, on_error)
        return
    with ThreadPoolExecutor(num_workers, thread_name_prefix="rlcap-load") as pool:
        pending: deque[Future[_Batch]] = deque()
        next_chunk = 0
        try:
            while next_chunk < len(chunks) or pending:
                while next_chunk < len(chunks) and len(pending) <= num_workers:
                    pending.append(pool.submit(_load_batch, chunks[next_chunk], encoder, on_error))
                    next_chunk += 1
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()


def write_rows(writer: HDF5FeatureWriter, ids: list[str], fc: np.ndarray, att: np.ndarray,
               counts: np.ndarray | None = None, fingerprints: Sequence[ImageFingerprint] | None = None) -> None:
    """``writer.write`` (rows of ids already there replaced); a write that fails (a full disk) ends
    the run in one line saying that the rows written before are kept and how to resume."""
    try:
        writer.write(ids, fc, att, counts, fingerprints=fingerprints, replace=True)
    except (OSError, WriteError) as exc:
        line = str(exc) if isinstance(exc, WriteError) else str(write_error(writer.path, exc))
        raise WriteError(f"{line}; the {len(writer)} rows written before are kept: make room, then run the same "
                         f"command again to resume") from None


def encoder_location(name: str) -> dict[str, str]:
    """Where an ``hf:`` encoder was read from, noted in the store (not compared: the same model may move;
    its weights' digest is compared), so that ``rlcap caption`` can encode images as the store's were."""
    return {"encoder_path": str(Path(name[len(HF_PREFIX):]).expanduser().resolve())} if name.startswith(HF_PREFIX) \
        else {}


def check_batching(path: str | Path, recorded: Mapping[str, object], now: Mapping[str, object]) -> None:
    """Refuse to add rows to a store written in batches of another size, or on another kind of device, where
    its rows could differ. On the CPU the rows do not depend on the batch size (the encoder gives every
    batch size the same rows bit for bit: :meth:`EfficientNetLite0Encoder.encode`), so another size is
    taken there; on a GPU, where cuDNN picks kernels by shape and this was not measured, it is not, nor
    rows of another device.
    A store that records neither (written before rlcap did) is not checked."""
    now = {key: now[key] for key in ("batch_size", "device")}
    was = {key: recorded.get(key) for key in now}
    if None in was.values() or was == dict(now):
        return
    if was["device"] != now["device"] or now["device"] != "cpu":
        raise DataError(f"{path} was written in batches of {was['batch_size']} on {was['device']}, and this run "
                        f"encodes batches of {now['batch_size']} on {now['device']}: on a GPU, or across devices, "
                        f"their rows may differ in their last bits; give --batch-size {was['batch_size']} "
                        f"--device {was['device']} to continue it, or write to another file")


def extract_features(
    images: Mapping[str, str | Path],
    out: str | Path,
    image_size: int | None = None,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
    on_error: str = "raise",
    num_workers: int = 1,
    dtype: str = "float16",
    device: str = "auto",
    encoder: str = DEFAULT_ENCODER,
) -> ExtractStats:
    """Encode ``images`` (id -> file) with a frozen encoder into the HDF5 file ``out``: ``encoder`` is
    ``efficientnet-lite0`` (at ``image_size``, default 224) or ``hf:DIR`` (:mod:`rlcap.encoders.load`).

    Ids already in ``out`` are skipped (resume) unless their image changed since it was encoded,
    which encodes them again in place (see the module docstring). ``progress(n)`` is called with
    the number of images handled since the last call (done earlier, encoded or failed), e.g.
    ``tqdm.update``.
    ``on_error``: ``"raise"`` stops at the first unreadable image (batches before it are kept);
    ``"skip"`` logs it, leaves it out, lists it in ``ExtractStats.failed`` and records it in the store as skipped
    (:meth:`HDF5FeatureWriter.record_skipped`).
    ``device``: where the encoder runs (auto: CUDA when torch sees it, else the CPU).
    """
    if on_error not in ON_ERROR:
        raise ConfigError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
    if batch_size < 1 or num_workers < 0:
        raise ConfigError(f"batch_size must be >= 1 and num_workers >= 0, got {batch_size}, {num_workers}")
    if image_size is not None:
        check_image_size(image_size)
    where = resolve_device(device, "--device")
    started = time.perf_counter()
    check_writable(Path(out).parent, folder=True)  # before the encoder is loaded
    model = load_encoder(encoder, image_size, where)  # (a bad name or folder: before the store is touched)
    noted = {"batch_size": batch_size, "device": where.type, **encoder_location(encoder)}
    stats = ExtractStats()
    with HDF5FeatureWriter(out, model.fc_dim, model.att_dim, model.regions, dtype=dtype, attrs=model.records(),
                           noted=noted) as writer:
        check_batching(out, writer.recorded, noted)
        todo, stats.changed = _todo(images, writer)
        stats.already_done = len(images) - len(todo)
        if stats.already_done and progress:
            progress(stats.already_done)
        logger.info("%d images to encode, %d already in %s", len(todo), stats.already_done, out)
        if todo:
            for batch in _batches(todo, batch_size, model, on_error, num_workers):
                for id, reason in batch.failed:
                    logger.warning("skipped %s: %s", id, reason)
                if batch.failed:  # recorded in the store: a run leaves them out, saying so
                    writer.record_skipped(batch.failed)
                stats.failed.extend(batch.failed)
                if batch.pixels is not None:
                    pixels = torch.from_numpy(batch.pixels)
                    fc, att, counts = model.features_with_counts(pixels) if isinstance(model, CountsRegions) \
                        else (*model.features(pixels), None)  # (a vision-language model: tokens per picture vary)
                    write_rows(writer, batch.ids, fc.cpu().numpy(), att.cpu().numpy(),
                               None if counts is None else counts.cpu().numpy(), fingerprints=batch.fingerprints)
                    stats.encoded += len(batch.ids)
                if progress:
                    progress(len(batch.ids) + len(batch.failed))
    stats.seconds = time.perf_counter() - started
    logger.info("encoded %d images in %.1fs (%.1f/s), %d failed",
                stats.encoded, stats.seconds, stats.images_per_second, len(stats.failed))
    return stats
