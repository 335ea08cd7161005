"""A transformers captioner as an rlcap policy (rlcap.models.hf.captioner): VisionEncoderDecoder (ViT + GPT-2),
BLIP and GIT, each built tiny with random weights and saved as a downloaded model is. On the tokens its tower
gives (what `rlcap features --encoder hf:DIR` stores for a captioner), rlcap's teacher-forced logits are the
model's own forward from pixels, and rlcap's greedy decoding writes what its own generate() writes."""

from __future__ import annotations

import json

import pytest
import torch

from rlcap.data.feats import Feats
from rlcap.data.vocab import BOS, EOS
from rlcap.decoding import greedy
from rlcap.encoders.hf import vision_forward
from tests.encoders.hf_models import save_tiny

transformers = pytest.importorskip("transformers")
CAPTIONERS = ("vision_encoder_decoder", "blip", "git")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Each captioner with a tokenizer of its head's 99 ids ([PAD] [BOS] [EOS] [UNK] and 95 words): a captioner
    folder without one is refused."""
    from rlcap.models.hf.build_captioner import train_tokenizer

    base = tmp_path_factory.mktemp("hf_captioners")
    tokenizer = train_tokenizer([" ".join(f"w{i}" for i in range(95))], kind="word")
    assert len(tokenizer) == 99
    found = {kind: save_tiny(kind, base / kind, seed=3) for kind in CAPTIONERS}
    for folder in found.values():
        tokenizer.save_pretrained(folder)
    return found


def _load(folder):
    """The model as transformers loads it, and the image tokens its tower gives for 3 random pictures."""
    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(folder).eval()
    torch.manual_seed(0)
    pixels = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        tower, _ = vision_forward(model)
        tokens = tower(pixel_values=pixels).last_hidden_state
    return model, pixels, Feats(tokens[:, 0], tokens, torch.ones(tokens.shape[:2], dtype=torch.bool))


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_greedy_decoding_is_the_models_own_generate(folders, kind):
    from rlcap.models.hf.captioner import HFCaptioner

    model, pixels, feats = _load(folders[kind])
    policy = HFCaptioner(folders[kind]).eval()
    ids = policy.ids
    banned = sorted({ids.pad, ids.start} - {ids.end, None})  # rlcap never writes PAD or BOS
    with torch.no_grad():
        ours = greedy(policy, feats, max_len=8).tokens  # (3, <=8) rlcap ids, PAD after EOS
        theirs = model.generate(pixel_values=pixels, max_new_tokens=8, num_beams=1, do_sample=False,
                                suppress_tokens=banned)
    theirs = theirs[:, 1:] if theirs[0, 0] == ids.start else theirs  # (their first token is the start token)
    mapped = ids.hf_ids(ours)
    for a, b in zip(mapped.tolist(), theirs.tolist()):
        words = [t for t in a]
        until = words.index(ids.end) + 1 if ids.end in words else len(words)
        assert words[:until] == b[:until], (kind, a, b)


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_teacher_forced_logits_are_the_models_own_forward(folders, kind):
    from rlcap.models.hf.captioner import HFCaptioner

    model, pixels, feats = _load(folders[kind])
    policy = HFCaptioner(folders[kind]).eval()
    torch.manual_seed(1)
    words = torch.randint(4, policy.vocab_size, (6, 5))  # 2 captions an image, rlcap ids
    tokens = torch.cat([torch.full((6, 1), BOS), words, torch.full((6, 1), EOS)], 1)
    with torch.no_grad():
        ours = policy(feats, tokens, seq_per_img=2)  # (6, 7, V) rlcap's order
        name = "decoder_input_ids" if model.config.is_encoder_decoder else "input_ids"
        theirs = model(pixel_values=pixels.repeat_interleave(2, 0), **{name: policy.ids.hf_ids(tokens)}).logits
    theirs = policy.ids.rlcap_logits(theirs[:, -tokens.shape[1]:])
    assert ours.shape == (6, 7, policy.vocab_size)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", CAPTIONERS)
def test_beam_search_is_the_models_own_generate(folders, kind):
    """(The tiny random models' captions do not end within 8 words, so the length penalty, applied alike by
    both to finished captions, is not exercised here.)"""
    from rlcap.decoding import Decoding, beam_search
    from rlcap.models.hf.captioner import HFCaptioner

    model, pixels, feats = _load(folders[kind])
    policy = HFCaptioner(folders[kind]).eval()
    ids = policy.ids
    banned = sorted({ids.pad, ids.start} - {ids.end, None})
    with torch.no_grad():
        ours = ids.hf_ids(beam_search(policy, feats, Decoding("beam", 8, beam_size=3)).tokens)
        theirs = model.generate(pixel_values=pixels, max_new_tokens=8, num_beams=3, do_sample=False,
                                suppress_tokens=banned)
    theirs = theirs[:, 1:] if theirs[0, 0] == ids.start else theirs
    assert ours.tolist() == theirs[:, :ours.shape[1]].tolist()
