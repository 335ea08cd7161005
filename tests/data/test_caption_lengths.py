"""What ``data.max_len`` does to the training captions: each is encoded whole and cut to ``max_len`` ids of the
run's vocabulary (its length before the cut kept, so a run can say what it cuts), and an XE batch is as wide as
its longest caption, not ``data.max_len + 2``, with the loss of the wide batch."""

from __future__ import annotations

import logging

import pytest
import torch

from rlcap.data.loader import DataConfig, check_caption_lengths, load_data
from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.errors import ConfigError
from rlcap.models import build_model
from rlcap.models.model_config import ModelConfig
from rlcap.rl.losses import xe_loss
from tests.tiny import make_tiny_dataset

# the tiny captions: "A red circle .", "a big red circle", "red circle on the left" -> 3 to 5 words


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_dataset(tmp_path_factory.mktemp("caption_lengths"))


def _train(tiny, max_len: int):
    dataset, feats = tiny
    return load_data(DataConfig(dataset=str(dataset), features=str(feats), min_count=1, max_len=max_len),
                     ("train",)).splits["train"]


def test_a_caption_is_cut_to_max_len_ids_and_ended_by_eos(tiny):
    split = _train(tiny, 3)
    words = [w for image in split.tokens for w in image]
    assert split.caption_lengths.tolist() == [len(w) for w in words]  # before the cut
    for row, w in zip(split.caps, words):
        kept = min(len(w), 3)
        assert row[0] == BOS and row[kept + 1] == EOS and (row[kept + 2:] == PAD).all()
        assert row[1:kept + 1].tolist() == split.vocab.encode(w)[:kept]


@pytest.mark.parametrize("max_len", [4, 16, 60])
def test_an_xe_batch_is_as_wide_as_its_longest_caption(tiny, max_len):
    split = _train(tiny, max_len)
    widths = set()
    for images, per_image in ((4, 2), (1, 1)):
        for batch in split.batches(batch_size=images, seq_per_img=per_image, seed=1, epoch=0):
            ends = (batch.tokens == EOS).int().argmax(1)  # each row's EOS column
            assert (batch.tokens[torch.arange(len(ends)), ends] == EOS).all()
            assert batch.tokens.shape[1] == int(ends.max()) + 1  # the longest caption + BOS and EOS
            widths.add(batch.tokens.shape[1])
    assert widths == {min(n, max_len) + 2 for n in (3, 4, 5)}  # single captions of 3, 4 and 5 words


def test_the_batches_are_the_wide_ones_without_their_all_pad_columns(tiny):
    """The same seeded draw at data.max_len 16 and 60: the same captions, as wide."""
    narrow, wide = _train(tiny, 16), _train(tiny, 60)
    for a, b in zip(narrow.batches(4, 2, seed=3, epoch=1), wide.batches(4, 2, seed=3, epoch=1)):
        assert torch.equal(a.tokens, b.tokens) and a.ids == b.ids


@pytest.mark.parametrize("arch", ["fc", "updown", "transformer"])
def test_the_xe_loss_of_a_trimmed_batch_is_the_wide_batchs(tiny, arch):
    """Teacher forcing is causal and PAD targets are masked: the columns a batch loses changed no loss. (Dropout
    draws its masks over the batch's shape, so a training run's masks differ with its width: eval mode here.)"""
    split = _train(tiny, 60)
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, embed_dim=16, hidden_dim=16, att_hidden_dim=16, num_layers=1,
                                    num_heads=2, ff_dim=32, max_len=70), len(split.vocab), split.fc_dim,
                        split.att_dim).eval()
    batch = next(split.batches(4, 2, seed=0, epoch=0))
    wide = torch.nn.functional.pad(batch.tokens, (0, 62 - batch.tokens.shape[1]), value=PAD)  # data.max_len + 2

    def loss(tokens):
        logits = model(batch.feats, tokens[:, :-1], seq_per_img=2)
        return xe_loss(logits, tokens[:, 1:], tokens[:, 1:] != PAD)

    assert batch.tokens.shape[1] < 10
    torch.testing.assert_close(loss(batch.tokens), loss(wide), rtol=1e-6, atol=1e-6)


def test_the_cut_captions_are_logged(tiny, caplog):
    split = _train(tiny, 4)  # the 5-word captions: one in three
    with caplog.at_level(logging.INFO, logger="rlcap.data.loader"):
        check_caption_lengths(split, 4)
    cut = int((split.caption_lengths > 4).sum())
    assert 0 < cut < len(split.caption_lengths) / 2
    assert f"data.max_len=4 cuts {cut} of {len(split.caption_lengths)} training captions (longest 5 words)" in \
        caplog.text


def test_a_length_that_cuts_most_captions_is_refused_with_the_lengths_that_keep_them(tiny):
    split = _train(tiny, 3)
    lengths = sorted(split.caption_lengths.tolist())
    p90 = lengths[-(-9 * len(lengths) // 10) - 1]
    with pytest.raises(ConfigError, match=rf"^data.max_len=3 cuts \d+ of {len(lengths)} training captions "
                                          rf"\(longest 5 words\): more than half, .* give data.max_len={p90} "
                                          rf"\(keeps 90% of them whole\) or 5 \(keeps them all\)$"):
        check_caption_lengths(split, 3)


@pytest.mark.parametrize("arch", ["fc", "updown"])
def test_an_xe_run_logs_the_losses_of_batches_padded_to_max_len(tmp_path, monkeypatch, arch):
    """The whole XE loop, without dropout (whose masks are drawn over the batch's shape): batches cut to their
    longest caption train as the batches padded to data.max_len + 2 did, step for step."""
    from rlcap import api
    from rlcap.data import loader
    from rlcap.train.logger import read_log
    from tests.tiny import tiny_overrides

    dataset, feats = make_tiny_dataset(tmp_path)

    def losses(name: str) -> list[float]:
        out = tmp_path / name
        api.train(api.load_run_config("configs/shapes_xe.yaml", tiny_overrides(dataset, feats, out, arch, **{
            "model.dropout": 0.0, "data.max_len": 16, "max_steps": 8, "xe.epochs": 2})))
        return [r["loss"] for r in read_log(out / "log.jsonl") if r["split"] == "train"]

    trimmed = losses("trimmed")
    cut = loader.SplitData._batch

    def padded(self, *args):
        batch = cut(self, *args)
        assert batch.tokens.shape[1] <= 7  # 5 words at most
        return batch._replace(tokens=torch.nn.functional.pad(batch.tokens, (0, 18 - batch.tokens.shape[1]),
                                                             value=PAD))

    monkeypatch.setattr(loader.SplitData, "_batch", padded)
    wide = losses("padded")
    assert len(trimmed) == 8
    torch.testing.assert_close(torch.tensor(trimmed), torch.tensor(wide), rtol=1e-5, atol=1e-6)
