"""What every reader of a transformers model folder shares (the captioner's text codec in ``data/``, the image
encoders in ``encoders/``, the captioners in ``models/``): importing transformers, an optional dependency, with
the one line that says how to install it; its progress bars off while rlcap loads or saves; and a model's
weights read from a local folder (nothing is downloaded). It imports no other rlcap package than ``errors``, so
that each of them can import it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcap.errors import RlcapError


def import_transformers(what: str = "a transformers model") -> Any:
    """The transformers module; ``what`` (the thing that needs it) named in the error when it is not installed."""
    try:
        import transformers
    except ImportError as exc:
        raise RlcapError(f"{what} needs transformers: pip install 'rlcap[hf]'") from exc
    return transformers


@contextmanager
def no_bars(transformers: Any) -> Iterator[None]:
    """transformers' progress bars (loading and saving weights: not rlcap's progress) off, as they were after."""
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()


def load_weights_of(model_class: Any, folder: Path, dtype: Any = None) -> Any:
    """``model_class.from_pretrained(folder)`` (local files only; ``dtype``: its weights in that torch dtype, None:
    as transformers loads them), a weights file that cannot be read (a truncated download or copy) refused in one
    line."""
    from safetensors import SafetensorError

    try:
        if dtype is not None:
            return model_class.from_pretrained(folder, local_files_only=True, dtype=dtype)
        return model_class.from_pretrained(folder, local_files_only=True)
    except (SafetensorError, OSError, ValueError, KeyError) as exc:
        raise RlcapError(f"{folder}: its weights cannot be read ({exc.__class__.__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); a truncated download or copy? copy the "
                         "folder again") from None
