"""The run config: the settings every training method shares, one dataclass per concern.

A method's run config is a subclass written in the method's file (``rlcap/methods/<name>.py``):
:class:`RunConfig` plus the method's own section, named as the method, and, for the methods whose
policy learns from a reward over sampled captions, :class:`SequenceRunConfig`'s ``rl`` and ``reward``
sections. The class says what its method reads: its fields, :attr:`RunConfig.UNREAD` (shared keys the
loop never reads) and :meth:`RunConfig.reads` (keys read under conditions). Method names map to these
classes in :mod:`rlcap.methods.registry`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from rlcap.config import flatten, help_field, key_matches, to_dict
from rlcap.data.loader import MAX_LEN_HELP_HF, DataConfig
from rlcap.devices import check_device_name, check_precision, host_memory_policy
from rlcap.distributed import DistributedConfig
from rlcap.errors import ConfigError
from rlcap.metrics.combined import COMBINED
from rlcap.metrics.scoring import PYCOCOEVALCAP_METRICS
from rlcap.models.architectures import archs, architecture, model_reads, training_keys
from rlcap.models.model_config import ModelConfig
from rlcap.rewards.registry import OPTIMISES
from rlcap.rewards.reward_config import RewardConfig
from rlcap.track.config import TrackConfig

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
DECODE_MAX_LEN_HELP_HF = "most of the model's subwords per generated caption (RL samples, validation, evaluation)"


@dataclass
class DecodeSettings:
    """How captions are generated: one set of settings for training, validation and evaluation."""

    max_len: int = help_field(16, "most words per generated caption (RL samples, validation, evaluation)")
    temperature: float = help_field(1.0, "softmax temperature of the captions sampled for RL")
    beam_size: int = help_field(3, "beam size of validation and evaluation (1: greedy)")
    length_penalty: float = help_field(0.0, "beam search ranks by sum logprob / length**this (0: off)")
    no_repeat_ngram: int = help_field(0, "beam search never repeats an n-gram of this many words (0: off); "
                                         "[Chaffin24]'s trajectories too")
    def validate(self) -> None:
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
    n_samples: int = help_field(5, "captions sampled per image by the method's loop (s in [Chen20], M in [Liu17]); "
                                   "MIXER draws mixer.references, HRL hrl.worker_samples instead")
    sample_method: str = help_field("sample", "how captions are generated: sample (multinomial) or beam (n-best)")
    micro_batch: int = help_field(
        0, "captions a scoring pass reads, for a policy sampled without autograd and scored in one teacher-forced "
        "pass (model.arch=hf): the pass runs in micro-batches of this many in the backward pass, so that memory "
        "holds one micro-batch's activations; the loss and gradients are one pass's (docs/MODELS.md); 0: one pass")
    rollout_dropout: bool = help_field(
        True, "keep dropout on while generating the training captions, as self-critical.pytorch does "
        "(false: sample from the network validation decodes with; measured in "
        "docs/notes/2026-11-21-shapes-rl-recipes.md); a policy scored in one pass (model.arch=hf) samples and "
        "scores without dropout either way")
    kl_coef: float = help_field(
        0.0, "beta: weight of the KL term to the reference policy, the run's starting weights (its adapters off "
        "for model.train=lora), estimated per word by k3 ([Shao24 eq. 4]; docs/RL.md, \"The KL term\"); "
        "0: no term and no reference built")

    def validate(self) -> None:
        if self.kl_coef < 0:
            raise ConfigError(f"rl.kl_coef: expected >= 0, got {self.kl_coef}")
        if self.sample_method not in SAMPLE_METHODS:
            raise ConfigError(f"rl.sample_method: {self.sample_method!r} is not one of {list(SAMPLE_METHODS)}")
        check_min("rl.epochs", self.epochs, 1)
        check_min("rl.batch_size", self.batch_size, 1)
        check_min("rl.n_samples", self.n_samples, 1)
        check_min("rl.micro_batch", self.micro_batch, 0)


# val.metric: the caption metrics of rlcap.metrics.score_captions a run can keep best/ by, and those combined from
# them (rlcap.metrics.combined.COMBINED: SPIDEr, BCMR)
VAL_METRICS = (*PYCOCOEVALCAP_METRICS, *COMBINED)
AUTO = "auto"


@dataclass
class ValConfig:
    split: str = help_field("val", "split used to pick the best checkpoint")
    max_images: int = help_field(0, "validate on at most this many images (0: all)")
    batch_size: int = help_field(100, "images decoded at once")
    metric: str = help_field(
        AUTO, "the validation score best/ is kept by: auto (the metric the reward optimises: "
              + ", ".join(f"{metric} when reward.weights has {name}" for name, metric in OPTIMISES.items())
              + ", else CIDEr, also for xe), or one of " + ", ".join(VAL_METRICS) + " ("
              + "; ".join(f"{name}: {combined.help}" for name, combined in COMBINED.items())
              + "; METEOR and a metric combined from it need Java). CIDEr is validated and logged in any case")

    def validate(self) -> None:
        check_min("val.max_images", self.max_images, 0)
        check_min("val.batch_size", self.batch_size, 1)
        if self.metric not in (AUTO, *VAL_METRICS):
            raise ConfigError(f"val.metric: {self.metric!r} is not one of {[AUTO, *VAL_METRICS]}")


def auto_val_metric(reward: RewardConfig | None) -> str:
    """What ``val.metric: auto`` keeps best/ by: the metric the run's reward optimises, so that the
    checkpoint kept is the one best at what the run trains for ([Liu17] optimises SPIDEr for its gain
    in SPICE, which selecting by CIDEr-D would select against); CIDEr-D for a run without a reward."""
    if reward is None:
        return "CIDEr"
    return next((metric for name, metric in OPTIMISES.items() if name in reward.weights), "CIDEr")


def metric_label(name: str) -> str:
    """A validation score's name in log lines: pycocoevalcap's CIDEr is CIDEr-D."""
    return "CIDEr-D" if name == "CIDEr" else name


ALGORITHM_HELP = ("the training method, one of rlcap.methods.METHODS (rlcap train --help-config algorithm=NAME "
                  "lists its keys)")


@runtime_checkable
class ReadsKeys(Protocol):
    """A config section whose keys are read only under conditions of its own (the reward's by its weights)."""

    def reads(self, key: str) -> bool: ...


@runtime_checkable
class ChecksRun(Protocol):
    """A config section with rules across sections (scst's baseline and ``rl``): ``name`` is its key in the run."""

    def check_run(self, run: Any, name: str) -> None: ...


def algorithm_field(name: str) -> Any:
    """The ``algorithm`` field of a method's run config: the method's name by default."""
    return help_field(name, ALGORITHM_HELP)


@dataclass
class RunConfig:
    """What every training run reads: the run's own settings and the shared sections (data, model,
    optim, val, decode). A method's run config subclasses it with the method's own section, named as
    the method (``xe:``, ``critic:``), or subclasses :class:`SequenceRunConfig` (``rl`` and ``reward``
    too), and says what else it reads by :attr:`UNREAD`, :attr:`FROM_XE`, :attr:`READS_CAPTIONS`,
    :attr:`CAPTIONS_PER_IMAGE` and :meth:`reads`. A section may have ``reads(key)`` (keys read under a
    condition of its own) and ``check_run(run, name)`` (rules across sections), which the run config calls."""

    # shared keys the method's loop never reads (a key, or a section's prefix ending in "."): left out of
    # `rlcap train --help-config`, and named in a warning when set
    UNREAD: ClassVar[tuple[str, ...]] = ()
    # the method continues an XE model: its recipes name init_from, whose checkpoint gives the architecture
    # and the vocabulary (a run without one warns; --help-config lists the keys of a run with one)
    FROM_XE: ClassVar[bool] = False

    # the method reads the training captions encoded (teacher forcing, cut to data.max_len); False: only the raw
    # references its rewards score against
    READS_CAPTIONS: ClassVar[bool] = True
    # it reads them in batches of data.seq_per_img captions per image
    CAPTIONS_PER_IMAGE: ClassVar[bool] = True
    # the key of the batch size (images a step) whose rows torchrun's processes share out (check_processes);
    # None: each process reads the whole batch (the critic's captions)
    BATCH_KEY: ClassVar[str | None] = None
    # the dotted keys the run's recipe and overrides set, to their defaults or not: recorded on the instance by
    # rlcap.methods.registry.load_run_config (copy.deepcopy keeps them); None for a config built in Python (see sets)
    set_keys: ClassVar[frozenset[str] | None] = None

    algorithm: str = help_field("xe", ALGORITHM_HELP)
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
    host_memory: str = help_field(AUTO, "the C library's allocator: release (freed blocks of 1 MiB or more go back "
                                        "to the system at once: a rank's peak is its tensors', not what the "
                                        "allocator keeps; small models' steps are slower), keep (glibc's own "
                                        "threshold), or auto: release under distributed.strategy=fsdp2, else keep")
    log_every: int = help_field(20, "write a log line every this many steps")
    save_every: int = help_field(0, "also checkpoint every this many steps (0: at the end of each epoch only)")
    max_steps: int = help_field(0, "stop after this many optimizer steps in total (0: no limit)")
    track: TrackConfig = help_field(TrackConfig, "where the run is watched: TensorBoard, W&B, MLflow, Trackio")
    data: DataConfig = help_field(DataConfig, "caption data and features")
    model: ModelConfig = help_field(ModelConfig, "captioning model")
    optim: OptimConfig = help_field(OptimConfig, "optimizer and learning-rate schedule")
    val: ValConfig = help_field(ValConfig, "validation during training")
    decode: DecodeSettings = help_field(DecodeSettings, "caption generation: RL samples, validation, evaluation")
    distributed: DistributedConfig = help_field(DistributedConfig, "several processes under torchrun: DDP or FSDP2")

    def __post_init__(self) -> None:
        # val.metric auto becomes the metric it stands for here, so that config.json and every checkpoint
        # record the concrete one
        if self.val.metric == AUTO:
            self.val.metric = auto_val_metric(self.learned_reward)

    @property
    def learned_reward(self) -> RewardConfig | None:
        """The reward the run's policy learns from (``val.metric: auto`` keeps best/ by its metric), or None."""
        return None

    def validate(self) -> None:
        check_device_name(self.device)
        check_precision(self.precision)
        architecture(self.model.arch)  # a model.arch no architecture registers: ConfigError listing those that are
        if self.threads != AUTO:
            if not isinstance(self.threads, int):
                raise ConfigError(f"threads: expected a number or auto, got {self.threads!r}")
            check_min("threads", self.threads, 1)
        host_memory_policy(self.host_memory, self.distributed.strategy)
        check_min("log_every", self.log_every, 1)
        check_min("save_every", self.save_every, 0)
        check_min("max_steps", self.max_steps, 0)
        for field in dataclasses.fields(self):  # a section's rules across sections (e.g. scst's baseline and rl)
            section = getattr(self, field.name)
            if isinstance(section, ChecksRun):
                section.check_run(self, field.name)

    def check_processes(self, world: int) -> None:
        """ConfigError when a batch (:attr:`BATCH_KEY`) holds fewer images than the ``world`` processes that share
        out its rows: every step would leave a process without any (only an epoch's short last batch should)."""
        if self.distributed.strategy == "fsdp2" and world == 1:
            raise ConfigError("distributed.strategy=fsdp2 shards the policy over torchrun's processes, and this run "
                              "has one: start it with nproc=N (N >= 2), or use distributed.strategy=ddp")
        if self.BATCH_KEY is None or world <= 1:
            return
        section, _, name = self.BATCH_KEY.partition(".")
        size = getattr(getattr(self, section), name)
        if size < world:
            raise ConfigError(f"{self.BATCH_KEY}={size} is fewer images than the {world} processes (nproc={world}), "
                              f"which share out each batch's images: give {self.BATCH_KEY} >= {world}, or fewer "
                              "processes")

    def reads(self, key: str) -> bool:
        """Whether a run of this config reads the dotted ``key``: not when :attr:`UNREAD` names it; the model
        keys of its architecture and ``data.min_count`` only when it builds its model (with ``init_from`` the
        checkpoint gives both; an hf captioner's vocabulary is its tokenizer, so ``data.min_count`` never for
        ``model.arch=hf``), ``allow_init_mismatch`` only with ``init_from``; a key of a section with a
        ``reads(key)`` of its own (the model, the reward, a method's section) when that says so. A method's
        class may add conditions across sections (``super().reads(key) and ...``)."""
        if key_matches(key, self.UNREAD):
            return False
        section, _, rest = key.partition(".")
        if key == "data.max_len":
            return self.READS_CAPTIONS
        if key == "data.seq_per_img":
            return self.READS_CAPTIONS and self.CAPTIONS_PER_IMAGE
        if key == "allow_init_mismatch":
            return self.init_from is not None
        if key == "data.min_count":
            return self.init_from is None and not architecture(self.model.arch).brings_text_codec
        if key == "model.arch":
            return self.init_from is None
        if section == "model":
            return model_reads(self.model, rest) and (self.init_from is None or rest in training_keys())
        own = getattr(self, section, None) if rest else None
        return own.reads(rest) if isinstance(own, ReadsKeys) else True

    def key_help(self, key: str, text: str) -> str:
        """The help ``--help-config`` shows for ``key`` (its field's, ``text``) in a run of this config: the
        architectures ``model.arch`` takes (the registered architectures); what ``data.max_len`` and ``decode.max_len``
        count is the subwords of an hf captioner built by the run."""
        if key == "model.arch":  # the architectures registered now (an architecture's module and its line in ARCHITECTURES)
            return f"{text}: {', '.join(archs())}"
        if self.init_from is None and self.model.arch == "hf":
            return {"data.max_len": MAX_LEN_HELP_HF, "decode.max_len": DECODE_MAX_LEN_HELP_HF}.get(key, text)
        return text

    def sets(self, key: str) -> bool:
        """Whether the run itself sets the dotted ``key``: its recipe or overrides name it (:attr:`set_keys`), even
        to its default; for a config built in Python without them, whether its value differs from the default."""
        if self.set_keys is not None:
            return key in self.set_keys
        return flatten(to_dict(self)).get(key) != flatten(to_dict(type(self)())).get(key)

    def as_typically_run(self) -> RunConfig:
        """This config as its method is meant to run: one that continues an XE model (:attr:`FROM_XE`) with an
        ``init_from`` (a placeholder when none is set). The keys ``rlcap train --help-config`` and docs/CONFIG.md
        list are those such a run reads."""
        if self.init_from or not self.FROM_XE:
            return self
        return dataclasses.replace(self, init_from="XE_RUN/best")


@dataclass
class SequenceRunConfig(RunConfig):
    """The run config of a sequence-level method, whose policy learns from a reward over sampled captions:
    :class:`RunConfig` plus the ``rl`` budget and rollouts and the ``reward`` section. Such a method continues
    an XE model (:attr:`RunConfig.FROM_XE`) and, unless its class says otherwise, scores its own captions
    against the raw references without reading the encoded ones."""

    FROM_XE: ClassVar[bool] = True
    READS_CAPTIONS: ClassVar[bool] = False
    BATCH_KEY: ClassVar[str | None] = "rl.batch_size"
    # the method's loss adds the KL term to the reference policy (rlcap.methods.reference.add_kl, or a term of its
    # own as grpo's): only such a method reads rl.kl_coef. Declared, not assumed, so that a loop without the term
    # refuses the key (load_run_config) instead of ignoring it
    KL_TERM: ClassVar[bool] = False

    rl: RLConfig = help_field(RLConfig, "budget and rollouts of the sequence-level methods")
    reward: RewardConfig = help_field(RewardConfig, "rewards and their weights")

    @property
    def learned_reward(self) -> RewardConfig | None:
        return self.reward

    def reads(self, key: str) -> bool:
        """:meth:`RunConfig.reads`, and ``rl.micro_batch`` only for a policy its architecture samples without autograd
        and scores in one teacher-forced pass (:attr:`rlcap.models.architecture.Architecture.scores_samples`:
        ``model.arch=hf``); other policies are scored step by step as they sample. ``rl.kl_coef`` only for a
        method that declares the KL term (:attr:`KL_TERM`)."""
        if key == "rl.micro_batch" and not architecture(self.model.arch).scores_samples:
            return False
        if key == "rl.kl_coef" and not self.KL_TERM:
            return False
        return super().reads(key)
