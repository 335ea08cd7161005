"""The image bank: neighbours mined by hand, the pools the rewards build, save and load."""

import pytest
import torch

from rlcap.errors import DataError
from rlcap.rewards.image_bank import ImageBank, load_image_bank, mine_neighbours

# four unit vectors at angles 0, 10, 30 and 90 degrees
ANGLES = torch.tensor([0.0, 10.0, 30.0, 90.0]) * torch.pi / 180
EMB = torch.stack([ANGLES.cos(), ANGLES.sin()], dim=1)


def test_mining_by_hand():
    # candidates: all four -> nearest of 0 is 10 deg (row 1), then 30 (row 2); of 3 (90 deg): 30, then 10
    got = mine_neighbours(EMB, torch.arange(4), 2)
    assert got.tolist() == [[1, 2], [0, 2], [1, 0], [2, 1]]
    # only rows 0 and 3 are training images: every image's neighbours come from them, never itself
    assert mine_neighbours(EMB, torch.tensor([0, 3]), 1).tolist() == [[3], [0], [0], [0]]
    assert mine_neighbours(EMB, torch.tensor([0, 3]), 5).shape == (4, 1)  # at most the other candidates


def test_pool_adds_unseen_neighbours_and_maps_captions(tmp_path):
    bank = ImageBank(["a", "b", "c", "d"], EMB, mine_neighbours(EMB, torch.arange(4), 2), "r", "dual_encoder")
    images, owner = bank.pool(["b", "b", "d"], hard_negatives=1)
    # distinct images b, d; then b's first neighbour (a), d's first neighbour (c)
    torch.testing.assert_close(images, EMB[[1, 3, 0, 2]])
    assert owner.tolist() == [0, 0, 1]
    images, _ = bank.pool(["a", "b"], hard_negatives=1)  # each one's nearest is the other, already in the pool
    torch.testing.assert_close(images, EMB[[0, 1]])
    bank.save(tmp_path / "bank.h5")
    back = load_image_bank(tmp_path / "bank.h5")
    assert back.ids == bank.ids and back.kind == "dual_encoder" and back.retriever == "r"
    torch.testing.assert_close(back.embeddings, bank.embeddings)
    assert torch.equal(back.neighbours, bank.neighbours)
    with pytest.raises(DataError, match="'zz' is not in the image bank"):
        bank.rows(["a", "zz"])
    with pytest.raises(DataError, match="no image bank"):
        load_image_bank(tmp_path / "none.h5")


def test_a_bank_built_by_another_retriever_is_refused(tmp_path):
    # its embeddings live in that retriever's space: rewards scored against them would be noise
    bank = ImageBank(["a", "b"], EMB[:2], torch.zeros(2, 0, dtype=torch.long), str(tmp_path / "ret_a"), "dual_encoder")
    bank.save(tmp_path / "bank.h5")
    with pytest.raises(DataError) as info:
        load_image_bank(tmp_path / "bank.h5", retriever=tmp_path / "ret_b")
    assert str(info.value) == (
        f"{tmp_path / 'bank.h5'} was built with the retriever {tmp_path / 'ret_a'}, not {tmp_path / 'ret_b'}: "
        f"rebuild it (rlcap retrieval index {tmp_path / 'ret_b'} --dataset ... --out {tmp_path / 'bank.h5'}) or give "
        f"the bank built with {tmp_path / 'ret_b'}")
    # the same folder, named by another path, is the same retriever
    assert load_image_bank(tmp_path / "bank.h5", retriever=tmp_path / "x" / ".." / "ret_a").ids == ["a", "b"]
