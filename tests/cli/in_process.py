"""``rlcap ARGV`` run in-process, as the CLI tests run it."""

from __future__ import annotations

from rlcap.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``rlcap ARGV`` in-process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err
