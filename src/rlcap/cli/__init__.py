"""The ``rlcap`` command: a thin argparse layer over :mod:`rlcap.api`.

Each subcommand lives in its own module of this package and exposes
``add_parser(subparsers) -> argparse.ArgumentParser`` whose parser sets ``func=run`` with
``run(args) -> int``. This package is the only place in rlcap that prints; an
:class:`~rlcap.errors.RlcapError` becomes one line on stderr and exit code 2, and so does an
argument error (:mod:`rlcap.cli.options`). Log lines go to stderr; on a terminal they are
written above any progress bar rather than into it, and elsewhere no bar is drawn
(:mod:`rlcap.progress`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from rlcap.cli.options import CommandParser
from rlcap.errors import RlcapError

# name -> module under rlcap.cli. A plain dict, imported lazily so that `rlcap score`
# never imports torch.
SUBCOMMANDS: dict[str, str] = {
    "data": "rlcap.cli.data",
    "features": "rlcap.cli.features",
    "train": "rlcap.cli.train",
    "eval": "rlcap.cli.evaluation",
    "caption": "rlcap.cli.caption",
    "score": "rlcap.cli.score",
    "demo": "rlcap.cli.demo",
    "bench": "rlcap.cli.bench",
    "retrieval": "rlcap.cli.retrieval",
    "diagnose": "rlcap.cli.diagnose",
    "report": "rlcap.cli.report",
    "hf-captioner": "rlcap.cli.hf_captioner",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = CommandParser(prog="rlcap", description="rlcap: reinforcement learning for image and video captioning.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.set_defaults(func=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    # Only the chosen subcommand's module is imported (keeps `score` free of torch).
    wanted = [a for a in (argv or []) if not a.startswith("-")][:1]
    for name, module_name in SUBCOMMANDS.items():
        if wanted and wanted[0] in SUBCOMMANDS and name != wanted[0]:
            sub.add_parser(name, help=f"see `rlcap {name} --help`")
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("rlcap.cli."):
                continue  # subcommand not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or an argument error, already printed as one line (2)
        return exc.code if isinstance(exc.code, int) else 2
    rank = _launched_rank()  # under torchrun, the other ranks log warnings and errors only (--verbose: all)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO if rank == 0 else logging.WARNING,
        format="%(asctime)s %(levelname)s " + (f"[rank {rank}] " if rank else "") + "%(name)s: %(message)s",
        datefmt="%H:%M:%S",
        handlers=[_BarSafeHandler()],
    )
    if args.func is None:
        parser.print_help()
        return 2
    marked = f"[rank {rank}] " if rank else ""  # under torchrun, which process says it
    try:
        return int(args.func(args) or 0)
    except RlcapError as exc:
        print(f"rlcap {args.command}: {marked}error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rlcap {args.command}: {marked}interrupted", file=sys.stderr)
        return 130


def _launched_rank() -> int:
    """torchrun's rank of this process (0 without torchrun), without importing torch when there is none."""
    if "RANK" not in os.environ:  # torchrun's launch setting: which rank's log lines these are
        return 0
    from rlcap.distributed import launched_rank

    return launched_rank()


class _BarSafeHandler(logging.StreamHandler):
    """Log records on stderr; while a tqdm bar is drawn, above it (``tqdm.write``) instead of inside it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        if not self.stream.isatty():
            super().emit(record)
            return
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
        except RecursionError:
            raise
        except Exception:  # what logging.StreamHandler.emit does: report, never raise
            self.handleError(record)


if __name__ == "__main__":
    sys.exit(main())
