"""``RewardConfig``: which rewards, their weights, and the EOS and non-finite conventions."""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from rlcap.errors import ConfigError
from rlcap.rewards.registry import check_reward_name, settings_of_some, settings_read


def _field(default, help: str):
    if isinstance(default, dict):
        value = dict(default)
        return dataclasses.field(default_factory=lambda: dict(value), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class RewardConfig:
    """The sequence-level reward: a weighted sum of named rewards (TRL's ``reward_weights``)."""

    weights: dict[str, float] = _field(
        {"cider_d": 1.0},
        "reward name -> weight, summed. Names: cider_d, cider (plain: no length penalty), bleu_1..bleu_4, "
        "meteor, rouge_l, spice, spider (SPICE in Python, no Java), length (a penalty past reward.length_target), "
        "repetition (minus the share of repeated n-grams), "
        "qa_utility (a text-only reader's answers from the caption, [Xing26]), or a "
        "user reward by dotted import path ('mypkg.mod:func' or 'mypkg.mod.func') whose object is "
        "the reward callable (captions, batch) -> Tensor[len(captions)]",
    )
    eos_counts: bool = _field(
        True,
        "score the end of the caption as a token: an explicit end token is appended to the candidate "
        "and to every reference before CIDEr-D and BLEU (also the CIDEr-D half of SPIDEr), as "
        "self-critical.pytorch does, which rewards finishing a caption properly. ROUGE-L, METEOR "
        "and SPICE always score the plain words",
    )
    nonfinite: Literal["raise", "zero"] = _field(
        "raise",
        "what to do when a reward returns NaN or inf for a caption: 'raise' an error naming the "
        "reward and caption, or 'zero' to score it 0 and log a warning",
    )
    cache_dir: str | None = _field(
        None,
        "directory where the CIDEr-D document frequencies of the training references are cached "
        "(None: computed in memory at start-up, not saved)",
    )

    paths: dict[str, str] = _field(
        {},
        "reward name -> the checkpoint (file or folder) that a learned reward loads, e.g. "
        "{embedding: runs/embedding/best}; the retrieval rewards read retrieval (a retriever) and "
        "retrieval_bank (its image bank); qa_utility reads qa_utility (the reader's folder) and qa_file (the "
        "questions by image id)",
    )

    retrieval_tau: float = _field(
        0.0,
        "temperature tau of the contrastive retrieval rewards i2t, t2i, bicont ([Chaffin24 eq. 2]); 0: the "
        "retriever's own (its InfoNCE temperature; CLIP: 1 / logit scale)",
    )
    hard_negatives: int = _field(
        5,
        "retrieval rewards: mined neighbours of each batch image added to the image pool ([Chaffin24 sec. 3.4])",
    )
    negative_captions: int = _field(
        0,
        "retrieval rewards: ground-truth captions of each mined neighbour added to the text pool (the "
        "i2t half's negatives; 0: the text pool holds the batch's own captions only; docs/DISTINCT.md)",
    )
    length_target: float = _field(
        0.0,
        "the length reward's target, in words: a caption longer than it scores -(words - target) / target (0: "
        "the mean length of the image's references; docs/RL.md, length terms)",
    )
    length_end: float = _field(
        0.0,
        "the length reward's floor: past the target it falls linearly to -1 at length_end x target and stays at -1 "
        "(CapRL++'s length reward, whose defaults give 1.5; docs/RL.md, length terms); 0: no floor, "
        "-(words - target) / target",
    )
    repetition_ngram: int = _field(
        3,
        "the repetition reward's n: a caption scores minus the share of its word n-grams that repeat one before it "
        "([Yeo25]; docs/RL.md, repetition)",
    )
    length_mask: dict[str, float] = _field(
        {},
        "reward name -> ratio: that reward scores 0 for a caption longer than ratio times its image's mean "
        "reference length, unchanged otherwise (length-conditional masking, [Ye26]; docs/RL.md); every name "
        "must be weighted in weights",
    )

    qa_shuffles: int = _field(
        4,
        "qa_utility: orders of each question's options the reader answers under, against its preference for some "
        "letters ([Xing26]); as many as the options puts the right answer once at each letter",
    )
    qa_score: Literal["probability", "accuracy"] = _field(
        "probability",
        "qa_utility: 'probability', the reader's probability of the right letter (the expected accuracy of a "
        "reader sampling its answer, as [Xing26]'s does, without the sampling noise), or 'accuracy', 1 when the "
        "right letter is its likeliest option",
    )
    qa_batch: int = _field(256, "qa_utility: (caption, question, order) prompts per forward pass of the reader")
    qa_precision: Literal["run", "fp32", "bf16", "fp16"] = _field(
        "run",
        "qa_utility: the precision the frozen reader's weights and forward passes take: 'run', the run's own "
        "(precision=...), or fp32, bf16 or fp16 whatever the policy trains in (a bf16 reader beside an fp32 "
        "policy: its speed and how far its rewards lie from fp32's in docs/RL.md, make bench-qa-reader)",
    )
    qa_temperature: float = _field(
        1.0,
        "qa_utility, score 'probability': the temperature the reader samples its answer at (the letters' "
        "probabilities from the logits divided by it); [Xing26]'s training reward samples at 0.6, its evaluation "
        "at 1.0 (docs/RL.md)",
    )
    qa_abstain: bool = _field(
        False,
        "qa_utility: offer [Xing26]'s 'Can not answer based on the caption' after each question's options, as "
        "their reward does; the reader's probability on it counts as wrong (a reader must have learned the option: "
        "an instruct model; docs/RL.md)",
    )

    def validate(self) -> None:
        """Check weights (non-empty, finite) and names (registered or a dotted path)."""
        if not self.weights:
            raise ConfigError("reward.weights is empty; give at least one reward, e.g. {cider_d: 1.0}")
        for name, weight in self.weights.items():
            check_reward_name(name)
            if not math.isfinite(weight):
                raise ConfigError(f"reward.weights.{name}: weight must be a finite number, got {weight}")
        if self.retrieval_tau < 0 or not math.isfinite(self.retrieval_tau):
            raise ConfigError(f"reward.retrieval_tau: expected a number >= 0, got {self.retrieval_tau}")
        if self.hard_negatives < 0:
            raise ConfigError(f"reward.hard_negatives: expected an integer >= 0, got {self.hard_negatives}")
        if self.negative_captions < 0:
            raise ConfigError(f"reward.negative_captions: expected an integer >= 0, got {self.negative_captions}")
        if self.length_target < 0 or not math.isfinite(self.length_target):
            raise ConfigError(f"reward.length_target: expected a number of words >= 0, got {self.length_target}")
        if self.length_end != 0 and not (math.isfinite(self.length_end) and self.length_end > 1):
            raise ConfigError(f"reward.length_end: expected 0 (no floor) or a ratio > 1, got {self.length_end}")
        if self.repetition_ngram < 1:
            raise ConfigError(f"reward.repetition_ngram: expected an integer >= 1, got {self.repetition_ngram}")
        for name, ratio in self.length_mask.items():
            if name not in self.weights:
                raise ConfigError(f"reward.length_mask.{name}: {name!r} is not a weighted reward; it masks one of "
                                  f"{', '.join(self.weights)}")
            if not (math.isfinite(ratio) and ratio > 0):
                raise ConfigError(f"reward.length_mask.{name}: expected a ratio > 0, got {ratio}")
        if self.qa_shuffles < 1 or self.qa_batch < 1:
            raise ConfigError(f"reward.qa_shuffles and reward.qa_batch: expected integers >= 1, got "
                              f"{self.qa_shuffles} and {self.qa_batch}")
        if not (math.isfinite(self.qa_temperature) and self.qa_temperature > 0):
            raise ConfigError(f"reward.qa_temperature: expected a number > 0, got {self.qa_temperature}")
        if self.qa_precision not in ("run", "fp32", "bf16", "fp16"):
            raise ConfigError(f"reward.qa_precision: {self.qa_precision!r} is not one of ['run', 'fp32', 'bf16', "
                              "'fp16']")
        if self.qa_score not in ("probability", "accuracy"):
            raise ConfigError(f"reward.qa_score: {self.qa_score!r} is not one of ['probability', 'accuracy']")
        if self.nonfinite not in ("raise", "zero"):
            raise ConfigError(f"reward.nonfinite: {self.nonfinite!r} is not one of ['raise', 'zero']")

    def __post_init__(self) -> None:
        self.validate()

    def reads(self, key: str) -> bool:
        """Whether a run of these rewards reads ``key`` (a key of this section, without ``reward.``): the
        settings of a learned or retrieval reward only when one is weighted
        (:data:`rlcap.rewards.registry.SETTINGS`)."""
        return key not in settings_of_some() or key in settings_read(self.weights)
