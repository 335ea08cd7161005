"""A batch's processor outputs in one float32 row a picture (rlcap.encoders.pixel_rows): split per picture, packed,
unpacked and joined again, the processor's own tensors come back exactly, whatever their dtype and form."""

from __future__ import annotations

import pytest
import torch

from rlcap.encoders.pixel_rows import PixelLayout, join, per_picture
from rlcap.errors import RlcapError


def _processor_output(pictures: int, patches: int) -> dict[str, torch.Tensor]:
    """Qwen2-VL's form: patches of every picture one after the other, a grid row a picture, and a boolean mask."""
    return {"pixel_values": torch.randn(pictures * patches, 6),
            "image_grid_thw": torch.tensor([[1, 2, patches // 2]] * pictures),
            "pixel_attention_mask": torch.rand(pictures, 2, 3) > 0.5}


def test_rows_give_back_each_size_group_exactly():
    small, large = _processor_output(2, 4), _processor_output(1, 10)  # two sizes: 4 patches, then 10
    pictures = per_picture(small, 2) + per_picture(large, 1)
    assert pictures[0]["pixel_values"].equal(small["pixel_values"][:4])
    assert pictures[1]["image_grid_thw"].equal(torch.tensor([[1, 2, 2]]))
    layout = PixelLayout.of(pictures[0])
    assert layout.keys == ("image_grid_thw", "pixel_attention_mask", "pixel_values") and layout.ndims == (2, 3, 2)
    rows = layout.pack(pictures)
    # shapes (2 + 3 + 2 numbers), then 3 + 6 + 4 * 6 values for a small picture, 3 + 6 + 10 * 6 for the large one
    assert rows.dtype == torch.float32 and rows.shape == (3, 7 + 3 + 6 + 60)
    assert rows[0, :7].tolist() == [1, 3, 1, 2, 3, 4, 6] and rows[0, 7 + 33:].abs().sum() == 0
    back = layout.unpack(rows)
    for key, value in join(back[:2]).items():
        assert value.dtype == small[key].dtype and value.equal(small[key]), key
    for key, value in join(back[2:]).items():
        assert value.equal(large[key]), key


def test_a_processor_output_that_does_not_split_is_refused():
    with pytest.raises(RlcapError, match="does not split over 3 pictures"):
        per_picture({"pixel_values": torch.zeros(4, 6)}, 3)
    layout = PixelLayout.of(per_picture(_processor_output(1, 4), 1)[0])
    with pytest.raises(RlcapError, match="expected"):
        layout.pack([{"pixel_values": torch.zeros(4, 6)}])
