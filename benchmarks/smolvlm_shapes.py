"""SmolVLM folders at published widths, random weights, built offline: what ``shared_cores_check.py`` and
``fsdp_peak_memory.py`` measure at real sizes.

build_vlm's small SmolVLM (its tokenizer, chat template and Idefics3 processor, trained on the given captions) with
the widths of HuggingFaceTB/SmolVLM-256M-Instruct or SmolVLM-500M-Instruct: the language model SmolLM2-135M's or
SmolLM2-360M's (the 49,280-word vocabulary with SmolVLM's added tokens, tied to the output layer; the tokenizer
padded to it with pieces no text encodes to), the tower SigLIP base-patch16-512's, the pixel shuffle of 4: 64 image
tokens for one 512-px tile (the processor reads one tile a picture). ``layers`` keeps the first N decoder layers.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench_scale_vlm_gpu import pad_tokenizer

ROPE = {"rope_type": "default", "rope_theta": 100000.0}
SIGLIP_BASE_512 = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       image_size=512, patch_size=16)
SHAPES = {
    # SmolLM2-135M: 30 x 576, 9 heads (3 key-value), MLP 1,536
    "smolvlm-256m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3),
    # SmolLM2-360M: 32 x 960, 15 heads (5 key-value), MLP 2,560
    "smolvlm-500m": dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
                         num_key_value_heads=5),
}
SCALE, PX = 4, 512


def build_smolvlm(folder: Path, captions: list[str], shape: str, layers: int = 0) -> int:
    """Build ``shape``'s folder (module docstring) with its first ``layers`` decoder layers (0: all); returns its
    parameter count."""
    import torch
    import transformers as t

    from rlcap.models.hf.build_vlm import build_vlm

    text = dict(SHAPES[shape], head_dim=64, max_position_embeddings=8192, vocab_size=49280, rms_norm_eps=1e-5,
                rope_parameters=ROPE, tie_word_embeddings=True)
    if layers:
        text["num_hidden_layers"] = layers
    build_vlm("smolvlm", folder, captions, size="small")
    config = json.loads((folder / "config.json").read_text())
    config["text_config"].update(text)
    config["vision_config"].update(SIGLIP_BASE_512)
    config.update(scale_factor=SCALE, tie_word_embeddings=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    processor = json.loads((folder / "processor_config.json").read_text())
    processor["image_processor"].update(size={"longest_edge": PX}, max_image_size={"longest_edge": PX},
                                        do_image_splitting=False)
    processor["image_seq_len"] = (PX // SIGLIP_BASE_512["patch_size"]) ** 2 // SCALE ** 2
    (folder / "processor_config.json").write_text(json.dumps(processor, indent=2))
    pad_tokenizer(folder / "tokenizer.json", text["vocab_size"])
    generation = (folder / "generation_config.json").read_text()  # (the tokenizer's end and pad tokens)
    torch.manual_seed(0)
    model = t.Idefics3ForConditionalGeneration._from_config(t.Idefics3Config.from_pretrained(folder))
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    model.save_pretrained(folder)
    (folder / "generation_config.json").write_text(generation)
    return sum(p.numel() for p in model.parameters())
