"""The run config shared by every training loop: one dataclass per concern."""

from __future__ import annotations

from dataclasses import dataclass

from rlcap.config import help_field
from rlcap.data.loader import DataConfig
from rlcap.errors import ConfigError
from rlcap.models.config import ModelConfig
from rlcap.rewards import RewardConfig

OPTIMIZERS = ("adam", "adamw")
CLIP_MODES = ("norm", "value")


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
        if self.lr <= 0:
            raise ConfigError(f"optim.lr must be positive, got {self.lr}")


@dataclass
class XEConfig:
    epochs: int = help_field(10, "training epochs")
    batch_size: int = help_field(50, "images per batch (each with data.seq_per_img captions)")
    label_smoothing: float = help_field(0.0, "label smoothing of the cross-entropy (0: none)")


SAMPLE_METHODS = ("sample", "beam")
BASELINES = ("greedy", "leave_one_out", "running_mean", "none")


@dataclass
class RLConfig:
    """Sequence-level training (SCST and the methods built on it)."""

    epochs: int = help_field(5, "training epochs")
    batch_size: int = help_field(50, "images per batch")
    n_samples: int = help_field(5, "captions generated per image (s in 003_5a024678a14e9bf6.txt)")
    sample_method: str = help_field("sample", "how captions are generated: sample (multinomial) or beam (n-best)")
    temperature: float = help_field(1.0, "sampling temperature")
    max_len: int = help_field(16, "longest sampled caption in words")
    baseline: str = help_field("greedy", "greedy (self-critical), leave_one_out, running_mean or none")
    running_mean_decay: float = help_field(0.9, "decay of the running-mean baseline")
    entropy_weight: float = help_field(0.0, "weight of the per-step entropy bonus (SLL-ME; the paper uses 0.01)")
    sle_alpha: float = help_field(0.75, "SLL-SLE: weight of the precision term against diversity (eq. 8-9)")
    rollout_dropout: bool = help_field(
        True, "keep dropout on while generating the training captions, as self-critical.pytorch does "
        "(false: sample from the network validation decodes with; docs/RL.md)")

    def validate(self) -> None:
        if self.sample_method not in SAMPLE_METHODS:
            raise ConfigError(f"rl.sample_method: {self.sample_method!r} is not one of {list(SAMPLE_METHODS)}")
        if self.baseline not in BASELINES:
            raise ConfigError(f"rl.baseline: {self.baseline!r} is not one of {list(BASELINES)}")
        if self.n_samples < 1:
            raise ConfigError("rl.n_samples must be at least 1")
        if self.baseline == "leave_one_out" and self.n_samples < 2:
            raise ConfigError("rl.baseline=leave_one_out needs rl.n_samples >= 2")


@dataclass
class ValConfig:
    split: str = help_field("val", "split used to pick the best checkpoint")
    max_images: int = help_field(0, "validate on at most this many images (0: all)")
    batch_size: int = help_field(100, "images decoded at once")
    max_len: int = help_field(16, "longest generated caption during validation")
    beam_size: int = help_field(1, "beam size for validation decoding (1: greedy)")


@dataclass
class RunConfig:
    """Everything one training run needs. Sections: data, model, optim, xe, val."""

    algorithm: str = help_field("xe", "training loop: xe, scst or sll_sle (see rlcap.api.TRAINERS)")
    out_dir: str = help_field("runs/run", "run folder: checkpoints, logs, predictions")
    seed: int = help_field(1234, "random seed for initialisation, data order and sampling")
    resume: bool = help_field(False, "continue the run in out_dir from its last checkpoint")
    init_from: str | None = help_field(None, "start from the weights of this checkpoint folder")
    threads: int = help_field(2, "torch CPU threads")
    log_every: int = help_field(20, "write a log line every this many steps")
    save_every: int = help_field(0, "also checkpoint every this many steps (0: at the end of each epoch only)")
    max_steps: int = help_field(0, "stop after this many optimizer steps in total (0: no limit)")
    tensorboard: bool = help_field(True, "also write TensorBoard event files")
    data: DataConfig = help_field(DataConfig, "caption data and features")
    model: ModelConfig = help_field(ModelConfig, "captioning model")
    optim: OptimConfig = help_field(OptimConfig, "optimizer and learning-rate schedule")
    xe: XEConfig = help_field(XEConfig, "cross-entropy training")
    val: ValConfig = help_field(ValConfig, "validation during training")
    rl: RLConfig = help_field(RLConfig, "sequence-level (reinforcement) training")
    reward: RewardConfig = help_field(RewardConfig, "rewards and their weights")
