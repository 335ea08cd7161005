"""The builders of the vision-language families whose language model takes rotary positions computed from the
picture's grid (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V), for rlcap.models.hf.build_vlm; their processors hold a
video processor, which transformers builds only with torchvision, so each is written file by file
(:class:`~rlcap.models.hf.build_vlm_families.ProcessorFiles`)."""

from __future__ import annotations

from typing import Any

from rlcap.models.hf.build_tokenizer import GLM4V_TEMPLATE, QWEN3_TEMPLATE, QWEN_TEMPLATE, Words, vlm_tokenizer
from rlcap.models.hf.build_vlm_families import Built, ProcessorFiles, Size, text_config, with_ends


def _mrope(size: Size) -> dict[str, Any]:
    """Qwen2-VL's multimodal rotary positions: a head's rotary half split 1/4 time, 3/8 height, 3/8 width, as the
    released models split 64 as [16, 24, 24]."""
    half = size.text // size.text_heads // 2
    return {"rope_type": "default", "rope_theta": 1_000_000.0,
            "mrope_section": [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]}


QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>", "[UNK]"]


def _qwen_processor(words: Words, size: Size, processor_class: str, template: str = QWEN_TEMPLATE,
                    video_class: str = "Qwen2VLVideoProcessor", **pixel_settings: Any) -> ProcessorFiles:
    """Qwen2-VL's processor: dynamic resolution (a picture's side rounded to the 2 x 2 merger's
    ``2 * patch`` and its area kept between ``(2 * patch)**2`` and ``px**2``), its video processor (``video_class``)
    the same; ``pixel_settings``: the image processor's own (Qwen3-VL's mean and std of 0.5)."""
    import transformers as t

    tok = vlm_tokenizer(words, QWEN_SPECIALS, chat_template=template, pad_token="<|endoftext|>",
                        eos_token="<|im_end|>", unk_token="[UNK]",
                        named={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"})
    patch = 4 if size.px <= 32 else 8  # 8 x 8 patches, 4 x 4 tokens after the 2 x 2 merger
    grid = dict(patch_size=patch, merge_size=2, temporal_patch_size=2)
    area = {"shortest_edge": (2 * patch) ** 2, "longest_edge": size.px ** 2}
    pixels = t.Qwen2VLImageProcessorPil(size=area, **grid, **pixel_settings)
    video = {"video_processor_type": video_class, "size": area, "image_mean": pixels.image_mean,
             "image_std": pixels.image_std, **grid}
    return ProcessorFiles(tok, pixels, {"video_processor": video, "processor_class": processor_class}, template)


def _qwen_ids(tok: Any) -> dict[str, int]:
    return dict(zip(("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"),
                    tok.convert_tokens_to_ids(["<|image_pad|>", "<|video_pad|>", "<|vision_start|>",
                                               "<|vision_end|>"])))


def qwen2_vl(words: Words, size: Size) -> Built:
    """Qwen2-VL: a ViT of 2-frame 3-D patches, a 2 x 2 patch merger into a Qwen2 language model."""
    import transformers as t

    processor = _qwen_processor(words, size, "Qwen2VLProcessor")
    tok, patch = processor.tokenizer, processor.image_processor.patch_size
    vision = dict(depth=size.vision_layers, embed_dim=size.vision, hidden_size=size.text, num_heads=size.vision_heads,
                  mlp_ratio=4, patch_size=patch, spatial_merge_size=2, temporal_patch_size=2)
    config = t.Qwen2VLConfig(text_config=text_config(size, len(tok), tok, rope_parameters=_mrope(size)),
                             vision_config=vision, **_qwen_ids(tok))
    return Built(with_ends(t.Qwen2VLForConditionalGeneration(config), tok), processor)


def qwen2_5_vl(words: Words, size: Size) -> Built:
    """Qwen2.5-VL: Qwen2-VL with windowed attention in the vision tower (full attention in its last layer)."""
    import transformers as t

    processor = _qwen_processor(words, size, "Qwen2_5_VLProcessor")
    tok, patch = processor.tokenizer, processor.image_processor.patch_size
    vision = dict(depth=size.vision_layers, hidden_size=size.vision, intermediate_size=4 * size.vision,
                  num_heads=size.vision_heads, out_hidden_size=size.text, patch_size=patch, spatial_merge_size=2,
                  temporal_patch_size=2, window_size=4 * patch, fullatt_block_indexes=[size.vision_layers - 1])
    config = t.Qwen2_5_VLConfig(text_config=text_config(size, len(tok), tok, rope_parameters=_mrope(size)),
                                vision_config=vision, **_qwen_ids(tok))
    return Built(with_ends(t.Qwen2_5_VLForConditionalGeneration(config), tok), processor)


def qwen3_vl(words: Words, size: Size) -> Built:
    """Qwen3-VL as Qwen/Qwen3-VL-2B-Instruct declares it: a ViT of 16-px 2-frame patches with learned positions
    resampled to each grid, a 2 x 2 merger, and DeepStack (the merged tokens of some intermediate vision layers,
    ``deepstack_visual_indexes``, added to the hidden states of the language model's first layers at the image's
    place), into a Qwen3 language model with interleaved multimodal rotary positions; its chat template writes no
    default system turn; its generation config ends on ``<|im_end|>`` or ``<|endoftext|>`` (a list)."""
    import transformers as t

    processor = _qwen_processor(words, size, "Qwen3VLProcessor", QWEN3_TEMPLATE, "Qwen3VLVideoProcessor",
                                image_mean=[0.5] * 3, image_std=[0.5] * 3)
    tok, patch = processor.tokenizer, processor.image_processor.patch_size
    head = size.text // size.text_heads
    half = head // 2  # the released models split 64 as [24, 20, 20], interleaved
    rope = {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
            "mrope_section": [half - 2 * (5 * half // 16), 5 * half // 16, 5 * half // 16]}
    vision = dict(depth=size.vision_layers, hidden_size=size.vision, intermediate_size=4 * size.vision,
                  num_heads=size.vision_heads, out_hidden_size=size.text, patch_size=patch, spatial_merge_size=2,
                  temporal_patch_size=2, num_position_embeddings=(size.px // patch) ** 2,
                  deepstack_visual_indexes=list(range(size.vision_layers))[:3])  # (2B: layers 5, 11, 17 of 24)
    text = {**text_config(size, len(tok), tok, rope_parameters=rope, head_dim=head),
            "bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>")}  # (as the released text config)
    config = t.Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True, **_qwen_ids(tok))
    model = with_ends(t.Qwen3VLForConditionalGeneration(config), tok)
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    model.generation_config.bos_token_id = text["bos_token_id"]
    return Built(model, processor)


GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
                "<|end_of_video|>", "<|image|>", "<|video|>", "[UNK]"]


def glm4v(words: Words, size: Size) -> Built:
    """GLM-4.1V as zai-org/GLM-4.1V-9B-Thinking declares it: a ViT of 14-px 2-frame patches (learned positions
    resampled to each grid, a 2 x 2 convolution down-sampling and an MLP merger) into a GLM-4 language model with
    multimodal rotary positions over half of each head; the prompt ``[gMASK]<sop><|user|>...<|assistant|>``; its
    config and generation config end on any of ``<|endoftext|>``, ``<|user|>`` and ``<|observation|>`` (a list
    of end tokens, the tokenizer's eos first)."""
    import transformers as t

    tok = vlm_tokenizer(words, GLM_SPECIALS, chat_template=GLM4V_TEMPLATE, pad_token="<|endoftext|>",
                        eos_token="<|endoftext|>", unk_token="[UNK]",
                        named={"image_token": "<|image|>", "video_token": "<|video|>"})
    patch = 4 if size.px <= 32 else 8
    grid = dict(patch_size=patch, merge_size=2, temporal_patch_size=2)
    # (its resize counts the two frames of a picture in the area, as the release's 28 * 28 * 2 * 6144 does)
    area = {"shortest_edge": 2 * (2 * patch) ** 2, "longest_edge": 2 * size.px ** 2}
    pixels = t.Glm4vImageProcessorPil(size=area, **grid)
    video = {"video_processor_type": "Glm4vVideoProcessor", "size": area, "image_mean": pixels.image_mean,
             "image_std": pixels.image_std, "fps": 2, **grid}
    processor = ProcessorFiles(tok, pixels, {"video_processor": video, "processor_class": "Glm4vProcessor"},
                               GLM4V_TEMPLATE)
    ends = tok.convert_tokens_to_ids(["<|endoftext|>", "<|user|>", "<|observation|>"])
    half = size.text // size.text_heads // 4  # a head's rotary half over half of it (partial_rotary_factor 0.5)
    rope = {"rope_type": "default", "rope_theta": 10_000.0, "partial_rotary_factor": 0.5,
            "mrope_section": [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]}
    text = {**text_config(size, len(tok), tok, rope_parameters=rope), "eos_token_id": ends}
    vision = dict(depth=size.vision_layers, hidden_size=size.vision, intermediate_size=4 * size.vision,
                  num_heads=size.vision_heads, out_hidden_size=size.text, patch_size=patch, spatial_merge_size=2,
                  temporal_patch_size=2, image_size=size.px)
    ids = dict(zip(("image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
                    "video_start_token_id", "video_end_token_id"),
                   tok.convert_tokens_to_ids(["<|image|>", "<|video|>", "<|begin_of_image|>", "<|end_of_image|>",
                                              "<|begin_of_video|>", "<|end_of_video|>"])))
    config = t.Glm4vConfig(text_config=text, vision_config=vision, **ids)
    model = with_ends(t.Glm4vForConditionalGeneration(config), tok)
    model.generation_config.eos_token_id = ends
    return Built(model, processor)
