"""How every ``rlcap`` command reads its arguments: checked numbers, intermixed positionals and
argument errors as one line.

* Numeric options use the types made here (``type=int_range(1)``), so ``--beam-size 0`` fails as
  ``rlcap eval: error: argument --beam-size: expected an integer >= 1, got 0``.
* Subcommand parsers are :class:`CommandParser`: positionals may come anywhere among the options
  (``rlcap eval CKPT --split val data.features=x.h5``), as with ``parse_intermixed_args``; plain
  argparse stops filling positionals at the first option.
* An argument error is one line (``PROG: error: MESSAGE (see PROG --help)``), not the usage text.
* ``rlcap train``'s options given as overrides (``resume=true``, ``overwrite=true``, ``nproc=N``) are
  told from the run's settings by :func:`rlcap.command_options.command_options`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path



def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """argparse ``type``: an integer in ``low..high`` (no upper bound when ``high`` is None)."""
    allowed = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {value}")
        return value

    return parse


def float_range(low: float, high: float | None = None, include_low: bool = True, include_high: bool = False
                ) -> Callable[[str], float]:
    """argparse ``type``: a finite number from ``low`` (inclusive unless ``include_low`` is False) to ``high``
    (exclusive unless ``include_high``; no upper bound when ``high`` is None)."""
    if high is None:
        allowed = f"a number {'>=' if include_low else '>'} {low:g}"
    else:
        allowed = f"a number in {'[' if include_low else '('}{low:g}, {high:g}{']' if include_high else ')'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if (not math.isfinite(value) or value < low or (value == low and not include_low)
                or (high is not None and (value > high or (value == high and not include_high)))):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text}")
        return value

    return parse


def output_file(text: str) -> str:
    """argparse ``type``: a file to write, checked before any work: not a folder, in a folder that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; expected a file name (e.g. {path / 'captions.json'})")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {path.parent} does not exist; create it first")
    return text


def output_folder(text: str) -> str:
    """argparse ``type``: a folder to write files into (made when missing), checked before any work:
    not an existing file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; expected a folder (made when missing)")
    return text


# The numeric options several commands share.
BEAM_SIZE = int_range(1)
MAX_LEN_LIMIT = 512  # words; the longest caption any dataset here has is far shorter
MAX_LEN = int_range(1, MAX_LEN_LIMIT)
IMAGE_SIZE = int_range(32)  # the encoder needs at least a 1x1 feature grid
COUNT = int_range(1)


def threads_option(text: str) -> int | str:
    """argparse ``type`` of ``--threads``: ``auto`` (as a run's ``threads`` setting) or a count of at least 1."""
    if text == "auto":
        return text
    try:
        return COUNT(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected auto or an integer >= 1, got {text!r}") from None


def set_threads(threads: int | str) -> int:
    """torch's CPU threads for this command: a count, or ``auto`` resolved as a run resolves it (the cores this
    process may use less those other jobs keep busy: :func:`rlcap.devices.cpu_threads`); returns the count."""
    import torch

    from rlcap.devices import cpu_threads

    count = cpu_threads(threads)
    torch.set_num_threads(count)
    return count


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose positionals may follow options and whose errors are one line."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # parse_known_intermixed_args calls parse_known_args twice (options, then positionals);
        # a parser holding subcommands cannot be intermixed (argparse refuses), so it parses plainly.
        nested = any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions())
        if self._intermixing or nested:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    """``--device``, ``--threads``, ``--beam-size``, ``--max-len`` and ``--precision``, shared by ``rlcap eval`` and
    ``rlcap caption`` (decoding settings left out are the checkpoint's own)."""
    p.add_argument("--device", default="auto", help="where the model runs: auto (CUDA when torch sees it, else "
                                                    "the CPU), cpu, cuda, cuda:N or mps")
    p.add_argument("--threads", type=threads_option, default="auto",
                   help="torch CPU threads: a count, or auto (default, as a run's threads setting: the cores this "
                        "process may use less those other jobs keep busy)")
    p.add_argument("--beam-size", type=BEAM_SIZE, default=None,
                   help="beam size (1: greedy; default: the checkpoint's decode.beam_size)")
    p.add_argument("--max-len", type=MAX_LEN, default=None,
                   help=f"longest caption in words, 1 to {MAX_LEN_LIMIT} (default: the checkpoint's decode.max_len)")
    from rlcap.devices import PRECISIONS  # (here, not at the top: `rlcap score` imports this module without torch)

    p.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                   help="the forward passes' precision (default: the run's own `precision`, which its validation "
                        "decoded in, so that its scores are reproduced)")


def add_data_folder_arguments(p: argparse.ArgumentParser, data_default: str | None, data_help: str,
                              configs_help: str) -> None:
    """``--data``, ``--regenerate`` and ``--configs``, shared by ``rlcap bench`` and ``rlcap demo``."""
    p.add_argument("--data", default=data_default, help=f"{data_help}; a folder generated with other settings is "
                                                        "refused")
    p.add_argument("--regenerate", action="store_true",
                   help="generate the data over a --data folder generated with other settings (only the files "
                        "rlcap generated there are replaced)")
    p.add_argument("--configs", default=None,
                   help=f"{configs_help} (default: configs/ of the rlcap checkout the package runs from, else "
                        "./configs)")
