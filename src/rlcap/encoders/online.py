"""Image tokens computed from the pictures at every batch, by the transformers policy's own processor and image side:
what a run reads when it has no feature store (``data.features`` unset, ``data.images`` the pictures' folder).

:class:`OnlineFeatures` answers a split's feature reads as :class:`rlcap.data.split_features.SplitFeatures` answers
them from a store (``rows``, ``read`` on the loader's read-ahead thread, ``as_float`` on the thread that trains), so
every method, decoder and reward reads the same :class:`~rlcap.data.feats.Feats`. The encoder is the one
``rlcap features --encoder hf:DIR`` writes the store with (:func:`rlcap.encoders.load.load_encoder` on the policy's
folder), so a picture's tokens are the store's, to the store's precision (a float32 store: equal to float rounding,
tests/encoders/test_online_features.py); its records (encoder, tower digest, processor settings, fc layout) are the
ones a store of it keeps, which the policy checks as it checks a store's.

Where the work runs:

* the **read-ahead thread** (the loader's, one batch ahead of the step) decodes the pictures and runs the model's
  processor on them as decoded (the encoder's ``host``: a captioner's image processor, resized, normalised pixels;
  a vision-language model's processor, its tiles, grid and pixels for each size of picture), or has
  ``data.workers`` processes do it (rlcap.encoders.host_workers: for machines with cores to spare);
* the **training thread** runs the image side once per picture of the batch, never once per sample or beam (the
  policy repeats each picture's tokens for its rows, as it does with stored ones), under ``no_grad``: the tower is
  frozen, as with a store.

A policy that trains its image side (``model.train_vision``: ``pixels``) runs it itself, in its own forward and
with autograd: the training thread then hands it the processor's outputs, each picture's in a row of
``Feats.pixels`` (:class:`GivesPixels`, :mod:`rlcap.encoders.pixel_rows`), and no tokens. A reward's image bank
(:meth:`OnlineFeatures.everything`) still reads tokens, those of the folder's image side as it starts.

A frozen image side is held once a process: the policy keeps the encoder's aside for its export instead of its own
copy of the same weights (:func:`rlcap.models.base.share_image_side`, where a session or an evaluation builds
the policy).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import torch

from rlcap.data.embedded import EmbeddedImage
from rlcap.data.feats import Feats
from rlcap.encoders.host_workers import HostSide, HostWorkers
from rlcap.encoders.load import CountsRegions, ImageEncoder
from rlcap.errors import DataError

ENCODER_RECORDS = ("encoder", "encoder_path", "tower_weights", "fc_layout", "preprocessing")  # SplitFeatures.encoder's
ENCODE_ROWS = 16  # pictures a pass when every row is asked for at once (:meth:`OnlineFeatures.everything`)


@runtime_checkable
class ProcessesOnHost(Protocol):
    """An encoder whose host part (a vision-language model's processor: tiles, grids) runs apart from its image
    side: ``on_host`` on the loader's read-ahead thread, ``from_host`` on the training thread."""

    def on_host(self, prepared: torch.Tensor) -> Any: ...

    def from_host(self, host: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class RunsInWorkers(Protocol):
    """An encoder whose host part (``host``: decoded pictures -> what its image side reads) can run in a worker process
    (a transformers image side's): ``worker_side`` is a picklable function that builds it there
    (:class:`rlcap.encoders.host_workers.HostSide`, its processor loaded from the folder, never its model)."""

    def host(self, pictures: list[Any]) -> Any: ...

    def worker_side(self) -> Callable[[], HostSide]: ...


@runtime_checkable
class GivesPixels(Protocol):
    """An encoder that can hand a batch's processor outputs instead of its tokens, to a policy that runs the image
    side itself (:meth:`rlcap.encoders.hf_vlm.HFVLMEncoder.pixel_feats`)."""

    def pixel_feats(self, host: Any) -> Feats: ...


class Read(NamedTuple):
    """A batch's pictures read ahead: the batch's ``n`` images, the ``rows`` of them read, what the encoder's host
    part made of those rows' pictures."""

    n: int
    rows: slice
    host: Any


class OnlineFeatures:
    """The features of a split's pictures (``pictures``: id -> file, or a picture a datasets dataset holds), encoded
    by ``encoder`` when a batch asks for them (module docstring); ``pixels``: the processor's outputs instead, for a
    policy that trains its image side."""

    in_memory = False  # (each batch's rows read when asked for, one batch ahead: the loader's read-ahead thread)

    def __init__(self, pictures: Mapping[str, Path | EmbeddedImage], ids: Sequence[str], encoder: ImageEncoder,
                 folder: str | Path, pixels: bool = False, workers: int = 0):
        missing = [i for i in ids if i not in pictures]
        if missing:
            raise DataError(f"image {missing[0]!r} has no picture to encode ({len(missing)} of {len(ids)})")
        self.ids = list(ids)
        self.pictures = [pictures[i] for i in self.ids]
        gone = [p for p in self.pictures if not isinstance(p, EmbeddedImage) and not Path(p).is_file()]
        if gone:  # (at start: not at the batch that reads it, epochs later)
            raise DataError(f"{gone[0]} not found ({len(gone)} of {len(self.ids)} pictures missing): give "
                            "data.images=DIR, the folder the dataset's file names are relative to")
        self.image_encoder = encoder
        if pixels and not (isinstance(encoder, GivesPixels) and isinstance(encoder, ProcessesOnHost)):
            raise DataError(f"{folder}: its image side cannot be handed pixels to train (model.train_vision), as "
                            "only a vision-language model's can: leave model.train_vision=frozen")
        self.pixels = pixels
        self.fc_dim, self.att_dim = encoder.fc_dim, encoder.att_dim
        self.image_size: int | None = encoder.image_size
        # what a store of this encoder records, read by the policy's store check and kept in the checkpoint
        records = {**encoder.records(), "encoder_path": str(Path(folder).expanduser().resolve())}
        self.encoder = {k: str(v) for k, v in records.items() if k in ENCODER_RECORDS}
        self._share: Callable[[int], slice] | None = None  # (:meth:`read_shares`)
        # the host part (decoding, processor): here, or for a training batch's read in ``workers`` processes
        self._ahead = HostWorkers(encoder.worker_side(), workers) \
            if workers > 0 and isinstance(encoder, RunsInWorkers) else None

    def __len__(self) -> int:
        return len(self.ids)

    def read_shares(self, share: Callable[[int], slice]) -> None:
        """From now on, a training batch's read (:meth:`read`) computes only the rows ``share(n)`` of a batch of
        ``n`` (this process's under torchrun: rlcap.train.optimizer.own_share); the others are zeros, never read."""
        self._share = share

    def rows(self, index: torch.Tensor) -> Feats:
        """Features of rows ``index`` (B,) in float32, on the encoder's device: every row (validation, evaluation)."""
        return self.as_float(self._prepared(index, slice(0, len(index)), self._here))

    def read(self, index: torch.Tensor) -> Read:
        """A training batch's rows ``index`` read ahead (the loader's thread): this process's share of them
        (:meth:`read_shares`; all of them by default) decoded and through the processor, in the worker processes
        when there are (``workers``: rlcap.encoders.host_workers)."""
        rows = self._share(len(index)) if self._share is not None else slice(0, len(index))
        return self._prepared(index, rows, self._ahead or self._here)

    def _here(self, pictures: list[Any]) -> Any:
        """The host part on this thread, the encoder's own (``host``, what a worker builds as it: HostWorkers)."""
        encoder = self.image_encoder
        read = encoder.host if isinstance(encoder, RunsInWorkers) else functools.partial(_prepare_and_on_host, encoder)
        return HostSide(read, encoder.image_size)(pictures)

    def _prepared(self, index: torch.Tensor, rows: slice, host: Callable[[list[Any]], Any]) -> Read:
        """Rows ``index[rows]``'s pictures decoded and prepared for the encoder, and through a vision-language
        model's processor (:class:`ProcessesOnHost`), by ``host`` (a :class:`HostSide` or its workers)."""
        return Read(len(index), rows, host([self.pictures[i] for i in index[rows].tolist()]))

    def as_float(self, read: Read) -> Feats:
        """The float32 features of :meth:`read`'s pictures: the image side run once per picture of its rows (with
        ``pixels``, the processor's outputs for the policy to run it), the batch's other rows zero (a process's
        share: what :meth:`Batch.shard` keeps)."""
        if self.pixels and isinstance(self.image_encoder, GivesPixels):
            part = self.image_encoder.pixel_feats(read.host)
        else:
            part = self.tokens(read.host)
        if read.rows == slice(0, read.n):
            return part
        return Feats(*(None if t is None else _placed(t, read) for t in part))

    @torch.no_grad()
    def tokens(self, host: Any) -> Feats:
        """The float32 image tokens of the pictures ``host`` holds (:class:`Read`'s), the frozen image side run
        once per picture."""
        if isinstance(self.image_encoder, ProcessesOnHost):
            fc, att, counts = self.image_encoder.from_host(host)
        elif isinstance(self.image_encoder, CountsRegions):
            fc, att, counts = self.image_encoder.features_with_counts(host)
        else:
            fc, att = self.image_encoder.features(host)
            counts = torch.full((att.shape[0],), att.shape[1], device=att.device)
        mask = torch.arange(att.shape[1], device=att.device)[None, :] < counts[:, None]
        return Feats(fc.float(), att.float(), mask)

    def check_all(self, limit: int = 0) -> None:
        """Nothing to read ahead of time: each picture is checked where it is decoded (the files' presence was
        checked at start)."""

    def everything(self) -> Feats:
        """Every row at once (what a reward's image bank reads), encoded now, a few pictures a pass."""
        parts = [self.tokens(self._prepared(index, slice(0, len(index)), self._here).host)
                 for index in (torch.arange(start, min(start + ENCODE_ROWS, len(self)))
                               for start in range(0, len(self), ENCODE_ROWS))]
        width = max(p.att.shape[1] for p in parts)
        pad = [Feats(p.fc, torch.nn.functional.pad(p.att, (0, 0, 0, width - p.att.shape[1])),
                     torch.nn.functional.pad(p.att_mask, (0, width - p.att_mask.shape[1]))) for p in parts]
        return Feats(*(torch.cat([getattr(p, f) for p in pad]) for f in ("fc", "att", "att_mask")))


def _prepare_and_on_host(encoder: ImageEncoder, images: list[Any]) -> Any:
    """An encoder's host part without ``host`` of its own: its ``prepare``, then a ``ProcessesOnHost``'s ``on_host``."""
    prepared = torch.from_numpy(encoder.prepare(images))
    return encoder.on_host(prepared) if isinstance(encoder, ProcessesOnHost) else prepared


def _placed(part: torch.Tensor, read: Read) -> torch.Tensor:
    """``part`` (rows of ``read.rows``) in a batch of ``read.n`` rows, the others zero."""
    whole = part.new_zeros(read.n, *part.shape[1:])
    whole[read.rows] = part
    return whole
