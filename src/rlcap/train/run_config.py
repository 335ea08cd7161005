"""The run config: the settings every training method shares, one dataclass per concern, and the
run config of one method (:func:`run_config_class`, :func:`load_run_config`): those plus the
method's own section, which lives in the method's file (``rlcap/methods/``)."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, make_dataclass
from pathlib import Path
from typing import Any, Callable

from rlcap.config import apply_overrides, flatten, from_dict, help_field, key_matches, read_yaml
from rlcap.data.loader import DataConfig
from rlcap.devices import check_device_name, check_precision
from rlcap.errors import ConfigError
from rlcap.metrics.scoring import PYCOCOEVALCAP_METRICS
from rlcap.models.model_config import ModelConfig
from rlcap.rewards import RewardConfig
from rlcap.train.registry import METHODS, Method, method, resolve

log = logging.getLogger(__name__)

OPTIMIZERS = ("adam", "adamw")


def check_min(key: str, value: int | float, least: int | float) -> None:
    """One clear line for a setting below its least allowed value."""
    if value < least:
        raise ConfigError(f"{key}: expected at least {least}, got {value}")


def check_positive(key: str, value: float) -> None:
    """One clear line for a setting that must be above 0."""
    if not value > 0:
        raise ConfigError(f"{key}: expected > 0, got {value}")


def check_lr(key: str, value: float) -> None:
    """One clear line for a learning rate outside (0, MAX_LR]."""
    if not 0 < value <= MAX_LR:
        raise ConfigError(f"{key}: expected a learning rate in (0, {MAX_LR:g}], got {value:g}")


CLIP_MODES = ("norm", "value")
MAX_LR = 1.0  # Adam's step is about lr per parameter: above 1 a run only diverges


@dataclass
class OptimConfig:
    name: str = help_field("adam", "optimizer: adam or adamw")
    lr: float = help_field(5e-4, "learning rate")
    weight_decay: float = help_field(0.0, "weight decay (decoupled for adamw)")
    lr_decay_every: int = help_field(3, "multiply the learning rate by lr_decay_rate every this many epochs (0: never)")
    lr_decay_rate: float = help_field(0.8, "step decay factor")
    grad_clip: float = help_field(2.0, "clip the gradient to this (0: no clipping); see grad_clip_mode")
    grad_clip_mode: str = help_field(
        "norm", "norm: scale the whole gradient down to global norm grad_clip; value: clamp every element "
        "to [-grad_clip, grad_clip] (self-critical.pytorch's RL setting, with 0.1)")

    def validate(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ConfigError(f"optim.name: {self.name!r} is not one of {list(OPTIMIZERS)}")
        if self.grad_clip_mode not in CLIP_MODES:
            raise ConfigError(f"optim.grad_clip_mode: {self.grad_clip_mode!r} is not one of {list(CLIP_MODES)}")
        check_lr("optim.lr", self.lr)
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError(f"optim.weight_decay and optim.grad_clip: expected >= 0, got {self.weight_decay:g} "
                              f"and {self.grad_clip:g}")
        if not 0 < self.lr_decay_rate <= 1:
            raise ConfigError(f"optim.lr_decay_rate: expected a factor in (0, 1], got {self.lr_decay_rate:g}")
        check_min("optim.lr_decay_every", self.lr_decay_every, 0)


SAMPLE_METHODS = ("sample", "beam")


@dataclass
class DecodeSettings:
    """How captions are generated: one set of settings for training, validation and evaluation."""

    max_len: int = help_field(16, "most words per generated caption (RL samples, validation, evaluation)")
    temperature: float = help_field(1.0, "softmax temperature of the captions sampled for RL")
    beam_size: int = help_field(3, "beam size of validation and evaluation (1: greedy)")
    length_penalty: float = help_field(0.0, "beam search ranks by sum logprob / length**this (0: off)")
    no_repeat_ngram: int = help_field(0, "beam search never repeats an n-gram of this many words (0: off); "
                                         "[Chaffin24]'s trajectories too")
    compile: bool | str = help_field(
        "auto", "run each decoding step compiled by torch.compile, with CUDA graphs on CUDA: auto (on CUDA only), "
                "true or false; each kind of decode compiles on first use (seconds to a minute)")
    exit_every: int = help_field(
        -1, "check whether every caption has ended once every this many words and stop if so; 0: never (every "
            "decode runs max_len steps, which keeps a GPU from waiting on the check); -1: auto (1 on the CPU, 0 on CUDA)")

    def validate(self) -> None:
        if self.compile not in ("auto", True, False):
            raise ConfigError(f"decode.compile: expected auto, true or false, got {self.compile!r}")
        check_min("decode.exit_every", self.exit_every, -1)
        check_min("decode.max_len", self.max_len, 1)
        check_min("decode.no_repeat_ngram", self.no_repeat_ngram, 0)
        check_min("decode.beam_size", self.beam_size, 1)
        check_positive("decode.temperature", self.temperature)
        if self.length_penalty < 0:
            raise ConfigError(f"decode.length_penalty: expected >= 0, got {self.length_penalty}")


@dataclass
class RLConfig:
    """The budget and the rollouts every sequence-level loop shares; each algorithm has its own section."""

    epochs: int = help_field(5, "training epochs")
    batch_size: int = help_field(50, "images per batch")
    n_samples: int = help_field(5, "captions generated per image (s in [Chen20])")
    sample_method: str = help_field("sample", "how captions are generated: sample (multinomial) or beam (n-best)")
    rollout_dropout: bool = help_field(
        True, "keep dropout on while generating the training captions, as self-critical.pytorch does "
        "(false: sample from the network validation decodes with; measured in docs/BENCHMARKS.md)")

    def validate(self) -> None:
        if self.sample_method not in SAMPLE_METHODS:
            raise ConfigError(f"rl.sample_method: {self.sample_method!r} is not one of {list(SAMPLE_METHODS)}")
        check_min("rl.epochs", self.epochs, 1)
        check_min("rl.batch_size", self.batch_size, 1)
        check_min("rl.n_samples", self.n_samples, 1)


# val.metric: the caption metrics of rlcap.metrics.score_captions a run can keep best/ by, and BCMR
# ([Liu17]'s four metrics summed, as the bcmr reward sums them: rlcap.train.validation.VAL_COMBINED).
VAL_METRICS = (*PYCOCOEVALCAP_METRICS, "SPIDEr", "BCMR")
AUTO = "auto"


@dataclass
class ValConfig:
    split: str = help_field("val", "split used to pick the best checkpoint")
    max_images: int = help_field(0, "validate on at most this many images (0: all)")
    batch_size: int = help_field(100, "images decoded at once")
    metric: str = help_field(
        AUTO, "the validation score best/ is kept by: auto (the metric the reward optimises: SPIDEr when "
              "reward.weights has spider, BCMR when it has bcmr, else CIDEr, also for xe), or one of "
              + ", ".join(VAL_METRICS) + " (BCMR: the corpus Bleu_4 + CIDEr + METEOR + ROUGE_L, the bcmr reward's "
              "sum; METEOR and BCMR need Java). CIDEr is validated and logged in any case")

    def validate(self) -> None:
        check_min("val.max_images", self.max_images, 0)
        check_min("val.batch_size", self.batch_size, 1)
        if self.metric not in (AUTO, *VAL_METRICS):
            raise ConfigError(f"val.metric: {self.metric!r} is not one of {[AUTO, *VAL_METRICS]}")


def auto_val_metric(algorithm: str, reward: RewardConfig | None) -> str:
    """What ``val.metric: auto`` keeps best/ by: the metric the run's reward optimises, so that the
    checkpoint kept is the one best at what the run trains for ([Liu17] optimises SPIDEr for its gain
    in SPICE, which selecting by CIDEr-D would select against); CIDEr-D for loops without a reward
    (:attr:`Method.reward`)."""
    if not method(algorithm).reward or reward is None:
        return "CIDEr"
    if "spider" in reward.weights:
        return "SPIDEr"
    if "bcmr" in reward.weights:
        return "BCMR"
    return "CIDEr"


def cpu_threads(threads: int | str) -> int:
    """``threads`` as a number: ``auto`` is the cores this process may use (its CPU affinity), divided
    among the processes torchrun starts on this machine (``LOCAL_WORLD_SIZE``), at least 1."""
    if threads != AUTO:
        return int(threads)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def metric_label(name: str) -> str:
    """A validation score's name in log lines: pycocoevalcap's CIDEr is CIDEr-D."""
    return "CIDEr-D" if name == "CIDEr" else name


@dataclass
class RunConfig:
    """What every training run reads: the run's own settings and the shared sections (data, model,
    optim, val, decode). :func:`run_config_class` adds the sections of one method: ``rl`` for the
    sequence-level methods, ``reward`` for those whose policy learns from a reward, and the method's
    own (``scst:``, ``hrl:``, ...), so that a run parses and lists only the keys its method reads."""

    algorithm: str = help_field("xe", "the training method, one of rlcap.train.registry.METHODS (rlcap train "
                                      "--help-config algorithm=NAME lists its keys)")
    out_dir: str = help_field("runs/run", "run folder: checkpoints, logs, predictions")
    seed: int = help_field(1234, "random seed for initialisation, data order and sampling")
    init_from: str | None = help_field(None, "start from the weights of this checkpoint folder, or of a transformers "
                                             "captioner's folder (model.arch=hf: a checkpoint's hf/, a download)")
    allow_init_mismatch: bool = help_field(False, "start from init_from even when its vocabulary lacks words of "
                                                  "this run's training captions or its features' image size differs "
                                                  "(the run keeps the checkpoint's vocabulary)")
    device: str = help_field(AUTO, "where the run computes: auto (the first CUDA device when torch sees one, "
                                   "else the CPU), cpu, cuda, cuda:N or mps")
    precision: str = help_field("fp32", "fp32, bf16 or fp16: the precision of the forward passes under torch.autocast "
                                        "(losses and rewards stay fp32; fp16 with a gradient scaler)")
    threads: int | str = help_field(AUTO, "torch CPU threads: a number, or auto (the cores this process may use, "
                                          "shared among the processes torchrun starts on the machine)")
    log_every: int = help_field(20, "write a log line every this many steps")
    save_every: int = help_field(0, "also checkpoint every this many steps (0: at the end of each epoch only)")
    max_steps: int = help_field(0, "stop after this many optimizer steps in total (0: no limit)")
    tensorboard: bool = help_field(True, "also write TensorBoard event files")
    data: DataConfig = help_field(DataConfig, "caption data and features")
    model: ModelConfig = help_field(ModelConfig, "captioning model")
    optim: OptimConfig = help_field(OptimConfig, "optimizer and learning-rate schedule")
    val: ValConfig = help_field(ValConfig, "validation during training")
    decode: DecodeSettings = help_field(DecodeSettings, "caption generation: RL samples, validation, evaluation")

    def __post_init__(self) -> None:
        # val.metric auto becomes the metric it stands for here, so that config.json and every
        # checkpoint record the concrete one (and the defaults, which decide whether a run written
        # before val.metric existed continues unchanged, hold it too)
        self.resolve_val_metric()

    def resolve_val_metric(self) -> None:
        """Replace ``val.metric: auto`` by :func:`auto_val_metric` (a concrete metric stays)."""
        if self.val.metric == AUTO:
            self.val.metric = auto_val_metric(self.algorithm, self.reward if method(self.algorithm).reward else None)

    def validate(self) -> None:
        check_device_name(self.device)
        check_precision(self.precision)
        if self.threads != AUTO:
            if not isinstance(self.threads, int):
                raise ConfigError(f"threads: expected a number or auto, got {self.threads!r}")
            check_min("threads", self.threads, 1)
        check_min("log_every", self.log_every, 1)
        check_min("save_every", self.save_every, 0)
        check_min("max_steps", self.max_steps, 0)
        check = method(self.algorithm).check
        if check is not None:
            resolve(check)(self)

    @property
    def epochs(self) -> int:
        """The method's number of epochs (:attr:`Method.epochs`, e.g. ``rl.epochs``)."""
        section, _, key = method(self.algorithm).epochs.partition(".")
        return getattr(getattr(self, section), key)


# What rlcap train does with the run folder and processes, given among its overrides: not in the run
# config (no config.json records them). rlcap.cli.options.command_options reads them (CommandOptions: the
# same three names, kept there so that the CLI's start-up imports no training code).
COMMAND_OPTIONS = {"resume": "continue the run in out_dir, applying changed settings that a run may change",
                   "overwrite": "replace a run already in out_dir",
                   "nproc": "start this many processes with torchrun; rlcap train only"}

_CLASSES: dict[tuple[str, Method], type[RunConfig]] = {}


def run_config_class(algorithm: str) -> type[RunConfig]:
    """The run config of ``algorithm``: :class:`RunConfig` plus ``rl`` and ``reward`` when the method
    reads them and the method's own section, named as the method."""
    m = method(algorithm)
    key = (algorithm, m)
    if key not in _CLASSES:
        fields: list[tuple[str, Any, Any]] = [("algorithm", str, help_field(algorithm, RunConfig.__dataclass_fields__[
            "algorithm"].metadata["help"]))]
        if m.rl:
            fields.append(("rl", RLConfig, help_field(RLConfig, "budget and rollouts of the sequence-level methods")))
        if m.reward:
            fields.append(("reward", RewardConfig, help_field(RewardConfig, "rewards and their weights")))
        if m.config is not None:
            section = resolve(m.config)
            fields.append((algorithm, section, help_field(section, m.help or f"algorithm={algorithm}")))
        _CLASSES[key] = make_dataclass(f"RunConfig_{algorithm}", fields, bases=(RunConfig,))
    return _CLASSES[key]


def other_method_sections(algorithm: str) -> set[str]:
    """The section names of the registered methods other than ``algorithm`` (and ``rl``, ``reward``
    when it reads none)."""
    m = method(algorithm)
    names = {name for name, other in METHODS.items() if other.config is not None} - {algorithm}
    return names | ({"rl"} if not m.rl else set()) | ({"reward"} if not m.reward else set())


def load_run_config(path: str | Path | None = None, overrides: list[str] | None = None,
                    shared: bool = False) -> RunConfig:
    """A recipe (YAML) and ``key=value`` overrides as the run config of its ``algorithm`` (default xe).

    Only the method's own sections are parsed: the sections of other registered methods are left
    out with a warning naming them (overrides given to several runs at once, as ``rlcap bench --rl``
    and ``rlcap demo`` give them, reach the runs that read them; ``shared``: such overrides, left out
    without a warning), and any other unknown key is an error listing the valid ones. A shared key the
    method never reads (:attr:`Method.skips`, e.g. ``decode.temperature`` for xe) is named in a warning too."""
    data = apply_overrides(read_yaml(path) if path is not None else {}, list(overrides or []))
    options = sorted(set(data) & set(COMMAND_OPTIONS))
    if options:
        key = options[0]
        elsewhere = (f"or api.train(cfg, {key}=True)" if key != "nproc" else
                     "or torchrun --nproc-per-node N -m rlcap train RECIPE (api.train runs in the process that "
                     "calls it)")
        raise ConfigError(f"{key} is not a setting of the run but an option of the command: {key}=... on the "
                          f"rlcap train command line, {elsewhere} ({COMMAND_OPTIONS[key]})")
    algorithm = data.get("algorithm", "xe")
    if not isinstance(algorithm, str):
        raise ConfigError(f"algorithm: expected a method name, got {algorithm!r}")
    stray = sorted(set(data) & other_method_sections(algorithm))
    if stray and not shared:
        log.warning("algorithm=%s does not read the section%s %s (left out)", algorithm, "s" * (len(stray) > 1),
                    ", ".join(stray))
    unread = [key for key in flatten(data) if key_matches(key, method(algorithm).skips)]
    if unread and not shared:
        log.warning("algorithm=%s does not read %s (set, but without effect on this run)", algorithm,
                    ", ".join(unread))
    return from_dict(run_config_class(algorithm), {k: v for k, v in data.items() if k not in stray})



RETRIEVAL_REWARDS = ("clip_s", "i2t", "t2i", "bicont")


def _archs(*archs: str) -> Callable[[RunConfig], bool]:
    """Model keys of these architectures: read by a run that builds its model (one with ``init_from`` takes
    the checkpoint's architecture, every model key with it)."""
    return lambda cfg: cfg.init_from is None and cfg.model.arch in archs


def _retrieval(cfg: RunConfig) -> bool:
    """The run scores with a retriever: [Chaffin24]'s methods, or a retrieval reward in reward.weights."""
    return cfg.algorithm in ("wtf_rl", "scst_discriminator") or any(n in RETRIEVAL_REWARDS for n in cfg.reward.weights)


# rlcap's methods that never read the encoded training captions (cut to data.max_len), only the raw
# references their rewards score against, and those that read them but not in batches of data.seq_per_img
# (teacher forcing). A method registered from outside rlcap is assumed to read both.
NO_CAPTIONS = ("scst", "sll_me", "sll_sle", "ac", "pg", "hrl")
NO_SEQ_PER_IMG = (*NO_CAPTIONS, "mixer", "embedding", "retriever", "critic")

# Keys that only some runs read: key -> whether a run of this config reads it (the model keys of one
# architecture, the settings of learned and retrieval rewards, a baseline's decay, the captions' cut).
# `rlcap train --help-config` lists a run's keys without those it does not read.
READ_WHEN: dict[str, Callable[[RunConfig], bool]] = {
    "allow_init_mismatch": lambda cfg: cfg.init_from is not None,
    "data.seq_per_img": lambda cfg: cfg.algorithm not in NO_SEQ_PER_IMG,
    "data.max_len": lambda cfg: cfg.algorithm not in NO_CAPTIONS,
    "data.min_count": lambda cfg: cfg.init_from is None,  # (else the checkpoint's vocabulary)
    "scst.running_mean_decay": lambda cfg: cfg.scst.baseline == "running_mean",
    "model.arch": lambda cfg: cfg.init_from is None,
    **{f"model.{k}": _archs("fc", "updown", "transformer", "hrl") for k in ("hidden_dim", "dropout")},  # rlcap's own
    "model.path": _archs("hf"),  # a transformers captioner's folder: its own sizes
    "model.train": _archs("hf"),
    **{f"model.{k}": lambda cfg: cfg.model.arch == "hf" and cfg.model.train == "lora" for k in ("lora_rank", "lora_alpha")},
    "model.embed_dim": _archs("fc", "updown", "hrl"),
    "model.att_hidden_dim": _archs("updown", "hrl"),
    **{f"model.{k}": _archs("transformer") for k in ("num_layers", "num_enc_layers", "num_heads", "ff_dim", "max_len")},
    **{f"model.{k}": _archs("hrl") for k in ("manager_dim", "goal_dim", "critic_from")},
    "reward.paths": lambda cfg: _retrieval(cfg) or "embedding" in cfg.reward.weights,
    **{f"reward.{k}": _retrieval for k in ("retrieval_tau", "hard_negatives", "negative_captions")},
}


def as_meant(cfg: RunConfig) -> RunConfig:
    """``cfg`` as its method is meant to run: one that continues an XE model (:attr:`Method.from_xe`) with
    an ``init_from`` (a placeholder when none is set), whose checkpoint gives the model and the vocabulary.
    The keys ``rlcap train --help-config`` and docs/CONFIG.md list are those such a run reads."""
    if cfg.init_from or not method(cfg.algorithm).from_xe:
        return cfg
    return dataclasses.replace(cfg, init_from="XE_RUN/best")


def read_by(cfg: RunConfig, key: str) -> bool:
    """Whether a run of ``cfg`` reads ``key``: every key but those its method skips (:attr:`Method.skips`)
    and those of :data:`READ_WHEN` that it does not."""
    if key_matches(key, method(cfg.algorithm).skips):
        return False
    return key not in READ_WHEN or READ_WHEN[key](cfg)
