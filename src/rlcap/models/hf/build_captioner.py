"""A transformers captioner built here from a small config, with random weights and a tokenizer trained on
captions, saved as a downloaded captioner's folder (``save_pretrained``: config, weights, tokenizer, image
processor): what `model.arch: hf` runs on in the tests, the shapes-hf benchmark and ``benchmarks/bench_hf.py``,
since no pretrained captioner can be downloaded here. ``rlcap hf-captioner OUT --family git --dataset DS``.

Sizes: ``tiny`` (32-wide, the tests), ``small`` (a 64-wide ViT tower on 64-px pictures, a 128-wide 2-layer text
decoder: the shapes-hf benchmark) and ``base`` (the shapes of the field's base models: a ViT-B/16 tower on 224 px
and a 768-wide text decoder of 6 layers, GIT-base's; 12 for the others' GPT-2 and BERT decoders).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlcap.errors import ConfigError
from rlcap.models.hf.tokenizer_train import caption_tokenizer
from rlcap.transformers_io import no_bars

CAPTIONER_FAMILIES = ("git", "blip", "vision_encoder_decoder")
SPECIALS = ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]  # ids 0-3, as the model's config names them
IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
LAYOUTS = ("rlcap", "nlpconnect")  # special tokens: rlcap's 0-3, or nlpconnect/vit-gpt2's (one shared id, no pad)
END_OF_TEXT = "<|endoftext|>"
# size -> (vision tower: width, layers, heads, picture px, patch px), (text decoder: width, layers, heads)
SIZES: dict[str, tuple[tuple[int, int, int, int, int], tuple[int, int, int]]] = {
    "tiny": ((32, 2, 4, 32, 8), (32, 2, 4)),
    "small": ((64, 2, 4, 64, 16), (128, 2, 4)),
    "base": ((768, 12, 12, 224, 16), (768, 6, 12)),
}


def train_tokenizer(captions: list[str], kind: str = "wordpiece", vocab_size: int = 30522,
                    layout: str = "rlcap") -> Any:
    """A fast tokenizer trained on ``captions`` in seconds: ``word`` (lower-cased whole words) or ``wordpiece``
    (BERT's subwords, at most ``vocab_size`` of them). ``layout`` ``rlcap``: [PAD] [BOS] [EOS] [UNK] at ids 0-3;
    ``nlpconnect``: GPT-2's one special token, <|endoftext|>, its last id (start, end and unknown; no pad)."""
    from tokenizers import models
    from transformers import PreTrainedTokenizerFast

    if layout not in LAYOUTS:
        raise ConfigError(f"layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
    tok = caption_tokenizer(captions, kind, vocab_size, SPECIALS if layout == "rlcap" else [], "[UNK]")
    model = models.WordLevel if kind == "word" else models.WordPiece
    if layout == "rlcap":
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", bos_token="[BOS]",
                                       eos_token="[EOS]", unk_token="[UNK]")
    vocab = tok.get_vocab()
    vocab[END_OF_TEXT] = len(vocab)  # GPT-2's: the last id
    tok.model = model(vocab, unk_token=END_OF_TEXT)
    tok.add_special_tokens([END_OF_TEXT])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT,
                                   unk_token=END_OF_TEXT)


def build_captioner(family: str, folder: str | Path, captions: list[str], size: str = "small", seed: int = 0,
                    tokenizer: str = "wordpiece", vocab_size: int = 30522, layout: str = "rlcap") -> Path:
    """A ``family`` captioner of ``size`` with random weights (seeded) and a tokenizer trained on ``captions``,
    saved in ``folder`` as ``save_pretrained`` writes a downloaded one. ``layout`` ``nlpconnect`` (a ViT+GPT-2
    only): the special tokens of nlpconnect/vit-gpt2-image-captioning, start = end = pad = <|endoftext|>, the
    pad on the top-level config only."""
    import transformers as t

    if family not in CAPTIONER_FAMILIES:
        raise ConfigError(f"--family: {family!r} is not one of {', '.join(CAPTIONER_FAMILIES)}")
    if layout not in LAYOUTS or (layout != "rlcap" and family != "vision_encoder_decoder"):
        raise ConfigError(f"layout: {layout!r} is not one of {', '.join(LAYOUTS)} (nlpconnect: a "
                          "vision_encoder_decoder's)")
    if size not in SIZES:
        raise ConfigError(f"--size: {size!r} is not one of {', '.join(SIZES)}")
    if not captions:
        raise ConfigError("no captions to train the tokenizer on")
    tok = train_tokenizer(captions, tokenizer, vocab_size, layout)
    n = len(tok)
    (width, layers, heads, px, patch), (text, text_layers, text_heads) = SIZES[size]
    vision = dict(hidden_size=width, intermediate_size=4 * width, num_hidden_layers=layers, num_attention_heads=heads,
                  image_size=px, patch_size=patch)
    positions = 64 if size == "tiny" else 128
    torch.manual_seed(seed)
    if family == "vision_encoder_decoder":  # ViT + GPT-2 (the decoder of 12 layers at base, GPT-2's)
        end = n - 1  # (nlpconnect: <|endoftext|>, the last id, starts, ends and pads)
        ids = IDS if layout == "rlcap" else dict(bos_token_id=end, eos_token_id=end, decoder_start_token_id=end)
        decoder = t.GPT2Config(n_embd=text, n_layer=12 if size == "base" else text_layers, n_head=text_heads,
                               vocab_size=n, n_positions=positions // 2 if size == "tiny" else positions, **ids)
        config = t.VisionEncoderDecoderConfig.from_encoder_decoder_configs(t.ViTConfig(**vision), decoder)
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = (1, 0, 2) if layout == "rlcap" \
            else (end, end, end)
        model, processor = t.VisionEncoderDecoderModel(config), t.ViTImageProcessor(size={"height": px, "width": px})
    elif family == "blip":  # BLIP's BERT-like text decoder with cross-attention (12 layers at base, BLIP-base's)
        text_config = dict(hidden_size=text, intermediate_size=4 * text, num_attention_heads=text_heads,
                           num_hidden_layers=12 if size == "base" else text_layers, vocab_size=n,
                           max_position_embeddings=positions // 2 if size == "tiny" else positions, sep_token_id=2,
                           **IDS)
        model = t.BlipForConditionalGeneration(t.BlipConfig(vision_config=vision, text_config=text_config))
        processor = t.BlipImageProcessor(size={"height": px, "width": px})
    else:  # GIT: the picture's tokens a prefix of a causal text decoder
        model = t.GitForCausalLM(t.GitConfig(vision_config=vision, hidden_size=text, intermediate_size=4 * text,
                                             num_hidden_layers=text_layers, num_attention_heads=text_heads,
                                             vocab_size=n, max_position_embeddings=positions, **IDS))
        processor = t.CLIPImageProcessor(size={"shortest_edge": px}, crop_size={"height": px, "width": px})
    folder = Path(folder)
    with no_bars(t):
        model.save_pretrained(folder)
    processor.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
