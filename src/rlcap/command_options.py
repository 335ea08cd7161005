"""What ``rlcap train`` does with the run folder and processes, given among its ``key=value`` overrides but not
settings of the run (no recipe or config.json holds them): one definition, read by the CLI and by
:func:`rlcap.methods.registry.load_run_config` (which refuses them with a line saying where they belong).
Light to import: the CLI's start-up reads it."""

from __future__ import annotations

from typing import NamedTuple

from rlcap.errors import ConfigError


class CommandOptions(NamedTuple):
    """What ``rlcap train`` does, given among the overrides but not settings of the run."""

    nproc: int = 1           # processes to start with torchrun
    resume: bool = False     # continue the run in out_dir, applying changed settings (api.train)
    overwrite: bool = False  # replace the run in out_dir (api.train)


# what each option does, as --help-config and docs/CONFIG.md say it
OPTION_HELP = {"resume": "continue the run in out_dir, applying changed settings that a run may change",
               "overwrite": "replace a run already in out_dir",
               "nproc": "start this many processes with torchrun; rlcap train only"}


def command_options(overrides: list[str]) -> tuple[CommandOptions, list[str]]:
    """``nproc=N``, ``resume=BOOL`` and ``overwrite=BOOL`` among the overrides (the last of each wins),
    and the other overrides: the run's settings."""
    given: dict[str, str] = {}
    rest = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and key in CommandOptions._fields:
            given[key] = value
        else:
            rest.append(override)
    nproc = given.get("nproc", "1")
    if not nproc.isdigit() or int(nproc) < 1:
        raise ConfigError(f"nproc: expected a whole number of processes >= 1, got {nproc!r}")
    flags = {}
    for key in ("resume", "overwrite"):
        value = given.get(key, "false").lower()
        if value not in ("true", "false"):
            raise ConfigError(f"{key}: expected true or false, got {given[key]!r}")
        flags[key] = value == "true"
    return CommandOptions(int(nproc), **flags), rest
