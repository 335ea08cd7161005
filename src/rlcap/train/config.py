"""The run config shared by every training loop: one dataclass per concern."""

from __future__ import annotations

from dataclasses import dataclass

from rlcap.config import help_field
from rlcap.data.loader import DataConfig
from rlcap.errors import ConfigError
from rlcap.metrics.evaluate import PYCOCOEVALCAP_METRICS
from rlcap.models.config import ModelConfig
from rlcap.models.embedding import EmbeddingModelConfig
from rlcap.models.value import VALUE_MODELS
from rlcap.rewards import RewardConfig

OPTIMIZERS = ("adam", "adamw")


def check_min(key: str, value: int | float, least: int | float) -> None:
    """One clear line for a setting below its least allowed value."""
    if value < least:
        raise ConfigError(f"{key}: expected at least {least}, got {value}")


def check_positive(key: str, value: float) -> None:
    """One clear line for a setting that must be above 0."""
    if not value > 0:
        raise ConfigError(f"{key}: expected > 0, got {value}")


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

    def validate(self) -> None:
        check_min("xe.epochs", self.epochs, 1)
        check_min("xe.batch_size", self.batch_size, 1)
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"xe.label_smoothing: expected a number in [0, 1), got {self.label_smoothing}")


SAMPLE_METHODS = ("sample", "beam")
SCST_BASELINES = ("greedy", "leave_one_out", "running_mean", "none")
SLE_BASELINES = ("greedy", "leave_one_out")


@dataclass
class DecodeSettings:
    """How captions are generated: one set of settings for training, validation and evaluation."""

    max_len: int = help_field(16, "most words per generated caption (RL samples, validation, evaluation)")
    temperature: float = help_field(1.0, "softmax temperature of the captions sampled for RL")
    beam_size: int = help_field(3, "beam size of validation and evaluation (1: greedy)")
    length_penalty: float = help_field(0.0, "beam search ranks by sum logprob / length**this (0: off)")
    no_repeat_ngram: int = help_field(0, "beam search never repeats an n-gram of this many words (0: off); "
                                         "002's trajectories too")

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
    n_samples: int = help_field(5, "captions generated per image (s in 003_5a024678a14e9bf6.txt)")
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


@dataclass
class ScstConfig:
    """Self-critical sequence training (Rennie et al. 2017) and its baselines."""

    baseline: str = help_field("greedy", "greedy (self-critical), leave_one_out, running_mean or none")
    running_mean_decay: float = help_field(0.9, "decay of the running-mean baseline")

    def validate(self) -> None:
        if self.baseline not in SCST_BASELINES:
            raise ConfigError(f"scst.baseline: {self.baseline!r} is not one of {list(SCST_BASELINES)}")
        if not 0 <= self.running_mean_decay < 1:
            raise ConfigError(f"scst.running_mean_decay: expected a number in [0, 1), got {self.running_mean_decay}")


@dataclass
class SllMeConfig(ScstConfig):
    """SLL-ME (003_5a024678a14e9bf6.txt sec. 5.2): SCST plus a per-word entropy bonus."""

    entropy_weight: float = help_field(0.01, "weight of the per-step entropy bonus (the paper's 0.01)")

    def validate(self) -> None:
        super().validate()
        if self.entropy_weight < 0:
            raise ConfigError(f"sll_me.entropy_weight: expected >= 0, got {self.entropy_weight}")


@dataclass
class SllSleConfig:
    """SLL-SLE (003_5a024678a14e9bf6.txt eq. 8-16): the greedy baseline for precision (sec. 4.3), the
    mean pairwise distance for diversity."""

    alpha: float = help_field(0.75, "weight of the precision term against diversity (eq. 8-9)")
    baseline: str = help_field(
        "greedy", "precision baseline: greedy (self-critical, sec. 4.3) or leave_one_out (the mean of the image's "
        "other samples; centred per image, which sampling at a temperature below 1 needs: docs/RL.md)")

    def validate(self) -> None:
        if not 0 <= self.alpha <= 1:
            raise ConfigError(f"sll_sle.alpha: expected a number in [0, 1], got {self.alpha}")
        if self.baseline not in SLE_BASELINES:
            raise ConfigError(f"sll_sle.baseline: {self.baseline!r} is not one of {list(SLE_BASELINES)}")


@dataclass
class PgConfig:
    """PG-SPIDEr (001_ce1e9980f3932db2.txt): Monte-Carlo Q per word and a learned baseline MLP."""

    rollouts: int = help_field(3, "K: Monte-Carlo rollouts completing every prefix g_1:t (001's Q estimate)")
    samples: int = help_field(1, "M: captions sampled per image (001 uses M = 1)")
    baseline_lr: float = help_field(1e-3, "learning rate of the baseline MLP B_phi (its own Adam, part 'baseline')")
    baseline_hidden: int = help_field(256, "hidden units of the baseline MLP B_phi")

    def validate(self) -> None:
        check_min("pg.rollouts", self.rollouts, 1)
        check_min("pg.samples", self.samples, 1)
        check_min("pg.baseline_hidden", self.baseline_hidden, 1)
        check_positive("pg.baseline_lr", self.baseline_lr)


@dataclass
class MixerConfig:
    """MIXER (Ranzato et al. 2016, as 001_ce1e9980f3932db2.txt describes it): XE on the first M words
    of the reference, REINFORCE on the words sampled after them; M annealed to 0."""

    start: int = help_field(16, "M in the first epoch (Ranzato: the longest caption, i.e. pure XE)")
    delta: int = help_field(2, "Delta: M decreases by this every epochs_per_stage epochs, down to 0")
    epochs_per_stage: int = help_field(2, "epochs trained at each M")
    baseline_lr: float = help_field(1e-3, "learning rate of the baseline MLP on the hidden state (part 'baseline')")
    baseline_hidden: int = help_field(256, "hidden units of the baseline MLP")

    def validate(self) -> None:
        check_min("mixer.start", self.start, 0)
        check_min("mixer.delta", self.delta, 1)
        check_min("mixer.epochs_per_stage", self.epochs_per_stage, 1)
        check_min("mixer.baseline_hidden", self.baseline_hidden, 1)
        check_positive("mixer.baseline_lr", self.baseline_lr)


EMBEDDING_LOSSES = ("ranking", "infonce")


@dataclass
class EmbeddingConfig:
    """algorithm=embedding: the image-caption embedding of 000_45a29dab880026f9.txt sec. 3.3.1, trained
    with eq. 5's ranking loss, the model the embedding reward (eq. 6) loads; or, with ``loss: infonce``,
    the same dual encoder trained contrastively, the retriever of 002's rewards (``rlcap retrieval``)."""

    model: EmbeddingModelConfig = help_field(EmbeddingModelConfig, "sizes of the embedding model")
    epochs: int = help_field(10, "training epochs")
    batch_size: int = help_field(128, "image-caption pairs per batch, one caption per image; the batch's other "
                                      "images and captions are the negatives of eq. 5")
    margin: float = help_field(0.2, "margin of eq. 5's hinge (000's penalty gamma, in (0, 1))")
    skip_identical: bool = help_field(True, "a caption word for word the same as the pair's own is not a negative "
                                            "(frequent on shapes, where many images share a caption)")
    loss: str = help_field("ranking", "ranking: 000's eq. 5 hinge; infonce: the symmetric contrastive loss of "
                                      "CLIP (the retriever of 002, rlcap.rl.contrastive.info_nce_loss)")
    temperature: float = help_field(0.07, "infonce: the softmax temperature (CLIP's initial 0.07)")

    def validate(self) -> None:
        if self.loss not in EMBEDDING_LOSSES:
            raise ConfigError(f"embedding.loss: {self.loss!r} is not one of {', '.join(EMBEDDING_LOSSES)}")
        if self.temperature <= 0:
            raise ConfigError(f"embedding.temperature: expected a positive number, got {self.temperature}")
        check_min("embedding.epochs", self.epochs, 1)
        check_min("embedding.batch_size", self.batch_size, 2)
        if not 0 < self.margin < 1:
            raise ConfigError(f"embedding.margin: expected a number in (0, 1), got {self.margin}")


@dataclass
class ActorCriticConfig:
    """algorithm=ac: actor-critic with a value network (000_45a29dab880026f9.txt sec. 3.2.2, 3.3.2,
    eq. 8-12). The policy trains with ``optim``, the value network with these settings."""

    value_lr: float = help_field(5e-4, "learning rate of the value network (000 sec. 4.1: 5e-4)")
    value_lr_decay_every: int = help_field(2, "decay the value network's rate every this many joint epochs "
                                              "(000 sec. 4.1: 2; 0: never)")
    value_lr_decay_rate: float = help_field(0.9, "its decay factor (000 sec. 4.1: 0.9)")
    value_pretrain_epochs: int = help_field(1, "epochs of value training on samples of the frozen XE policy "
                                               "before the joint phase (000 sec. 3.3.2; the paper gives no number)")
    value_features: str = help_field("fc", "what the value network reads of the image: fc (the pooled vector) or "
                                           "att (also attention over the region features, conditioned on its LSTM "
                                           "state at each step, as an UpDown policy sees them)")
    lookahead: list[float] = help_field([], "after training, decode the validation split with lookahead "
                                            "inference at each of these lambdas (Fig. 1) and write lookahead.json "
                                            "beside the checkpoints ([]: skip; 1.0 is plain beam search)")

    def validate(self) -> None:
        if self.value_lr <= 0:
            raise ConfigError(f"ac.value_lr must be positive, got {self.value_lr}")
        check_min("ac.value_lr_decay_every", self.value_lr_decay_every, 0)
        check_min("ac.value_pretrain_epochs", self.value_pretrain_epochs, 0)
        if self.value_features not in VALUE_MODELS:
            raise ConfigError(f"ac.value_features: {self.value_features!r} is not one of {list(VALUE_MODELS)}")
        bad = [x for x in self.lookahead if not 0 <= x <= 1]
        if bad:
            raise ConfigError(f"ac.lookahead: every lambda must be in [0, 1], got {bad[0]}")


@dataclass
class CriticConfig:
    """algorithm=critic: 004's internal critic (eq. 9-10), trained on the training captions' chunk
    boundaries (``rlcap.data.chunker``) before the HRL captioner, which loads it (``model.critic_from``)."""

    epochs: int = help_field(5, "training epochs")
    batch_size: int = help_field(128, "captions per batch")

    def validate(self) -> None:
        check_min("critic.epochs", self.epochs, 1)
        check_min("critic.batch_size", self.batch_size, 1)


HRL_PREFIX_METRICS = ("cider_d", "cider")


@dataclass
class HrlConfig:
    """algorithm=hrl: 004's Algorithm 1 from an XE checkpoint of ``model.arch: hrl`` (manager and worker
    warm-started together, eq. 26), alternating worker and manager phases."""

    gamma: float = help_field(0.95, "discount of the delta-CIDEr-D returns (004 eq. 24-25: 0.95)")
    switch_every: int = help_field(50, "steps of one phase before the other trains (004 leaves the schedule "
                                       "to its supplement; docs/VIDEO.md)")
    first: str = help_field("worker", "the phase that starts: worker or manager")
    goal_noise: float = help_field(0.1, "standard deviation of the manager's Gaussian goal exploration (eq. 23)")
    baseline_lr: float = help_field(1e-3, "learning rate of the two linear baselines (on h_W and h_M)")
    worker_samples: int = help_field(1, "captions sampled per clip in a worker phase (Algorithm 1: one; more "
                                        "sample more captions per step, against the same linear baseline)")
    prefix_metric: str = help_field("cider_d", "what scores every prefix for the delta rewards (004 sec. 3.3.3): "
                                               "cider_d: the run's reward (reward.weights); cider: plain CIDEr, no "
                                               "length penalty, same references (docs/VIDEO.md)")

    def validate(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"hrl.gamma: expected a number in [0, 1], got {self.gamma}")
        check_min("hrl.switch_every", self.switch_every, 1)
        check_min("hrl.worker_samples", self.worker_samples, 1)
        if self.first not in ("worker", "manager"):
            raise ConfigError(f"hrl.first: {self.first!r} is not one of worker, manager")
        if self.prefix_metric not in HRL_PREFIX_METRICS:
            raise ConfigError(f"hrl.prefix_metric: {self.prefix_metric!r} is not one of "
                              f"{', '.join(HRL_PREFIX_METRICS)}")
        if self.goal_noise < 0 or self.baseline_lr <= 0:
            raise ConfigError("hrl.goal_noise must be >= 0 and hrl.baseline_lr > 0")


WTF_TRAJECTORIES = ("both", "gt", "bs", "sample")
WTF_GT_WEIGHTS = ("reward", "positive")
WTF_BS_BASELINES = ("none", "batch_mean")
WTF_SIMILARITIES = ("bicont", "i2t", "t2i", "clip_s")


@dataclass
class WtfRlConfig:
    """algorithm=wtf_rl: distinctive captioning, 002_b2d5a89fd5f9a310.txt eq. 3. The retriever and its
    image bank are ``reward.paths.retrieval`` and ``reward.paths.retrieval_bank``; tau and the hard
    negatives are ``reward.retrieval_tau`` and ``reward.hard_negatives``."""

    trajectories: str = help_field("both", "both: beam-search and ground-truth trajectories (WTF-RL); gt: "
                                           "ground truth only (WTF); bs: beam search only (RL); sample: SCST's "
                                           "samples with the greedy baseline (SCST-Discriminator)")
    similarity: str = help_field("bicont", "r_sim: bicont (eq. 2), i2t (RL-Unidirectional), t2i, or clip_s")
    alpha: float = help_field(0.94, "r = alpha * r_sim + (1 - alpha) * p_D (002 sec. 4.1: 0.94)")
    gt_weight: str = help_field("reward", "the weight of a ground-truth trajectory: reward, r(x_gt) as eq. 3 "
                                          "writes it; positive, max(r(x_gt), 0): never push a human caption away")
    bs_baseline: str = help_field("none", "subtracted from r(x_bs), the weight of a beam-search trajectory: none, "
                                          "eq. 3 as written; batch_mean, the batch's mean r(x_bs)")
    mined_captions: int = help_field(0, "the policy's greedy captions of each batch image's first K mined neighbours "
                                        "join eq. 2's text pool (002 sec. 3.4: mined images are added to the batch; "
                                        "at most reward.hard_negatives; 0: the batch's own captions only)")
    discriminator_hidden: int = help_field(512, "hidden width of the discriminator's 3-layer MLP")
    discriminator_image: bool = help_field(True, "the discriminator also reads the image's embedding")
    discriminator_lr: float = help_field(1e-4, "the discriminator's learning rate (Adam)")
    discriminator_pretrain_epochs: int = help_field(1, "epochs of discriminator pretraining on ground truth "
                                                       "versus the XE model's beam search, before the loop")

    def validate(self) -> None:
        if self.trajectories not in WTF_TRAJECTORIES:
            raise ConfigError(f"wtf_rl.trajectories: {self.trajectories!r} is not one of {', '.join(WTF_TRAJECTORIES)}")
        if self.similarity not in WTF_SIMILARITIES:
            raise ConfigError(f"wtf_rl.similarity: {self.similarity!r} is not one of {', '.join(WTF_SIMILARITIES)}")
        if self.gt_weight not in WTF_GT_WEIGHTS:
            raise ConfigError(f"wtf_rl.gt_weight: {self.gt_weight!r} is not one of {', '.join(WTF_GT_WEIGHTS)}")
        if self.bs_baseline not in WTF_BS_BASELINES:
            raise ConfigError(f"wtf_rl.bs_baseline: {self.bs_baseline!r} is not one of {', '.join(WTF_BS_BASELINES)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"wtf_rl.alpha: expected a number in [0, 1], got {self.alpha}")
        check_min("wtf_rl.discriminator_hidden", self.discriminator_hidden, 1)
        check_min("wtf_rl.mined_captions", self.mined_captions, 0)
        if self.mined_captions and (self.trajectories == "sample" or self.similarity == "clip_s"):
            raise ConfigError("wtf_rl.mined_captions extends eq. 2's text pool: it needs similarity bicont, i2t or t2i "
                              "and trajectories both, gt or bs")
        check_min("wtf_rl.discriminator_pretrain_epochs", self.discriminator_pretrain_epochs, 0)
        if self.discriminator_lr <= 0:
            raise ConfigError(f"wtf_rl.discriminator_lr: expected a positive number, got {self.discriminator_lr}")


# val.metric: the caption metrics of rlcap.metrics.score_captions a run can keep best/ by, and BCMR
# (001's four metrics summed, as the bcmr reward sums them: rlcap.train.session.VAL_COMBINED).
VAL_METRICS = (*PYCOCOEVALCAP_METRICS, "SPIDEr", "BCMR")
AUTO = "auto"
# Loops whose policy does not learn from reward.weights: auto keeps them by CIDEr-D.
NO_REWARD = ("xe", "embedding", "critic")


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


def auto_val_metric(algorithm: str, reward: RewardConfig) -> str:
    """What ``val.metric: auto`` keeps best/ by: the metric the run's reward optimises, so that the
    checkpoint kept is the one best at what the run trains for (001 optimises SPIDEr for its gain in
    SPICE, which selecting by CIDEr-D would select against); CIDEr-D for loops without a reward."""
    if algorithm in NO_REWARD:
        return "CIDEr"
    if "spider" in reward.weights:
        return "SPIDEr"
    if "bcmr" in reward.weights:
        return "BCMR"
    return "CIDEr"


def metric_label(name: str) -> str:
    """A validation score's name in log lines: pycocoevalcap's CIDEr is CIDEr-D."""
    return "CIDEr-D" if name == "CIDEr" else name


@dataclass
class RunConfig:
    """Everything one training run needs: shared sections (data, model, optim, decode, val, rl, reward)
    and one section per algorithm (xe, scst, sll_me, sll_sle), read only by that algorithm's loop."""

    algorithm: str = help_field("xe", "training loop: xe, scst, sll_me, sll_sle, embedding, ac, pg, mixer, wtf_rl, critic or hrl "
                                      "(rlcap.train.registry.TRAINERS)")
    out_dir: str = help_field("runs/run", "run folder: checkpoints, logs, predictions")
    seed: int = help_field(1234, "random seed for initialisation, data order and sampling")
    resume: bool = help_field(False, "continue the run in out_dir from its last checkpoint, applying changed "
                              "settings that a run may change (learning rate, epochs, ...)")
    overwrite: bool = help_field(False, "replace a run already in out_dir (otherwise a run with the same settings "
                                        "continues and one with other settings is refused)")
    init_from: str | None = help_field(None, "start from the weights of this checkpoint folder")
    allow_init_mismatch: bool = help_field(False, "start from init_from even when its vocabulary lacks words of "
                                                  "this run's training captions or its features' image size differs "
                                                  "(the run keeps the checkpoint's vocabulary)")
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
    decode: DecodeSettings = help_field(DecodeSettings, "caption generation: RL samples, validation, evaluation")
    rl: RLConfig = help_field(RLConfig, "budget and rollouts shared by the sequence-level (RL) loops")
    scst: ScstConfig = help_field(ScstConfig, "algorithm=scst: the baseline")
    sll_me: SllMeConfig = help_field(SllMeConfig, "algorithm=sll_me: SCST plus an entropy bonus")
    sll_sle: SllSleConfig = help_field(SllSleConfig, "algorithm=sll_sle: SCST plus sequence-level exploration")
    embedding: EmbeddingConfig = help_field(EmbeddingConfig, "algorithm=embedding: the embedding reward's model (000)")
    ac: ActorCriticConfig = help_field(ActorCriticConfig, "algorithm=ac: actor-critic with a value network (000)")
    pg: PgConfig = help_field(PgConfig, "algorithm=pg: PG-SPIDEr, Monte-Carlo rollouts and a baseline MLP (001)")
    mixer: MixerConfig = help_field(MixerConfig, "algorithm=mixer: MIXER, XE on a prefix annealed to 0 (001)")
    critic: CriticConfig = help_field(CriticConfig, "algorithm=critic: the internal critic of 004")
    hrl: HrlConfig = help_field(HrlConfig, "algorithm=hrl: 004's alternating worker and manager training")
    wtf_rl: WtfRlConfig = help_field(WtfRlConfig, "algorithm=wtf_rl: distinctive captioning, WTF and RL with a "
                                                  "retrieval reward and a discriminator (002)")
    reward: RewardConfig = help_field(RewardConfig, "rewards and their weights")

    def __post_init__(self) -> None:
        # val.metric auto becomes the metric it stands for here, so that config.json and every
        # checkpoint record the concrete one (and RunConfig()'s defaults, which decide whether a run
        # written before val.metric existed continues unchanged, hold it too)
        self.resolve_val_metric()

    def resolve_val_metric(self) -> None:
        """Replace ``val.metric: auto`` by :func:`auto_val_metric` (a concrete metric stays)."""
        if self.val.metric == AUTO:
            self.val.metric = auto_val_metric(self.algorithm, self.reward)

    def validate(self) -> None:
        check_min("threads", self.threads, 1)
        check_min("log_every", self.log_every, 1)
        check_min("save_every", self.save_every, 0)
        check_min("max_steps", self.max_steps, 0)
        method = {"scst": self.scst, "sll_me": self.sll_me}.get(self.algorithm)
        if method is not None and method.baseline == "leave_one_out" and self.rl.n_samples < 2:
            raise ConfigError(f"{self.algorithm}.baseline=leave_one_out needs rl.n_samples >= 2, got {self.rl.n_samples}")
