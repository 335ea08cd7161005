"""One CLIP-S (issue 67 item 5): the `clip_s` and `ref_clip_s` rewards with a CLIP retriever and its image bank
are the CLIP-S and RefCLIP-S `rlcap eval --clip` reports for the same captions, pictures and references (1e-6):
the same prefix, weight, clip at 0 and embeddings, one implementation of the formulas."""

import json

import numpy as np
import pytest
import torch

from rlcap.eval.clip_score import load_clip, score_with_clip
from rlcap.rewards import RewardBatch
from rlcap.rewards.retrieval import RetrievalReward
from tests.retrieval.test_clip import picture
from tests.retrieval.test_clip_score import CAPTIONS, REFS, tiny_clip

pytest.importorskip("transformers")


def _bank(tmp_path):
    """The tiny CLIP (its image projection negated: CLIP-S 0 for one caption) and its image bank of the five
    pictures, built from their files by `rlcap retrieval index`'s function."""
    from rlcap.data.loader import DataConfig
    from rlcap.models.retriever import load_retriever
    from rlcap.rewards.image_bank import build_image_bank

    tiny_clip(tmp_path / "clip")
    (tmp_path / "img").mkdir()
    images = []
    for k, image_id in enumerate(CAPTIONS):
        picture(k).save(tmp_path / "img" / f"{image_id}.png")
        images.append({"imgid": k, "filename": f"{image_id}.png", "split": "train",
                       "sentences": [{"raw": r, "tokens": r.split()} for r in REFS[image_id]]})
    (tmp_path / "d.json").write_text(json.dumps({"images": images}))
    bank = build_image_bank(tmp_path / "clip", DataConfig(dataset=str(tmp_path / "d.json")), tmp_path / "img", k=2)
    return load_retriever(tmp_path / "clip"), bank


def test_the_clip_rewards_are_the_clip_s_and_refclip_s_of_rlcap_eval(tmp_path):
    retriever, bank = _bank(tmp_path)
    ids = list(CAPTIONS)
    _, per_image = score_with_clip(load_clip(tmp_path / "clip"), CAPTIONS, {i: picture(k) for k, i in enumerate(ids)},
                                   REFS)
    batch = RewardBatch([str(k) for k in range(len(ids))], [REFS[i] for i in ids])  # (the bank's ids: imgid)
    captions = [CAPTIONS[i] for i in ids]
    for kind, metric in (("clip_s", "CLIP-S"), ("ref_clip_s", "RefCLIP-S")):
        reward = RetrievalReward(retriever, bank, kind)(captions, batch)
        expected = torch.tensor([per_image[i][metric] for i in ids], dtype=reward.dtype)
        torch.testing.assert_close(reward, expected, rtol=0, atol=1e-6, msg=kind)
    clip = np.array([per_image[i]["CLIP-S"] for i in ids])
    assert (clip == 0).sum() == 1 and len(set(np.round(clip, 6))) == len(ids)  # (the check can fail)


def test_without_the_prefix_the_reward_would_differ(tmp_path):
    """The reward reads the caption after CLIP-S's prefix, as the metric does: the raw captions score otherwise."""
    retriever, bank = _bank(tmp_path)
    ids = [str(k) for k in range(len(CAPTIONS))]
    captions = list(CAPTIONS.values())
    reward = RetrievalReward(retriever, bank, "clip_s")(captions, RewardBatch(ids, [["x"]] * len(ids)))
    raw = 2.5 * (retriever.embed_captions(captions) * bank.embeddings[bank.rows(ids)]).sum(1).clamp(min=0)
    assert (reward - raw).abs().max() > 1e-4
