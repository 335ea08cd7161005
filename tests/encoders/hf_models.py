"""Tiny transformers models with random weights, saved as a downloaded model's folder (``save_pretrained``:
config, weights, image processor), for the tests of ``--encoder hf:DIR``. Built offline in seconds."""

from __future__ import annotations

from pathlib import Path

import torch

SIZE = 32  # input side of every tiny model (4 x 4 patches of 8 pixels)
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=SIZE,
               patch_size=8)
_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=99,
             max_position_embeddings=32, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _clip_processor(transformers):
    return transformers.CLIPImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE})


def _vit_processor(transformers):
    return transformers.ViTImageProcessor(size={"height": SIZE, "width": SIZE})


def build(kind: str, transformers):
    """(model, image processor) of a tiny ``kind``."""
    t = transformers
    if kind == "clip":
        model = t.CLIPModel(t.CLIPConfig(vision_config=_VISION, text_config=_TEXT, projection_dim=16))
        return model, _clip_processor(t)
    if kind == "clip_vision_projection":
        return t.CLIPVisionModelWithProjection(t.CLIPVisionConfig(**_VISION, projection_dim=16)), _clip_processor(t)
    if kind == "siglip":
        return t.SiglipModel(t.SiglipConfig(vision_config=_VISION, text_config=_TEXT)), _vit_processor(t)
    if kind == "vit":
        return t.ViTModel(t.ViTConfig(**_VISION)), _vit_processor(t)
    if kind == "dinov2":
        return t.Dinov2WithRegistersModel(t.Dinov2WithRegistersConfig(**_VISION, num_register_tokens=2)), \
            _vit_processor(t)
    if kind == "convnext":
        config = t.ConvNextConfig(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], image_size=SIZE)
        return t.ConvNextModel(config), t.ConvNextImageProcessor(size={"shortest_edge": SIZE}, crop_pct=1.0)
    if kind == "vision_encoder_decoder":
        config = t.VisionEncoderDecoderConfig.from_encoder_decoder_configs(
            t.ViTConfig(**_VISION), t.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=32,
                                                 bos_token_id=1, eos_token_id=2, pad_token_id=0))
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 1, 0, 2
        return t.VisionEncoderDecoderModel(config), _vit_processor(t)
    if kind == "blip":  # (BLIP ends a caption with its text config's [SEP], here id 2)
        return t.BlipForConditionalGeneration(t.BlipConfig(vision_config=_VISION,
                                                           text_config={**_TEXT, "sep_token_id": 2})), \
            t.BlipImageProcessor(size={"height": SIZE, "width": SIZE})
    if kind == "git":
        config = t.GitConfig(vision_config=_VISION, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, vocab_size=99, max_position_embeddings=64, bos_token_id=1,
                             eos_token_id=2, pad_token_id=0)
        return t.GitForCausalLM(config), _clip_processor(t)
    raise ValueError(kind)


KINDS = ("clip", "clip_vision_projection", "siglip", "vit", "dinov2", "convnext", "vision_encoder_decoder", "blip",
         "git")


def save_tiny(kind: str, folder: Path, seed: int = 0) -> Path:
    """A tiny ``kind`` with random weights (seeded) saved in ``folder`` as transformers saves a model."""
    import transformers

    torch.manual_seed(seed)
    model, processor = build(kind, transformers)
    transformers.utils.logging.disable_progress_bar()  # (the bars of its writing, on stderr)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
