"""What every training loop shares: set-up, named parts, resume, epochs, steps and checkpoints.

Loops share these functions, not a base class. A :class:`Session` holds a run's live objects: its learned parts by
role name (``policy``, e.g. ``value``, ``discriminator``), each with its optimizer, in the run's precision
(:meth:`Session.module`); the loop's ``state``; :class:`Progress`. Every checkpoint holds it all: resuming is exact.

A loop with one part calls :func:`start_session`. A loop with more calls :func:`open_session`, adds its parts with
:func:`add_part`, then :func:`resume_or_start`, which restores everything when resuming. The run has started at
its first :func:`finish_step` (data, model and reward built and used once): only then is ``config.json`` written
and a run that ``overwrite=true`` replaces deleted (rlcap.train.run_folder); a loop failing before puts it back."""

from __future__ import annotations

import copy
import logging
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import torch
from tqdm.auto import tqdm

from rlcap.config import to_dict
from rlcap.data.loader import Batch, CaptionData, check_caption_lengths, load_data
from rlcap.decoding.options import Decoding
from rlcap.devices import (InPrecision, Precision, cpu_threads, grad_scaler, host_memory_policy,
                            release_freed_host_memory, resolve_device)
from rlcap.metrics.combined import parts_of
from rlcap.metrics import java
from rlcap.errors import ConfigError, RlcapError, Stopped
from rlcap.models import build_model, model_vocab, new_model
from rlcap.models.architectures import online_features
from rlcap.models.base import check_policy_fits, settle_aside
from rlcap.train.checkpoint import (POLICY, Checkpoint, check_strategy, check_world_size, is_complete,
                                   load_checkpoint, load_weights, own_model_path, relative_data_paths, rng_state,
                                   save_checkpoint, set_rng_state)
from rlcap.run_config import OptimConfig, RunConfig, metric_label
from rlcap.train.init_source import check_start, init_checkpoint, model_section
from rlcap.distributed import Ranks, from_main, gathered, join, stop_signal
from rlcap.train.logger import LossWatch, RunLogger, SilentLogger, Stats, check_finite_loss, diverged, read_stats
from rlcap.train.optimizer import (Part, apply_optim_settings, build_optimizer, load_shards, own_share,
                                   shard_parts, shared_out, write_shards)
from rlcap.train.run_folder import mark_started
from rlcap.train.validation import caption_table, validate as captioner_scores

log = logging.getLogger(__name__)


@dataclass
class Progress:
    epoch: int = 0              # epochs completed
    step_in_epoch: int = 0      # batches done in the current epoch
    step: int = 0               # optimizer steps in total
    best_score: float = float("-inf")
    best_metric: str = "CIDEr"  # what best_score is a value of (checkpoints without it: CIDEr-D)
    history: list[dict[str, Any]] = field(default_factory=list)  # validation results per epoch


@dataclass(frozen=True)
class Phase:
    """The epochs a loop runs now, entered by :func:`train_batches`: the main phase's (``name`` None, counted in the
    run's :class:`Progress`) or a pretraining phase's (counted in ``state[name]``, so a killed run resumes in it)."""

    name: str | None
    epochs: int

    def counter(self, state: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """The phase's ``{"epoch", "step_in_epoch"}``: the progress's fields (written through), or ``state[name]``."""
        return vars(progress) if self.name is None else state.setdefault(self.name, {"epoch": 0, "step_in_epoch": 0})


@dataclass
class Session:
    cfg: RunConfig
    data: CaptionData
    parts: dict[str, Part]
    progress: Progress
    out_dir: Path
    state: dict[str, Any] = field(default_factory=dict)  # loop state saved with every checkpoint
    logger: RunLogger | None = None
    source: Checkpoint | None = None   # the checkpoint resumed from (or initialised from)
    resuming: bool = False
    started: bool = False              # config.json written (:func:`run_started`)
    device: torch.device = torch.device("cpu")  # where every part, batch and reward of the run is
    ranks: Ranks = Ranks()                       # this process among torchrun's (rank 0 of 1 alone; shared_out)
    phase: Phase | None = None  # the phase the loop is in (entered by :func:`train_batches`); None: none yet
    watch: LossWatch = field(default_factory=LossWatch)
    precision: Precision = Precision()  # the forward passes' (``precision``): entered by the parts :meth:`module` gives
    decoding: Decoding = field(init=False)  # the run's (``decode``, on ``device``), built once: every decode reads it

    def __post_init__(self) -> None:
        self.decoding = Decoding.of_run(self.cfg.decode, self.device)

    @property
    def model(self) -> InPrecision:
        """The policy (the captioner every method trains), as :meth:`module` hands it out."""
        return self.module(POLICY)

    def module(self, name: str) -> InPrecision:
        """Part ``name``, its forward passes (and decodes) in the run's precision: a method never enters autocast."""
        return InPrecision(self.parts[name].module, self.precision)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.parts[POLICY].optimizer


def feature_dims(data: CaptionData) -> dict[str, Any]:
    s = next(iter(data.splits.values()))  # (a store's records, or those of the encoder that reads pictures online)
    return {"fc": s.fc_dim, "att": s.att_dim, "image_size": s.image_size, **s.features.encoder}


def open_session(cfg: RunConfig, splits: tuple[str, ...] = ("train", "val"), policy: bool = True) -> Session:
    """Data and the policy, initialised from ``init_from`` or the run's own last checkpoint when
    resuming; the trainer state is restored by :func:`resume_or_start`, after every part is added.
    ``policy=False``: no captioner (a loop that trains another model, e.g. the embedding of [Shi18]).
    The session holds its own copy of ``cfg`` (``session.cfg``), the model section taken from the
    checkpoint it starts from; a loop reads its settings there, and the caller's config is left as it was.
    The run folder is made ready by :func:`rlcap.api.train`; a complete ``OUT/last`` found then is resumed."""
    cfg = copy.deepcopy(cfg)
    device = resolve_device(cfg.device)  # a device this machine cannot use fails before any work
    torch.set_num_threads(cpu_threads(cfg.threads))
    if host_memory_policy(cfg.host_memory, cfg.distributed.strategy) == "release":  # (before any weight is read)
        release_freed_host_memory()
    ranks = join(device)
    cfg.check_processes(ranks.world)  # (torchrun started by hand: `rlcap train ... nproc=N` checks before it starts)
    out_dir = Path(cfg.out_dir)
    # the run folder is rank 0's, made ready by api.train (open_run_folder): the others read what it found
    if ranks.main:
        out_dir.mkdir(parents=True, exist_ok=True)
    resume = from_main(is_complete(out_dir / "last") if ranks.main else None, ranks)
    if ranks.main and not resume and (out_dir / "config.json").is_file():
        log.info("%s holds no checkpoint yet: starting fresh", out_dir / "last")
    ckpt = load_checkpoint(out_dir / "last") if resume else None
    init = init_checkpoint(cfg) if (cfg.init_from and not resume) else None
    source = ckpt or init
    if source is not None:
        cfg.model = model_section(cfg, source, init)
    torch.manual_seed(cfg.seed)
    data = load_data(cfg.data, splits, source.vocab if source else model_vocab(cfg.model),
                     own_share(online_features(cfg.model, cfg.data, device), ranks))
    if cfg.READS_CAPTIONS and "train" in data.splits:  # what data.max_len cuts: logged, or refused when most
        check_caption_lengths(data.splits["train"], cfg.data.max_len)
    if cfg.val.split in data.splits:  # out of core, a bad row would otherwise be found at the first validation
        data.splits[cfg.val.split].features.check_all(cfg.val.max_images)
    check_start(cfg, init, data)  # init_from made for this data? an RL loop without one warns
    dims = feature_dims(data)
    if ckpt is not None:
        check_world_size(out_dir, ranks.world)
    session = Session(cfg, data, {}, Progress(), out_dir, source=source, resuming=ckpt is not None,
                      device=device, ranks=ranks, precision=Precision(cfg.precision, device.type))
    if policy:
        model = (build_model(cfg.model, len(data.vocab), dims["fc"], dims["att"]) if source is not None
                 else new_model(cfg.model, data.vocab, dims["fc"], dims["att"]))  # (weights: add_part loads them)
        check_policy_fits(model, dims, str(cfg.data.features),
                          {"data.max_len": cfg.data.max_len, "decode.max_len": cfg.decode.max_len})
        add_part(session, POLICY, model, cfg.optim)
    return session


def add_part(session: Session, name: str, module: torch.nn.Module, optim: OptimConfig | None) -> Part:
    """Hold ``module`` under ``name`` (with an optimizer unless ``optim`` is None); its weights are the source's."""
    if name in session.parts:
        raise RlcapError(f"a part named {name!r} is already in the session")
    if (source := session.source) is not None and name in source.weights:
        load_weights(module, source.weights[name],
                     session.out_dir / "last" if session.resuming else session.cfg.init_from, name,
                     saved=source.config["model"])
    module.to(session.device)
    settle_aside(module, session.device, [split.features for split in session.data.splits.values()])
    part = Part(module)
    if optim is not None:
        part.optimizer, part.scheduler = build_optimizer(module.parameters(), optim)
        part.optim = optim
        part.scaler = grad_scaler(session.device, session.cfg.precision)
    session.parts[name] = part
    return part


def resume_or_start(session: Session, selects_by: str | None = None) -> Session:
    """Restore optimizers, schedules, random state, progress and loop state when resuming; open the log.
    ``selects_by``: the score a loop with its own validation keeps best/ by (e.g. the embedding's
    ``mean_R``); by default ``val.metric`` (:func:`selection_metric`)."""
    ckpt, strategy = session.source, session.cfg.distributed.strategy
    if session.resuming:
        check_strategy(session.out_dir / "last", strategy)
    if strategy == "fsdp2":  # (every part added: the KL reference copied before its policy was sharded)
        shard_parts(session, session.cfg.precision, session.cfg.distributed.decode_weights)
    if session.resuming and strategy == "fsdp2":
        load_shards(session.parts, session.out_dir / "last")
    if session.resuming and ckpt.trainer is not None:
        trainer = ckpt.trainer
        for name, part in session.parts.items():
            if part.optimizer is not None and name in trainer["schedulers"]:
                if not part.sharded:  # (a sharded part's state: its shards, loaded above)
                    part.optimizer.load_state_dict(trainer["optimizers"][name])
                part.scheduler.load_state_dict(trainer["schedulers"][name])
                apply_optim_settings(part)
            if part.scaler is not None and name in trainer.get("scalers", {}):
                part.scaler.load_state_dict(trainer["scalers"][name])
        by_rank = trainer.get("rng_of_ranks")  # (absent from single-process checkpoints of rlcap 0.1: one state)
        set_rng_state(by_rank[session.ranks.rank] if by_rank else trainer["rng"])
        session.progress = Progress(**trainer["progress"])
        session.state.update(trainer["state"])
        log.info("resumed %s at epoch %d, step %d", session.out_dir, session.progress.epoch, session.progress.step)
    if ckpt is not None:  # (its weights are the parts' now, its optimizer state the optimizers': not held twice)
        session.source = ckpt._replace(weights={}, trainer=None)
    session.progress.best_metric = selects_by or selection_metric(session)
    resume_step = session.progress.step if session.resuming else None
    session.logger = (RunLogger(session.out_dir, session.cfg.track, resume_step, to_dict(session.cfg))
                      if session.ranks.main else SilentLogger())
    return session


def run_started(session: Session) -> None:
    """Once a run is under way (its first step taken, so data, model and reward all work): write its
    ``config.json`` (a resume's changed settings are recorded only now) and delete the run that
    ``overwrite=true`` replaces. A run that fails before leaves the folder as it found it. A resumed run's
    model section stays the one its folder recorded (the session's is its checkpoint's, read from its hf/)."""
    if not session.started:
        if session.ranks.main:
            mark_started(session.out_dir, to_dict(session.cfg), resumed=session.resuming)
        session.started = True


def selection_metric(session: Session) -> str:
    """``val.metric``, except that a resumed run keeps the metric it has kept best/ by so far (CIDEr-D for a
    checkpoint that records none), since its best score is a value of that metric."""
    wanted = session.cfg.val.metric
    if session.resuming and session.progress.best_metric != wanted:
        kept = metric_label(session.progress.best_metric)
        log.warning("%s has kept best/ by validation %s: it goes on with %s (val.metric %s applies to a new run)",
                    session.out_dir, kept, kept, metric_label(wanted))
        session.cfg.val.metric = session.progress.best_metric  # so that config.json records what the run does
    if "METEOR" in parts_of(session.cfg.val.metric):  # METEOR, or combined from it: refused now, not after an epoch
        try:
            java.java_executable()
            java.packaged_jar("meteor/meteor-1.5.jar")
        except RlcapError as exc:
            raise ConfigError(f"val.metric {session.cfg.val.metric} needs METEOR: {exc}") from exc
    return session.cfg.val.metric


def start_session(cfg: RunConfig, splits: tuple[str, ...] = ("train", "val")) -> Session:
    """:func:`open_session` then :func:`resume_or_start`: the set-up of a loop whose only part is the policy."""
    return resume_or_start(open_session(cfg, splits))


def save(session: Session, name: str, metrics: dict[str, float] | None = None) -> Path:
    """Write checkpoint ``out_dir/name`` with every part (``last`` also resumes the run)."""
    check_finite_loss(session.watch, session.cfg, session.out_dir)  # (never a checkpoint a non-finite loss broke)
    rng_of_ranks = gathered(rng_state(), session.ranks)  # every rank's generators (a collective: all ranks save)
    folder = session.out_dir / name
    tmp, whole = write_shards(session.parts, folder, session.ranks)  # FSDP2: every rank its shards, rank 0 the whole
    try:
        if not session.ranks.main:  # rank 0 writes the run's checkpoints (the others join its gathers: finally)
            return folder
        config = {**to_dict(session.cfg), "feature_dims": feature_dims(session.data), "paths_relative_to": "checkpoint"}
        config["data"], config["data_size"] = relative_data_paths(config["data"], folder), session.data.sizes()
        config = own_model_path(config)  # an hf policy: from the checkpoint's own hf/, wherever the command runs
        trained = {name: part for name, part in session.parts.items() if part.optimizer is not None}
        trainer = {"optimizers": {n: p.optimizer.state_dict() for n, p in trained.items() if not p.sharded},
                   "schedulers": {n: p.scheduler.state_dict() for n, p in trained.items()},
                   "scalers": {n: p.scaler.state_dict() for n, p in trained.items() if p.scaler is not None},
                   "rng": rng_of_ranks[0], "rng_of_ranks": rng_of_ranks,
                   "progress": vars(session.progress).copy(), "state": dict(session.state)}
        best = session.progress.best_score
        manifest = {"epoch": session.progress.epoch, "step": session.progress.step, "algorithm": session.cfg.algorithm,
                    "world_size": session.ranks.world, "strategy": session.cfg.distributed.strategy,
                    "metrics": metrics or {}, "best_metric": session.progress.best_metric,
                    "best_value": best if math.isfinite(best) else None}  # None: not validated yet
        modules = {name: part.module for name, part in session.parts.items()}
        return save_checkpoint(folder, modules, config, session.data.vocab, trainer, manifest, tmp, whole)
    finally:
        whole.drain()  # (rank 0: what a failed save did not take; the gathers are collectives)


class TrainResult(NamedTuple):
    out_dir: str
    best_score: float     # best validation score (-inf: not validated yet)
    steps: int
    stopped_early: bool   # max_steps reached before the last epoch ended
    best_metric: str      # what best_score is a value of: val.metric, or a loop's own (mean_R, F1)


Validator = Callable[["Session"], dict[str, float]]
Batches = Callable[[int, int], Iterable[Any]]


def train_batches(session: Session, epochs: int, batch_size: int, seq_per_img: int = 1,
                  validate: Validator | None = None, batches: Batches | None = None,
                  steps_per_epoch: int | None = None, phase: str | None = None) -> Iterator[Any]:
    """Enter the phase (``session.phase``, a :class:`Phase`: now, before the first batch) and return its batches
    from where the run stands to the end of ``epochs``, each epoch ended by :func:`end_epoch` (decay, validation,
    checkpoints); a loop that stops early (``max_steps``) leaves the ``for``. Every method's epochs run here, the
    auxiliary models' and the pretraining phases' too. ``validate(session) -> scores``: the epoch's validation,
    whose scores hold ``Progress.best_metric`` (default: the captioner's, :func:`rlcap.train.validation.validate`);
    ``batches(epoch, start)``: the epoch's batches from its step ``start`` (default: the training split's,
    ``batch_size`` images of ``seq_per_img`` captions, in the run's seeded order), ``steps_per_epoch`` of them;
    ``phase``: a pretraining phase ([Shi18]'s value, [Chaffin24]'s discriminator), :class:`Phase`'s other kind."""
    if batches is None:
        def batches(epoch: int, start: int) -> Iterable[Batch]:
            return session.data.splits["train"].batches(batch_size, seq_per_img, session.cfg.seed, epoch, start)
        steps_per_epoch = math.ceil(len(session.data.splits["train"]) / batch_size)
    session.phase = Phase(phase, epochs)
    return _phase_batches(session, session.phase, batches, steps_per_epoch, validate)


def _phase_batches(session: Session, phase: Phase, batches: Batches, steps_per_epoch: int | None,
                   validate: Validator | None) -> Iterator[Any]:
    """:func:`train_batches`' batches of ``phase``, each epoch ended (:func:`end_epoch` for the main phase)."""
    count = phase.counter(session.state, session.progress)
    while count["epoch"] < phase.epochs:
        desc = f"{phase.name or session.cfg.algorithm} epoch {count['epoch'] + 1}"
        # this rank's share of each batch (a stand-in weighed zero when a short last batch leaves it none)
        yield from shared_out(session, tqdm(batches(count["epoch"], count["step_in_epoch"]), total=steps_per_epoch,
                                            initial=count["step_in_epoch"], desc=desc, leave=False, disable=None))
        if phase.name is None:
            end_epoch(session, validate)
        else:
            count["epoch"], count["step_in_epoch"] = count["epoch"] + 1, 0
            log.info("%s: epoch %d of %d done", phase.name, count["epoch"], phase.epochs)


def finish_step(session: Session, values: Stats) -> bool:
    """Count a step, log it and checkpoint as configured; True once ``max_steps`` is reached.

    ``values``: the step's statistics, host numbers or 0-d tensors left on the device; they are read
    only when a line is logged (rlcap.train.logger), so a step that logs nothing reads nothing."""
    progress, cfg = session.progress, session.cfg
    session.watch.update(values["loss"], progress.step + 1)
    run_started(session)
    count = session.phase.counter(session.state, progress)  # the epoch's steps: a pretraining phase's, or the run's
    progress.step += 1
    count["step_in_epoch"] += 1  # before a checkpoint below, which saves it
    if progress.step % cfg.log_every == 0 or count["step_in_epoch"] == 1:
        read, bad = read_stats(values, session.watch)
        if bad is not None:
            raise diverged(session.cfg, session.out_dir, *bad)
        lr = next(part.optimizer for part in session.parts.values() if part.optimizer is not None).param_groups[0]["lr"]
        session.logger.write(progress.step, "train", {**read, "lr": lr, "epoch": progress.epoch})
        log.info("step %d (epoch %d): %s", progress.step, progress.epoch + 1,
                 ", ".join(f"{k} {v:.4g}" for k, v in read.items() if not k.endswith("_s")))
    if cfg.save_every and progress.step % cfg.save_every == 0:
        save(session, "last")
    if cfg.max_steps and progress.step >= cfg.max_steps:
        save(session, "last")
        return True
    signum = stop_signal(session.ranks, session.device)  # under torchrun, a signal stops every rank after the same step
    if signum:
        raise Stopped(signum)
    return False


def finish_run(session: Session) -> TrainResult:
    """Close the log; the run stopped early when its main phase's epochs are not all done (or it never reached it)."""
    run_started(session)  # (a run with no step left: its settings are recorded all the same)
    check_finite_loss(session.watch, session.cfg, session.out_dir)
    session.logger.close()
    progress, phase = session.progress, session.phase
    stopped_early = phase is None or phase.name is not None or progress.epoch < phase.epochs
    return TrainResult(str(session.out_dir), progress.best_score, progress.step, stopped_early, progress.best_metric)


def end_epoch(session: Session, validate: Validator | None = None) -> dict[str, float]:
    """Decay every part's learning rate, validate (``validate``, default the captioner's beam search
    scored by CIDEr-D and ``val.metric``), keep the best checkpoint by the run's metric
    (``Progress.best_metric``) and write the last one."""
    progress = session.progress
    for part in session.parts.values():
        if part.scheduler is not None:
            with warnings.catch_warnings():
                # a run resumed at an epoch's end (stopped by max_steps or killed after its last batch's
                # checkpoint) decays here before this process's first optimizer step: the right order, though
                # torch, which counts steps per process, warns of the wrong one
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
                part.scheduler.step()
    progress.epoch, progress.step_in_epoch = progress.epoch + 1, 0
    scores = None
    if validate is None:  # the captioner's: every rank decodes its share of the batches, rank 0 scores
        scores = captioner_scores(session.model.module, session.data, session.cfg.val, session.decoding,
                                  session.ranks, session.precision)  # (validation enters the precision itself)
    elif session.ranks.main:  # a method's own validation runs on rank 0
        scores = validate(session)
    scores = from_main(scores, session.ranks)  # the others take rank 0's scores, so that all keep the same best/
    progress.history.append({"epoch": progress.epoch, "step": progress.step, **scores})
    session.logger.write(progress.step, session.cfg.val.split, {**scores, "epoch": progress.epoch})
    session.logger.captions(progress.step, caption_table(session))  # the trackers' (track.captions)
    metric, value = progress.best_metric, scores[progress.best_metric]
    best = value > progress.best_score
    also = f", CIDEr-D {scores['CIDEr']:.4f}" if metric != "CIDEr" and "CIDEr" in scores else ""
    log.info("epoch %d: %s %s %.4f%s%s", progress.epoch, session.cfg.val.split, metric_label(metric), value,
             " (best)" if best else "", also)
    if best:
        progress.best_score = value
        save(session, "best", scores)
    save(session, "last", scores)
    return scores
