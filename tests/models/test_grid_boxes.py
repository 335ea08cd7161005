"""model.grid_boxes: each grid cell's box embedded and added to its vector, so that the attention can tell where a cell lies
(rlcap.models.grid_boxes). Without it UpDown and the transformer give the same words for a grid whose cells are
shuffled (the blindness the boxes mend); with it they do not."""

from dataclasses import replace

import pytest
import torch

from rlcap.data.vocab import BOS
from rlcap.errors import ConfigError
from rlcap.models import ARCHITECTURES, Feats, ModelConfig, build_model
from rlcap.models.grid_boxes import BOX_DIM, grid_boxes

V, FC_DIM, ATT_DIM, B, N, T = 13, 6, 7, 2, 9, 5  # a 3x3 grid


def test_the_boxes_of_a_two_by_two_grid_by_hand():
    """Row-major cells, as a grid store flattens a (C, g, g) map: (x1, y1, x2, y2, area) as fractions."""
    expected = torch.tensor([[0.0, 0.0, 0.5, 0.5, 0.25], [0.5, 0.0, 1.0, 0.5, 0.25],
                             [0.0, 0.5, 0.5, 1.0, 0.25], [0.5, 0.5, 1.0, 1.0, 0.25]])
    assert torch.equal(grid_boxes(4), expected)
    assert grid_boxes(16)[6].tolist() == [0.5, 0.25, 0.75, 0.5, 0.0625]  # row 1, column 2 of a 4x4 grid


@pytest.mark.parametrize("n", [0, 2, 5, 36 + 1])
def test_a_count_that_is_no_square_grid_is_refused(n):
    with pytest.raises(ConfigError, match="not a square grid"):
        grid_boxes(n)


def _logprobs(model: torch.nn.Module, feats: Feats) -> torch.Tensor:
    tokens = torch.randint(4, V, (B, T), generator=torch.Generator().manual_seed(1))
    tokens[:, 0] = BOS
    model.eval()
    with torch.no_grad():
        return model(feats, tokens)


@pytest.mark.parametrize("arch", ["updown", "transformer"])
@pytest.mark.parametrize("boxes", [False, True])
def test_shuffled_cells_change_the_words_only_with_boxes(arch, boxes):
    """The same cells in another order: the same distribution at every word without boxes (the attention sums the
    cells whatever their place), a different one with them."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, att_hidden_dim=8, dropout=0.0, num_layers=1,
                      num_enc_layers=1, num_heads=2, ff_dim=8, max_len=8, grid_boxes=boxes)
    model = build_model(cfg, V, FC_DIM, ATT_DIM)
    gen = torch.Generator().manual_seed(2)
    feats = Feats(torch.randn(B, FC_DIM, generator=gen), torch.randn(B, N, ATT_DIM, generator=gen),
                  torch.ones(B, N, dtype=torch.bool))
    order = torch.randperm(N, generator=gen)
    shuffled = Feats(feats.fc, feats.att[:, order], feats.att_mask)
    same = torch.allclose(_logprobs(model, feats), _logprobs(model, shuffled), atol=1e-6)
    assert same is not boxes


@pytest.mark.parametrize("arch", ["updown", "transformer"])
def test_the_key_is_read_by_the_grid_attention_captioners(arch):
    assert ARCHITECTURES[arch].reads(ModelConfig(arch=arch), "grid_boxes")
    assert not ARCHITECTURES["fc"].reads(ModelConfig(arch="fc"), "grid_boxes")


@pytest.mark.parametrize("arch", ["updown", "transformer"])
def test_the_boxes_have_their_own_embedding_added_to_each_cell(arch):
    """The boxes are embedded apart (BOX_DIM -> the model's width) and added to the embedded cell: a region
    vector of 1280 CNN features would drown 5 appended coordinates (measured: an appended box barely moved
    UpDown's words on shapes)."""
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, num_heads=2, ff_dim=8,
                      grid_boxes=True)
    model = build_model(cfg, V, FC_DIM, ATT_DIM)
    assert model.box_embed.weight.shape == (8, BOX_DIM)
    assert build_model(replace(cfg, grid_boxes=False), V, FC_DIM, ATT_DIM).box_embed is None
