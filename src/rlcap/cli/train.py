"""``rlcap train CONFIG [key=value ...]``: run a training recipe."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlcap import api
from rlcap.command_options import OPTION_HELP, command_options
from rlcap.cli.stopping import how_stopped, sigterm_as_interrupt, signal_outcome
from rlcap.config import describe
from rlcap.errors import Stopped
from rlcap.train.checkpoint import check_strategy, check_world_size
from rlcap.distributed import launched_rank, launched_world, stop_at_step_boundary
from rlcap.run_config import metric_label

if TYPE_CHECKING:
    from rlcap.train.session import TrainResult


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("train", help="train a captioner from a YAML recipe",
                       description="Train from a YAML recipe in configs/, with key=value overrides "
                                   "(e.g. model.hidden_dim=256). Three options of the command, given the same way, "
                                   "are not settings of the run: resume=true (continue the run in out_dir with "
                                   "changed settings), overwrite=true (replace it) and nproc=N (start N processes "
                                   "with torchrun).")
    p.add_argument("config", nargs="?", help="YAML recipe")
    p.add_argument("overrides", nargs="*", help="key=value overrides, dotted for sections; resume=, overwrite=, nproc=")
    p.add_argument("--help-config", action="store_true",
                   help="list the config keys of a method (give algorithm=NAME, or a recipe; default xe) with their "
                        "defaults and help")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.help_config:
        return _help_config(args)
    if args.config is None:
        print("rlcap train: error: give a YAML recipe (see configs/) or --help-config", file=sys.stderr)
        return 2
    options, overrides = command_options(args.overrides)
    if options.nproc > 1 and "WORLD_SIZE" not in os.environ:  # torchrun's: not yet started by it, start it
        cfg = api.load_run_config(args.config, overrides)  # a bad recipe is refused here, not N times by the ranks
        cfg.check_processes(options.nproc)  # so is a batch of fewer images than processes
        if not options.overwrite:
            check_world_size(cfg.out_dir, options.nproc)  # so is a run of another number of processes
            check_strategy(Path(cfg.out_dir) / "last", cfg.distributed.strategy)  # or of another strategy
        return _torchrun(options.nproc, args, [o for o in args.overrides if not o.startswith("nproc=")], cfg.out_dir)
    cfg = api.load_run_config(args.config, overrides)
    rank = launched_rank()
    under_torchrun = "WORLD_SIZE" in os.environ  # one of torchrun's processes: every rank stops after the same step
    stops = (signal.SIGINT, signal.SIGTERM, FROM_LAUNCHER) if under_torchrun else ()
    previous = {signum: signal.signal(signum, stop_at_step_boundary) for signum in stops}
    try:
        with sigterm_as_interrupt() if not under_torchrun else contextlib.nullcontext():  # as Ctrl-C
            result = api.train(cfg, resume=options.resume, overwrite=options.overwrite)
    except KeyboardInterrupt as exc:
        if isinstance(exc, Stopped) and exc.signum == FROM_LAUNCHER:
            return 0  # `rlcap train ... nproc=N` stopped its processes, and says so
        how, code = how_stopped(exc)
        if rank == 0:
            print(_stopped(args, cfg.out_dir, how), file=sys.stderr)
        return code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if rank == 0:
        print(f"done: {result.steps} steps, {best_line(result)}, run folder {result.out_dir}")
    return 0


FROM_LAUNCHER = signal.SIGUSR1  # what `rlcap train ... nproc=N` sends its processes to stop them
GRACE = 5.0  # seconds the processes have to reach a step boundary before they are killed


def _torchrun(nproc: int, args: argparse.Namespace, overrides: list[str], out_dir: str) -> int:
    """Start ``nproc`` processes on this machine with torchrun (``--standalone``), each running this command
    without ``nproc``; the same as typing ``torchrun --standalone --nproc-per-node N -m rlcap train ...``.

    torchrun runs in a session of its own, so that Ctrl-C reaches this process alone. SIGINT or SIGTERM
    here is passed on to the training processes (:data:`FROM_LAUNCHER`): each stops after the same step
    (torchrun, whose processes then end without error, ends quietly), and any still running after
    :data:`GRACE` seconds, or at a second signal, is killed with torchrun; this process then says where
    the run stopped and how to continue it, as a run in one process does."""
    import subprocess
    import time

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "-m", "rlcap", "train", args.config, *overrides]
    print(f"starting {nproc} processes: torchrun --standalone --nproc-per-node {nproc} -m rlcap train "
          f"{shlex.join([args.config, *overrides])}", file=sys.stderr)
    launcher = subprocess.Popen(command, start_new_session=True)
    received: list[tuple[int, float]] = []

    def stop(signum: int, frame: object) -> None:
        received.append((signum, time.monotonic()))
        if len(received) == 1:
            _signal_workers(launcher.pid, FROM_LAUNCHER)
        else:
            _kill_session(launcher.pid)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            try:
                code = launcher.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if received and time.monotonic() - received[0][1] > GRACE:
                    _kill_session(launcher.pid)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not received:
        return code
    how, code = signal_outcome(received[0][0])
    print(_stopped(args, out_dir, how), file=sys.stderr)
    return code


def _signal_workers(launcher: int, signum: int) -> None:
    """Send ``signum`` to torchrun's own processes (the ranks; not their children, e.g. METEOR's Java);
    where their parent cannot be read (no /proc), to torchrun's whole session, which it passes on."""
    import os

    proc = Path("/proc")
    if not proc.is_dir():
        _kill_session(launcher, signal.SIGTERM)
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == launcher:
                os.kill(int(entry.name), signum)
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not readable
            continue


def _kill_session(launcher: int, signum: int = signal.SIGKILL) -> None:
    """``signum`` to torchrun and every process it started (their session is torchrun's)."""
    try:
        os.killpg(launcher, signum)
    except ProcessLookupError:
        pass


def _help_config(args: argparse.Namespace) -> int:
    """The keys of the method a recipe or ``algorithm=NAME`` names: the shared ones and its own. A method
    that continues an XE model is shown as it runs, with ``init_from`` (the checkpoint then gives the
    architecture and the vocabulary)."""
    from rlcap.methods import METHODS, load_run_config

    recipe, overrides = args.config, list(args.overrides)
    if recipe is not None and "=" in recipe and not Path(recipe).exists():  # `--help-config algorithm=scst`
        recipe, overrides = None, [recipe, *overrides]
    overrides = command_options(overrides)[1]
    cfg = load_run_config(recipe, overrides)
    algorithm = cfg.algorithm
    method = METHODS[algorithm]
    print(f"algorithm={algorithm}: {method.help}" if method.help else f"algorithm={algorithm}")
    view = cfg.as_typically_run()
    rows = describe(method.config)
    shown = [row for row in rows if view.reads(row[0])]
    for key, default, text in shown:
        print(f"{key:28s} {default:24s} {view.key_help(key, text)}")
    print(f"\n{len(shown)} keys", end="")
    if view is not cfg:
        scratch = [row[0] for row in rows if row not in shown and cfg.reads(row[0])]
        print(f", for a run from an XE checkpoint (init_from), as {algorithm} is meant to run; without init_from "
              f"(from random weights) it also reads {', '.join(scratch)}", end="")
    unread = [row[0] for row in rows if row not in shown and not cfg.reads(row[0])]
    if unread:
        print(f"; not shown, as this run does not read them: {', '.join(unread)} "
              "(other model.arch, data.format or data.dataset, reward.weights, algorithm, init_from or "
              "scst.baseline)", end="")
    print("\n\noptions of the command, not settings of the run: " + "; ".join(
        f"{key}=... {text}" for key, text in OPTION_HELP.items()))
    print(f"\nother methods (algorithm=NAME --help-config lists their keys): "
          f"{', '.join(name for name in METHODS if name != algorithm)}")
    return 0


def best_line(result: TrainResult) -> str:
    """The best validation score and what it is a value of (val.metric; the embedding's mean_R, the critic's F1)."""
    label = metric_label(result.best_metric)
    if not math.isfinite(result.best_score):
        return f"not validated yet (best/ is kept by val {label})"
    return f"best val {label} {result.best_score:.4f}"


def _stopped(args: argparse.Namespace, out_dir: str, how: str) -> str:
    """One line: where the run stopped and the command that continues it."""
    from rlcap.train.checkpoint import last_checkpoint_line

    overrides = [o for o in args.overrides if not o.startswith(("resume=", "overwrite="))]
    world, local = launched_world()
    if world > 1 and not any(o.startswith("nproc=") for o in overrides):  # a rank of torchrun started by hand
        if world != local:  # several machines: torchrun again on each (a run is resumed by as many processes)
            command = shlex.join(["torchrun", f"--nnodes={world // local}", f"--nproc-per-node={local}", "-m",
                                  "rlcap", "train", args.config, *overrides, "resume=true"])
            return (f"rlcap train: {how}; {last_checkpoint_line(out_dir)}. Continue on each of its {world // local} "
                    f"machines, with the rendezvous options it was started with: {command}")
        overrides.append(f"nproc={world}")  # as many processes on this machine: torchrun started for you
    command = shlex.join(["rlcap", "train", args.config, *overrides, "resume=true"])
    return f"rlcap train: {how}; {last_checkpoint_line(out_dir)}. Continue with: {command}"
