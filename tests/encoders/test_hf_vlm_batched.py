"""`rlcap features --encoder hf:DIR` on a vision-language model encodes the pictures of one size in one pass of
the image side (rlcap.encoders.hf_vlm.HFVLMEncoder.features_with_counts): the same tokens as one picture a pass
(1e-5), for every family rlcap builds, and one pass a size."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from rlcap.models.hf.build_vlm import VLM_FAMILIES

pytest.importorskip("transformers")
CAPTIONS = ["a red circle on the left", "a big blue square", "a small green triangle"]
SIZES = ((24, 40), (40, 16), (24, 40), (24, 40), (40, 16))  # two sizes, three pictures and two


@pytest.mark.parametrize("family", [f for f in VLM_FAMILIES if f != "florence2"])
def test_pictures_of_one_size_are_encoded_in_one_pass_as_one_at_a_time(family, tmp_path):
    from PIL import Image

    from rlcap.encoders.hf_vlm import image_tokens, load_vlm_encoder
    from rlcap.models.hf.build_vlm import build_vlm

    encoder = load_vlm_encoder(build_vlm(family, tmp_path / family, CAPTIONS))
    rng = np.random.default_rng(0)
    pictures = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in SIZES]
    passes, inner = [], encoder.model.get_image_features

    @functools.wraps(inner)  # (its signature: what the encoder reads to pass the processor's outputs)
    def counted(*args, **kwargs):
        passes.append(1)
        return inner(*args, **kwargs)

    encoder.model.get_image_features = counted
    fc, att, counts = encoder.features_with_counts(torch.from_numpy(encoder.prepare(pictures)))
    assert len(passes) == 2  # one a size
    encoder.model.get_image_features = inner
    with torch.inference_mode():
        alone = [image_tokens(encoder.model, encoder.processor, picture).float() for picture in pictures]
    assert counts.tolist() == [len(tokens) for tokens in alone]
    for k, tokens in enumerate(alone):
        torch.testing.assert_close(att[k, : len(tokens)], tokens, rtol=1e-5, atol=1e-5)
        assert not att[k, len(tokens):].any()
        torch.testing.assert_close(fc[k, : tokens.shape[1]], tokens.mean(0), rtol=1e-5, atol=1e-5)
