"""What a reward factory receives: the run's references, vocabulary, feature sizes and paths.

Metric rewards read the training references; rewards that learn or load a model (the embedding
reward of [Shi18], the retrieval and discriminator rewards of [Chaffin24]) read the vocabulary, the feature
sizes, the device and the checkpoint named for them in ``reward.paths``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcap.errors import ConfigError
from rlcap.rewards.batch import TrainRefs


@dataclass(frozen=True)
class RewardContext:
    """Everything a reward factory may need; built once per run by :func:`rlcap.rewards.build_reward`.

    train_refs: training image id -> raw reference captions (CIDEr-D's document frequencies).
    eos_counts, cache_dir: the metric conventions of :class:`RewardConfig`; metric_device: where CIDEr-D
    is computed (auto, cpu or cuda; :meth:`cider_device` resolves it).
    vocab: the run's vocabulary (None outside a training run); fc_dim, att_dim: feature sizes.
    paths: reward name -> a file or folder that reward loads (a checkpoint of a learned reward).
    retrieval_tau, hard_negatives, negative_captions: the retrieval rewards' settings (``rewards/retrieval.py``).
    length_target: the ``length`` reward's target, in words (0: the mean length of the image's references);
    length_end: where it reaches its floor of -1, as a multiple of the target (0: no floor).
    repetition_ngram: the ``repetition`` reward's n (``rewards/repetition.py``).
    precision: the run's forward passes' (fp32, bf16, fp16), which a reward's own model reads in (the QA reader).
    qa_shuffles, qa_score, qa_batch, qa_temperature, qa_abstain, qa_precision: the ``qa_utility`` reward's settings
    (``rewards/qa_utility.py``); :meth:`qa_reader_precision` resolves the last against ``precision``.
    """

    train_refs: TrainRefs
    eos_counts: bool = True
    cache_dir: str | None = None
    vocab: Any = None
    fc_dim: int = 0
    att_dim: int = 0
    device: str = "cpu"
    metric_device: str = "auto"
    paths: dict[str, str] = field(default_factory=dict)
    retrieval_tau: float = 0.0
    hard_negatives: int = 5
    negative_captions: int = 0
    length_target: float = 0.0
    length_end: float = 0.0
    repetition_ngram: int = 3
    precision: str = "fp32"
    qa_shuffles: int = 4
    qa_score: str = "probability"
    qa_batch: int = 256
    qa_temperature: float = 1.0
    qa_abstain: bool = False
    qa_precision: str = "run"

    @classmethod
    def from_config(cls, cfg: Any, train_refs: TrainRefs, **run: Any) -> "RewardContext":
        """The context of a run's reward section (a :class:`~rlcap.rewards.reward_config.RewardConfig`): its
        conventions, paths, retrieval and QA settings; ``run``: vocab, fc_dim, att_dim, device, precision."""
        return cls(train_refs, eos_counts=cfg.eos_counts, cache_dir=cfg.cache_dir, paths=dict(cfg.paths),
                   retrieval_tau=cfg.retrieval_tau, hard_negatives=cfg.hard_negatives,
                   negative_captions=cfg.negative_captions, length_target=cfg.length_target,
                   length_end=cfg.length_end, repetition_ngram=cfg.repetition_ngram,
                   qa_shuffles=cfg.qa_shuffles, qa_score=cfg.qa_score, qa_batch=cfg.qa_batch,
                   qa_temperature=cfg.qa_temperature, qa_abstain=cfg.qa_abstain,
                   qa_precision=cfg.qa_precision, **run)

    def qa_reader_precision(self) -> str:
        """The QA reader's precision: ``qa_precision``, "run" meaning the run's own ``precision``."""
        return self.precision if self.qa_precision == "run" else self.qa_precision

    def cider_device(self) -> str:
        """Where CIDEr-D is computed: ``metric_device``, auto (what every run uses) meaning the run's device
        when it is a GPU; cpu or cuda force one (the equality tests and the GPU checks compare the two)."""
        if self.metric_device == "auto":
            return self.device if self.device.startswith("cuda") else "cpu"
        if self.metric_device == "cuda" and not self.device.startswith("cuda"):
            raise ConfigError(f"metric_device=cuda: the run's device is {self.device}; the reward is computed "
                              "where the sampled tokens are (use auto or cpu)")
        return self.device if self.metric_device == "cuda" else "cpu"

    def path(self, reward: str) -> Path:
        """The path given for ``reward`` in ``reward.paths``; one clear error when there is none."""
        if reward not in self.paths:
            raise ConfigError(f"reward {reward!r} loads a model: give its checkpoint as reward.paths.{reward}=PATH")
        return Path(self.paths[reward])
