"""An instruction vision-language model built here from a small config, with random weights (seeded), a tokenizer
trained on captions that carries the family's special tokens and image token(s), and the family's processor (image
processor + tokenizer + chat template), saved as ``save_pretrained`` writes a downloaded one: what the tests, the
shapes-VLM recipe and ``benchmarks/bench_hf.py`` run on, since no pretrained model can be downloaded here.
``rlcap hf-captioner OUT --family qwen2_vl --dataset DS``; ``AutoProcessor.from_pretrained(OUT)`` and
``AutoModelForImageTextToText.from_pretrained(OUT)`` load the folder offline.

Families, each the transformers class its downloaded checkpoints name: ``qwen2_vl`` (Qwen2-VL: dynamic resolution,
2x2 patch merger, multimodal rotary positions), ``qwen2_5_vl`` (Qwen2.5-VL: windowed vision attention),
``smolvlm`` (Idefics3ForConditionalGeneration with Idefics3Processor, as HuggingFaceTB/SmolVLM-256M-Instruct
declares: pixel shuffle), ``paligemma`` (SigLIP + Gemma, prefix attention over image and prompt), ``llava``
(CLIP + Llama, an MLP projector), ``idefics2`` (SigLIP + a perceiver resampler + Mistral, as
HuggingFaceM4/idefics2-8b), ``gemma3`` (SigLIP pooled into soft tokens + a Gemma 3 of sliding-window and global
layers, as google/gemma-3-4b-it, its end tokens a list), ``florence2`` (DaViT + BART: an encoder-decoder prompted
by a task token), ``qwen3_vl`` (Qwen3-VL: DeepStack features of intermediate vision layers added into the
language model's first layers), ``glm4v`` (GLM-4.1V: a config that declares a list of end tokens), ``internvl`` (InternVL3: tiles of the picture by its aspect ratio and the whole, pixel shuffle), ``llava_onevision``
(SigLIP + Qwen2, AnyRes tiles unpadded to the picture's shape with a newline token per row) and ``mistral3``
(Mistral Small 3.1: a Pixtral tower reading the picture at its own shape, rows of [IMG] ended by [IMG_BREAK]).

Sizes: ``tiny`` (32-wide, 1-2 layers, 32-px pictures: the tests), ``mini`` (a 64-wide 2-layer vision tower, a
128-wide 2-layer language model on 64-px pictures: the shapes-vlm benchmark, the widths of the shapes-hf GIT, so
that the two policies compare and two CPU cores train XE and SCST in about 15 minutes) and ``small`` (a 192-wide
4-layer vision tower, a 384-wide 6-layer language model on 64-px pictures, about 17M parameters: bench-hf's speed
tables).

Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's, GLM-4.1V's, InternVL's and LLaVA-OneVision's processors hold a video
processor, which transformers builds only with torchvision, and transformers offers Pixtral's (Mistral 3's) only with
torchvision: their processor is written file by file as ``save_pretrained`` writes it
(build_vlm_families.ProcessorFiles), so
``AutoProcessor`` loads the folder where torchvision is installed; their tokenizer (with the chat template) and
image processor load without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from rlcap.errors import ConfigError
from rlcap.models.hf import build_vlm_families as of, build_vlm_grid as grid
from rlcap.models.hf.build_vlm_families import Built, Size
from rlcap.models.hf.build_tokenizer import Words
from rlcap.transformers_io import no_bars

SIZES: dict[str, Size] = {
    "tiny": Size(vision=32, vision_layers=1, vision_heads=2, text=32, text_layers=2, text_heads=2, px=32),
    "mini": Size(vision=64, vision_layers=2, vision_heads=2, text=128, text_layers=2, text_heads=4, px=64),
    "small": Size(vision=192, vision_layers=4, vision_heads=6, text=384, text_layers=6, text_heads=6, px=64),
}
BUILDERS: dict[str, Callable[[Words, Size], Built]] = {
    "qwen2_vl": grid.qwen2_vl, "qwen2_5_vl": grid.qwen2_5_vl, "qwen3_vl": grid.qwen3_vl, "glm4v": grid.glm4v,
    "smolvlm": of.smolvlm, "paligemma": of.paligemma, "llava": of.llava, "florence2": of.florence2,
    "idefics2": of.idefics2, "gemma3": of.gemma3, "internvl": of.internvl, "llava_onevision": of.llava_onevision,
    "mistral3": of.mistral3,
}
VLM_FAMILIES = tuple(BUILDERS)


def build_vlm(family: str, folder: str | Path, captions: list[str], size: str = "tiny", seed: int = 0,
              tokenizer: str = "wordpiece", vocab_size: int = 4096) -> Path:
    """A ``family`` vision-language model of ``size`` with random weights (seeded by ``seed``) and a
    ``tokenizer`` (``wordpiece`` of at most ``vocab_size`` subwords, or ``word``) trained on ``captions``, saved
    in ``folder`` with its processor (image processor, tokenizer, chat template) as ``save_pretrained`` writes a
    downloaded one. Returns ``folder``."""
    import transformers as t

    if family not in BUILDERS:
        raise ConfigError(f"--family: {family!r} is not one of {', '.join(BUILDERS)}")
    if size not in SIZES:
        raise ConfigError(f"--size: {size!r} is not one of {', '.join(SIZES)}")
    if not captions:
        raise ConfigError("no captions to train the tokenizer on")
    torch.manual_seed(seed)
    built: Built = BUILDERS[family](Words(captions, tokenizer, vocab_size), SIZES[size])
    folder = Path(folder)
    with no_bars(t):
        built.model.save_pretrained(folder)
    built.processor.save_pretrained(folder)
    return folder
