"""prefix_credit_on_dataset: a clip's first caption against its other captions, on a dataset file."""

import pytest

from rlcap.data.readers import by_split, read_dataset
from rlcap.diagnose.prefix_credit import prefix_credit_on_dataset
from rlcap.errors import DataError
from rlcap.rewards import CiderDReward, RewardBatch
from rlcap.diagnose.credit_shift import prefix_credit


def test_the_dataset_s_first_captions_against_the_others(tiny_data):
    dataset, _ = tiny_data
    got = prefix_credit_on_dataset(dataset, "val", clips=4, swap=2, metrics=("cider",), eos_counts=False)
    grouped = by_split(read_dataset(dataset))
    # document frequencies: the other captions of every training image and of the split's
    refs = {r.id: r.captions[1:] for r in grouped["train"] + grouped["val"]}
    measured = grouped["val"][:4]
    ids = [r.id for r in measured]
    want = prefix_credit(CiderDReward(refs, False, plain=True), [r.captions[0] for r in measured],
                         RewardBatch(ids, [refs[i] for i in ids]), swap=2)
    assert (got.split, got.clips, got.swap, got.eos_counts, list(got.shifts)) == ("val", 4, 2, False, ["cider"])
    assert got.shifts["cider"] == pytest.approx(want)


def test_a_split_the_dataset_lacks(tiny_data):
    with pytest.raises(DataError, match=r"no images in split 'valid' \(has: \['test', 'train', 'val'\]\)"):
        prefix_credit_on_dataset(tiny_data[0], "valid")
