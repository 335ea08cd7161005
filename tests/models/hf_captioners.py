"""Tiny transformers captioners with a tokenizer trained on the tiny dataset's captions (tests/tiny.py), saved as
a downloaded captioner's folder: what `model.arch: hf` runs on in the tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch

SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]  # ids 0-3, as the model's config names them


def train_tokenizer(captions: list[str]):
    """A word-level fast tokenizer of ``captions`` (lower-cased words), trained in a second."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers, decoders
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # (joins words with spaces)
    tok.train_from_iterator(captions, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]",
                                   unk_token="[UNK]")


def save_captioner(kind: str, folder: Path, dataset: Path, seed: int = 0) -> Path:
    """A tiny ``kind`` (vision_encoder_decoder, blip or git) whose tokenizer knows ``dataset``'s words."""
    import transformers as t

    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    tokenizer = train_tokenizer(captions)
    size = len(tokenizer)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                  patch_size=8)
    ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    if kind == "vision_encoder_decoder":
        config = t.VisionEncoderDecoderConfig.from_encoder_decoder_configs(
            t.ViTConfig(**vision), t.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=size, n_positions=32, **ids))
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 1, 0, 2
        model, processor = t.VisionEncoderDecoderModel(config), t.ViTImageProcessor(size={"height": 32, "width": 32})
    elif kind == "blip":
        text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=size,
                    max_position_embeddings=32, sep_token_id=2, **ids)
        model = t.BlipForConditionalGeneration(t.BlipConfig(vision_config=vision, text_config=text))
        processor = t.BlipImageProcessor(size={"height": 32, "width": 32})
    else:
        model = t.GitForCausalLM(t.GitConfig(vision_config=vision, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, vocab_size=size,
                                             max_position_embeddings=64, **ids))
        processor = t.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    t.utils.logging.disable_progress_bar()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
