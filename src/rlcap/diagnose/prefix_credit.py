"""Where [Wang18]'s per-word delta rewards put the cost of a wrong prefix, on a dataset's own captions.

The measurement is :func:`rlcap.diagnose.credit_shift.prefix_credit`: the first ``swap`` words of
each caption are replaced by another clip's caption's and the delta rewards compared before and
after. Here its captions come from a dataset file: the first caption of each of a split's first
clips is the caption measured, the clip's other captions its references, and a metric's document
frequencies count the other captions of every training clip (and of the split's)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from rlcap.data.readers import by_split, read_dataset
from rlcap.errors import DataError
from rlcap.rewards import RewardBatch, RewardConfig, build_reward
from rlcap.diagnose.credit_shift import CreditShift, prefix_credit


class PrefixCredit(NamedTuple):
    """What :func:`prefix_credit_on_dataset` measured: the settings and one shift per metric."""

    dataset: str
    split: str
    clips: int                      # clips whose first caption was measured (a metric may leave some out)
    swap: int
    eos_counts: bool
    shifts: dict[str, CreditShift]  # metric (reward name) -> the mean change per caption


def prefix_credit_on_dataset(dataset: str | Path, split: str = "train", clips: int = 300, swap: int = 5,
                             metrics: tuple[str, ...] = ("cider_d", "cider"), eos_counts: bool = True,
                             fmt: str = "auto", coco_splits: str | Path | None = None) -> PrefixCredit:
    """:func:`~rlcap.diagnose.credit_shift.prefix_credit` under each of ``metrics`` (reward names that
    read only captions and references: ``cider_d``, ``cider``, ``bleu_4``, ...), on the first caption of
    the first ``clips`` clips of ``split`` (0: all) that have at least two captions.

    ``eos_counts``: the end token is scored as in training (``reward.eos_counts``). ``fmt`` and
    ``coco_splits`` read the dataset as ``data.format`` and ``data.coco_splits`` do."""
    grouped = by_split(read_dataset(dataset, fmt, coco_splits))
    for name in dict.fromkeys(("train", split)):
        if name not in grouped:
            raise DataError(f"{dataset} has no images in split {name!r} (has: {sorted(grouped)}); the measurement "
                            "needs the split measured and the training captions (document frequencies)")
    # 1. the caption measured and its references: a clip's first caption against its others
    records = [r for r in grouped[split] if len(r.captions) >= 2]
    if len(records) < 2:
        raise DataError(f"{dataset}: split {split!r} has {len(records)} clips with two or more captions; "
                        "the measurement needs at least two (one caption measured, the others its references)")
    records = records[:clips] if clips > 0 else records
    refs = {r.id: list(r.captions[1:]) for name in dict.fromkeys(("train", split)) for r in grouped[name]
            if len(r.captions) >= 2}
    ids = [r.id for r in records]
    captions, batch = [r.captions[0] for r in records], RewardBatch(ids, [refs[i] for i in ids])
    shifts = {}
    for metric in metrics:
        # 2. the delta rewards before and after the swap, scored by this metric alone
        cfg = RewardConfig(weights={metric: 1.0}, eos_counts=eos_counts)
        with build_reward(cfg, refs) as reward:
            shifts[metric] = prefix_credit(reward, captions, batch, swap=swap)
    return PrefixCredit(str(dataset), split, len(records), swap, eos_counts, shifts)
