"""CLIP through transformers from a local folder: a tiny randomly initialised CLIP, saved and loaded
back by path (never downloaded), behind the retriever interface; and the image bank built from files."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from rlcap.errors import RlcapError
from rlcap.models.retriever import ClipRetriever, load_retriever

transformers = pytest.importorskip("transformers")


def make_tiny_clip(folder):
    """A 2-layer CLIP on 32-px images with a character vocabulary, written as save_pretrained does."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt")).save_pretrained(folder)
    text = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                  patch_size=8)
    torch.manual_seed(0)
    model = transformers.CLIPModel(transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    model.save_pretrained(folder)
    transformers.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return model.eval()


def picture(seed):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (40, 48, 3), dtype=np.uint8))


def test_clip_loads_from_a_local_folder_and_matches_transformers(tmp_path):
    reference = make_tiny_clip(tmp_path / "clip")
    retriever = load_retriever(tmp_path / "clip")
    assert isinstance(retriever, ClipRetriever) and retriever.kind == "clip"
    assert retriever.temperature == pytest.approx(1 / float(reference.logit_scale.detach().exp()))
    captions = ["a red circle", "two blue squares on grey"]
    images = [picture(0), picture(1)]
    texts, pixels = retriever.embed_captions(captions), retriever.embed_images(images)
    assert texts.shape == (2, 16) and pixels.shape == (2, 16)
    torch.testing.assert_close(texts.norm(dim=1), torch.ones(2))
    enc = retriever.tokenizer(captions, padding=True, return_tensors="pt")
    px = retriever.processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = reference(**enc, pixel_values=px)
    torch.testing.assert_close(texts, out.text_embeds, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(pixels, out.image_embeds, atol=1e-5, rtol=1e-4)


def test_clip_bank_from_image_files(tmp_path):
    from rlcap.data.loader import DataConfig
    from rlcap.rewards.image_bank import build_image_bank

    make_tiny_clip(tmp_path / "clip")
    (tmp_path / "img").mkdir()
    images = []
    for i in range(5):
        picture(i).save(tmp_path / "img" / f"{i}.png")
        images.append({"imgid": i, "filename": f"{i}.png", "split": "train" if i < 4 else "test",
                       "sentences": [{"raw": "a shape", "tokens": ["a", "shape"]}]})
    (tmp_path / "d.json").write_text(json.dumps({"images": images}))
    bank = build_image_bank(tmp_path / "clip", DataConfig(dataset=str(tmp_path / "d.json")), tmp_path / "img", k=2)
    retriever = load_retriever(tmp_path / "clip")
    torch.testing.assert_close(bank.embeddings, retriever.embed_images([picture(i) for i in range(5)]))
    assert bank.neighbours.shape == (5, 2) and bank.kind == "clip"
    assert all(4 not in row and i not in row for i, row in enumerate(bank.neighbours.tolist()))  # training only


def test_not_a_clip_folder(tmp_path):
    with pytest.raises(RlcapError):
        ClipRetriever(tmp_path)


def test_one_clip_folder_gives_the_reward_and_the_captioners_features(tmp_path):
    """`reward.paths.retrieval: hf:DIR` names the CLIP as `rlcap features --encoder hf:DIR` does, and its image
    embedding is what the store's fc holds: [Chaffin24]'s reward and the features come from one model."""
    from rlcap.encoders.load import load_encoder
    from rlcap.rewards.image_bank import same_retriever

    reference = make_tiny_clip(tmp_path / "clip")
    retriever = load_retriever(f"hf:{tmp_path / 'clip'}")
    encoder = load_encoder(f"hf:{tmp_path / 'clip'}")
    images = [picture(0), picture(1)]
    fc, _ = encoder.features(torch.from_numpy(encoder.prepare(images)))
    torch.testing.assert_close(torch.nn.functional.normalize(fc, dim=1), retriever.embed_images(images))
    with torch.no_grad():
        px = retriever.processor(images=images, return_tensors="pt")["pixel_values"]
        torch.testing.assert_close(fc, reference.get_image_features(pixel_values=px).pooler_output)
    assert same_retriever(f"hf:{tmp_path / 'clip'}", tmp_path / "clip")  # a bank built with either name
    (tmp_path / "vit").mkdir()
    transformers.ViTModel(transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=32, image_size=32, patch_size=8)).save_pretrained(
        tmp_path / "vit")
    with pytest.raises(RlcapError, match=r"the retrieval reward reads a CLIP .* this one holds none"):
        load_retriever(f"hf:{tmp_path / 'vit'}")
