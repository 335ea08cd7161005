"""One builder per vision-language family for rlcap.models.hf.build_vlm (the families whose language model takes
rotary positions from the picture's grid, Qwen2-VL to Qwen3-VL and GLM-4.1V, in build_vlm_grid.py): a processor (the family's image
processor, a tokenizer trained on the captions with the family's special tokens and chat template) and a model of
the family's transformers class from a small config, sized by ``Size``. The processor is made first: some families'
processors add tokens (PaliGemma's location and segmentation tokens), and the model's vocabulary covers them all.
The pictures' pixel classes are the PIL ones (``...ImageProcessorPil``): what transformers loads without
torchvision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from rlcap.models.hf.build_tokenizer import (GEMMA3_TEMPLATE, IDEFICS2_TEMPLATE, IDEFICS3_TEMPLATE, INTERNVL_TEMPLATE,
                                             LLAVA_TEMPLATE, MISTRAL3_TEMPLATE, ONEVISION_TEMPLATE, Words,
                                             vlm_tokenizer)


class Size(NamedTuple):
    """Widths, depths and heads of the vision tower and the language model; the pictures' side in pixels."""

    vision: int
    vision_layers: int
    vision_heads: int
    text: int
    text_layers: int
    text_heads: int
    px: int


class Built(NamedTuple):
    model: Any  # a transformers PreTrainedModel
    processor: Any  # its ProcessorMixin


def text_config(size: Size, vocab: int, tokenizer: Any, **extra: Any) -> dict[str, Any]:
    """A decoder-only language model's config: ``size``'s text widths, the tokenizer's special ids."""
    return dict(vocab_size=vocab, hidden_size=size.text, intermediate_size=4 * size.text,
                num_hidden_layers=size.text_layers, num_attention_heads=size.text_heads,
                num_key_value_heads=size.text_heads, max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, **extra)


def with_ends(model: Any, tokenizer: Any) -> Any:
    """``model`` whose generation config ends on the tokenizer's end token and pads with its pad token."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


class ProcessorFiles(NamedTuple):
    """A processor saved as the files its ``save_pretrained`` writes (tokenizer, chat_template.jinja,
    processor_config.json with its image and video processors), for the processors transformers cannot construct
    without torchvision (Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's and GLM-4.1V's hold a video processor, which needs
    it): the folder loads with ``AutoProcessor`` wherever torchvision is installed, and its tokenizer, chat
    template and image processor load without it (``AutoTokenizer``, ``AutoImageProcessor``)."""

    tokenizer: Any
    image_processor: Any
    config: dict[str, Any]  # processor_config.json less the image processor: video_processor, processor_class
    chat_template: str

    def save_pretrained(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(folder)
        (folder / "chat_template.jinja").write_text(self.chat_template)
        config = {"image_processor": self.image_processor.to_dict(), **self.config}
        (folder / "processor_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def smolvlm(words: Words, size: Size) -> Built:
    """SmolVLM as HuggingFaceTB/SmolVLM-256M-Instruct is: Idefics3 (a SigLIP tower, pixel shuffle, a Llama),
    with the Idefics3 processor. ``tiny`` splits a picture into tiles of ``px`` plus the whole (its
    <row_i_col_j> and <global-img> tokens); ``small`` reads the whole picture only."""
    import transformers as t

    grid = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    specials = ["<|endoftext|>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
                "<global-img>", *grid, "[UNK]"]
    tok = vlm_tokenizer(words, specials, chat_template=IDEFICS3_TEMPLATE, pad_token="<|endoftext|>",
                        bos_token="<|im_start|>", eos_token="<end_of_utterance>", unk_token="[UNK]",
                        named={"image_token": "<image>", "fake_image_token": "<fake_token_around_image>",
                               "end_of_utterance_token": "<end_of_utterance>"})
    patch, scale = size.px // 4, 2  # 4 x 4 patches, 2 x 2 tokens per tile after the pixel shuffle
    tiles = size.px <= 32
    pixels = t.Idefics3ImageProcessorPil(do_image_splitting=tiles, size={"longest_edge": 2 * size.px if tiles
                                         else size.px}, max_image_size={"longest_edge": size.px})
    processor = t.Idefics3Processor(image_processor=pixels, tokenizer=tok, image_seq_len=(size.px // patch) ** 2
                                    // scale ** 2, chat_template=IDEFICS3_TEMPLATE)
    vision = dict(hidden_size=size.vision, intermediate_size=4 * size.vision, num_hidden_layers=size.vision_layers,
                  num_attention_heads=size.vision_heads, image_size=size.px, patch_size=patch)
    config = t.Idefics3Config(vision_config=vision, text_config=text_config(size, len(tok), tok), scale_factor=scale,
                              image_token_id=tok.convert_tokens_to_ids("<image>"))
    return Built(with_ends(t.Idefics3ForConditionalGeneration(config), tok), processor)


def paligemma(words: Words, size: Size) -> Built:
    """PaliGemma: a SigLIP tower, a linear projector, a Gemma that attends both ways over picture and prompt
    (its prefix) and causally over the caption. No chat template: the prompt is the task, "caption en"."""
    import transformers as t

    tok = vlm_tokenizer(words, ["<pad>", "<eos>", "<bos>", "<unk>", "<image>"], pad_token="<pad>",
                        eos_token="<eos>", bos_token="<bos>", unk_token="<unk>", named={"image_token": "<image>"})
    patch = size.px // 4
    pixels = t.SiglipImageProcessorPil(size={"height": size.px, "width": size.px})
    pixels.image_seq_length = (size.px // patch) ** 2
    processor = t.PaliGemmaProcessor(image_processor=pixels, tokenizer=tok)
    tok = processor.tokenizer  # (with the location and segmentation tokens the processor adds)
    vision = dict(hidden_size=size.vision, intermediate_size=4 * size.vision, num_hidden_layers=size.vision_layers,
                  num_attention_heads=size.vision_heads, image_size=size.px, patch_size=patch)
    text = text_config(size, len(tok), tok, head_dim=size.text // size.text_heads)
    config = t.PaliGemmaConfig(vision_config=vision, text_config=text, image_token_index=tok.image_token_id,
                               projection_dim=size.text, hidden_size=size.text, vocab_size=len(tok))
    return Built(with_ends(t.PaliGemmaForConditionalGeneration(config), tok), processor)


def llava(words: Words, size: Size) -> Built:
    """LLaVA-1.5: a CLIP tower read at its second-to-last layer without its class token, a 2-layer MLP
    projector, a Llama."""
    import transformers as t

    tok = vlm_tokenizer(words, ["<unk>", "<s>", "</s>", "<pad>", "<image>"], chat_template=LLAVA_TEMPLATE,
                        pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                        named={"image_token": "<image>"})
    patch = size.px // 4
    pixels = t.CLIPImageProcessorPil(size={"shortest_edge": size.px}, crop_size={"height": size.px, "width": size.px})
    processor = t.LlavaProcessor(image_processor=pixels, tokenizer=tok, patch_size=patch,
                                 vision_feature_select_strategy="default", chat_template=LLAVA_TEMPLATE,
                                 num_additional_image_tokens=1)
    vision = dict(hidden_size=size.vision, intermediate_size=4 * size.vision, num_hidden_layers=size.vision_layers + 1,
                  num_attention_heads=size.vision_heads, image_size=size.px, patch_size=patch,
                  projection_dim=size.vision)
    config = t.LlavaConfig(vision_config=t.CLIPVisionConfig(**vision), text_config=t.LlamaConfig(**text_config(size, len(tok),
                           tok)), image_token_index=tok.image_token_id, image_seq_length=(size.px // patch) ** 2,
                           vision_feature_select_strategy="default", vision_feature_layer=-2)
    return Built(with_ends(t.LlavaForConditionalGeneration(config), tok), processor)


INTERNVL_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<quad>",
                     "</quad>", "<ref>", "</ref>", "<box>", "</box>", "<video>", "[UNK]"]


def internvl(words: Words, size: Size) -> Built:
    """InternVL3 as OpenGVLab/InternVL3-1B-hf is: an InternViT (class token dropped), a 2 x 2 pixel shuffle, an MLP
    projector, a Qwen2; GotOcr2's image processor, which the InternVL processor asks to tile a picture
    (``crop_to_patches``: 1 to ``max_patches`` tiles of ``px`` by its aspect ratio, plus the whole picture when it
    tiles), ``image_seq_length`` image tokens per tile between <img> and </img>. Its video processor needs
    torchvision: the folder has none (rlcap reads pictures)."""
    import transformers as t

    tok = vlm_tokenizer(words, INTERNVL_SPECIALS, chat_template=INTERNVL_TEMPLATE, pad_token="<|endoftext|>",
                        eos_token="<|im_end|>", unk_token="[UNK]",
                        named={"start_image_token": "<img>", "end_image_token": "</img>",
                               "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"})
    patch = size.px // 4  # 4 x 4 patches, 2 x 2 tokens per tile after the pixel shuffle
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    pixels = t.GotOcr2ImageProcessorPil(size={"height": size.px, "width": size.px}, crop_to_patches=False,
                                        min_patches=1, max_patches=12, image_mean=mean, image_std=std)
    video = {"video_processor_type": "InternVLVideoProcessor", "size": {"height": size.px, "width": size.px},
             "image_mean": mean, "image_std": std, "initial_shift": True}
    seq = (size.px // patch) ** 2 // 4
    processor = ProcessorFiles(tok, pixels, {"image_seq_length": seq, "processor_class": "InternVLProcessor",
                                             "video_processor": video}, INTERNVL_TEMPLATE)
    vision = dict(hidden_size=size.vision, intermediate_size=4 * size.vision, num_hidden_layers=size.vision_layers,
                  num_attention_heads=size.vision_heads, image_size=size.px, patch_size=patch)
    text = t.Qwen2Config(**text_config(size, len(tok), tok, tie_word_embeddings=True))
    config = t.InternVLConfig(vision_config=vision, text_config=text, image_token_id=tok.context_image_token_id,
                              image_seq_length=seq, downsample_ratio=0.5,
                              vision_feature_layer=-1, vision_feature_select_strategy="default")
    return Built(with_ends(t.InternVLForConditionalGeneration(config), tok), processor)


def llava_onevision(words: Words, size: Size) -> Built:
    """LLaVA-OneVision as llava-hf/llava-onevision-qwen2-0.5b-ov-hf is: a SigLIP tower read whole at its last
    layer, an MLP projector, a Qwen2. AnyRes: a picture is read whole at ``px`` and as tiles of ``px`` on the grid
    of ``image_grid_pinpoints`` nearest its shape (up to 4 x 4 here, 6 x 6 released), the tiles' tokens unpadded to
    the picture's aspect, a learned newline after each row, and shrunk past 9 tiles (``anyres_max_9``); so the
    model needs each picture's ``image_sizes``. Its processor holds a video processor, which needs torchvision:
    written file by file (:class:`ProcessorFiles`)."""
    import transformers as t

    tok = vlm_tokenizer(words, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>", "[UNK]"],
                        chat_template=ONEVISION_TEMPLATE, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                        unk_token="[UNK]", named={"image_token": "<image>", "video_token": "<video>"})
    patch = size.px // 4  # 4 x 4 tokens a tile
    pinpoints = [[size.px * i, size.px * j] for i in range(1, 5) for j in range(1, 5)]
    half = [0.5, 0.5, 0.5]
    pixels = t.LlavaOnevisionImageProcessorPil(size={"height": size.px, "width": size.px}, image_mean=half,
                                               image_std=half, image_grid_pinpoints=pinpoints, do_pad=True)
    video = {"video_processor_type": "LlavaOnevisionVideoProcessor", "size": {"height": size.px, "width": size.px},
             "image_mean": half, "image_std": half}
    settings = {"num_image_tokens": (size.px // patch) ** 2, "vision_feature_select_strategy": "full",
                "vision_aspect_ratio": "anyres_max_9"}
    processor = ProcessorFiles(tok, pixels, {**settings, "processor_class": "LlavaOnevisionProcessor",
                                             "video_processor": video}, ONEVISION_TEMPLATE)
    vision = t.SiglipVisionConfig(hidden_size=size.vision, intermediate_size=4 * size.vision,
                                  num_hidden_layers=size.vision_layers, num_attention_heads=size.vision_heads,
                                  image_size=size.px, patch_size=patch, vision_use_head=False)
    text = t.Qwen2Config(**text_config(size, len(tok), tok, tie_word_embeddings=True))
    config = t.LlavaOnevisionConfig(vision_config=vision, text_config=text, image_token_id=tok.image_token_id,
                                    video_token_id=tok.video_token_id, image_grid_pinpoints=pinpoints,
                                    vision_feature_select_strategy="full", vision_feature_layer=-1,
                                    vision_aspect_ratio="anyres_max_9", tie_word_embeddings=True)
    return Built(with_ends(t.LlavaOnevisionForConditionalGeneration(config), tok), processor)


MISTRAL3_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                     "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                     "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]


def mistral3(words: Words, size: Size) -> Built:
    """Mistral Small 3.1 as mistralai/Mistral-Small-3.1-24B-Instruct-2503 is: a Pixtral tower (2-D rotary positions:
    a picture read at its own shape, its longest side at most ``2 * px``), a 2 x 2 patch merger, an MLP projector, a
    Mistral; the Pixtral processor writes a row of [IMG]s per merged patch row, each ended by [IMG_BREAK], the last
    by [IMG_END] ([IMG] is id 10, as released). transformers offers PixtralProcessor only with torchvision (its
    module imports the torchvision image processor's): written file by file (:class:`ProcessorFiles`)."""
    import transformers as t

    tok = vlm_tokenizer(words, MISTRAL3_SPECIALS, chat_template=MISTRAL3_TEMPLATE, pad_token="<pad>",
                        bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                        named={"image_token": "[IMG]", "image_break_token": "[IMG_BREAK]",
                               "image_end_token": "[IMG_END]"})
    patch = size.px // 8  # a merged token per 2 * patch = px / 4 pixels: 4 x 4 tokens for a px x px picture
    pixels = t.PixtralImageProcessorPil(size={"longest_edge": 2 * size.px}, patch_size={"height": patch,
                                                                                          "width": patch})
    settings = {"patch_size": patch, "spatial_merge_size": 2, "image_token": "[IMG]",
                "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]"}
    processor = ProcessorFiles(tok, pixels, {**settings, "processor_class": "PixtralProcessor"}, MISTRAL3_TEMPLATE)
    vision = t.PixtralVisionConfig(hidden_size=size.vision, intermediate_size=4 * size.vision,
                                   num_hidden_layers=size.vision_layers, num_attention_heads=size.vision_heads,
                                   head_dim=size.vision // size.vision_heads, image_size=2 * size.px, patch_size=patch)
    text = t.MistralConfig(**text_config(size, len(tok), tok, head_dim=size.text // size.text_heads,
                                   tie_word_embeddings=False))
    config = t.Mistral3Config(vision_config=vision, text_config=text, image_token_index=tok.image_token_id,
                              spatial_merge_size=2, vision_feature_layer=-1, multimodal_projector_bias=False,
                              projector_hidden_act="gelu", tie_word_embeddings=False)
    return Built(with_ends(t.Mistral3ForConditionalGeneration(config), tok), processor)


def florence2(words: Words, size: Size) -> Built:
    """Florence-2: a DaViT tower (two stages at tiny, four at small) whose tokens and the task prompt's go into a
    BART encoder; the caption comes from its decoder. The processor turns the task token ``<CAPTION>`` into
    "What does the image describe?"."""
    import transformers as t

    tok = vlm_tokenizer(words, ["<s>", "<pad>", "</s>", "<unk>", "<image>"], pad_token="<pad>", bos_token="<s>",
                        eos_token="</s>", unk_token="<unk>", named={"image_token": "<image>"})
    stages = 2 if size.px <= 32 else 4
    widths = [size.vision // 2 ** (stages - 1 - i) for i in range(stages)]
    heads = [max(1, size.vision_heads // 2 ** (stages - 1 - i)) for i in range(stages)]
    grid = size.px // (4 * 2 ** (stages - 1))
    vision = dict(depths=[1] * stages, embed_dim=widths, num_heads=heads, num_groups=heads,
                  patch_size=[7, 3, 3, 3][:stages], patch_stride=[4, 2, 2, 2][:stages],
                  patch_padding=[3, 1, 1, 1][:stages], patch_prenorm=[False, True, True, True][:stages],
                  window_size=grid, projection_dim=size.text, drop_path_rate=0.0)
    pixels = t.CLIPImageProcessorPil(size={"height": size.px, "width": size.px}, do_center_crop=False)
    pixels.image_seq_length = grid * grid + 1  # the grid's tokens and their mean (the projector's)
    processor = t.Florence2Processor(image_processor=pixels, tokenizer=tok)
    text = t.BartConfig(vocab_size=len(tok), d_model=size.text, encoder_layers=size.text_layers,
                        decoder_layers=size.text_layers, encoder_attention_heads=size.text_heads,
                        decoder_attention_heads=size.text_heads, encoder_ffn_dim=4 * size.text,
                        decoder_ffn_dim=4 * size.text, max_position_embeddings=512, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        decoder_start_token_id=tok.eos_token_id, forced_bos_token_id=tok.bos_token_id)
    config = t.Florence2Config(vision_config=vision, text_config=text, image_token_id=tok.image_token_id)
    model = with_ends(t.Florence2ForConditionalGeneration(config), tok)
    model.generation_config.decoder_start_token_id = tok.eos_token_id  # BART's: </s> starts, <s> is forced next
    model.generation_config.forced_bos_token_id = tok.bos_token_id
    return Built(model, processor)


def idefics2(words: Words, size: Size) -> Built:
    """Idefics2 as HuggingFaceM4/idefics2-8b is: a SigLIP tower read at each picture's own size (its patches
    masked), a perceiver resampler that turns any picture into ``resampler_n_latents`` tokens, a Mistral, with the
    Idefics2 processor (``<fake_token_around_image>`` around each picture's ``<image>`` tokens; its tokenizer pads
    with ``<unk>`` as the released one does). ``tiny`` splits a picture into 4 crops plus the whole."""
    import transformers as t

    specials = ["<unk>", "<s>", "</s>", "<fake_token_around_image>", "<image>", "<end_of_utterance>"]
    tok = vlm_tokenizer(words, specials, chat_template=IDEFICS2_TEMPLATE, pad_token="<unk>", bos_token="<s>",
                        eos_token="</s>", unk_token="<unk>")
    patch, latents = size.px // 8, (size.px // 16) ** 2  # at most 8 x 8 patches, resampled to 4 tokens at tiny
    # the released reads pictures of 378 to 980 pixels a side: 3/8 of px to px here
    pixels = t.Idefics2ImageProcessorPil(do_image_splitting=size.px <= 32,
                                         size={"shortest_edge": 3 * size.px // 8, "longest_edge": size.px})
    processor = t.Idefics2Processor(image_processor=pixels, tokenizer=tok, image_seq_len=latents,
                                    chat_template=IDEFICS2_TEMPLATE)
    tok = processor.tokenizer
    vision = dict(hidden_size=size.vision, intermediate_size=4 * size.vision, num_hidden_layers=size.vision_layers,
                  num_attention_heads=size.vision_heads, image_size=size.px, patch_size=patch)
    perceiver = dict(hidden_size=size.text, resampler_n_latents=latents, resampler_depth=min(3, size.vision_layers),
                     resampler_n_heads=size.text_heads, resampler_head_dim=size.text // size.text_heads,
                     num_key_value_heads=max(1, size.text_heads // 4))
    text = {"model_type": "mistral", **text_config(size, len(tok), tok)}
    config = t.Idefics2Config(vision_config=vision, perceiver_config=perceiver, text_config=text,
                              image_token_id=tok.convert_tokens_to_ids("<image>"))
    return Built(with_ends(t.Idefics2ForConditionalGeneration(config), tok), processor)


GEMMA3_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                   "<end_of_image>", "<image_soft_token>"]


def gemma3(words: Words, size: Size) -> Built:
    """Gemma 3 as google/gemma-3-4b-it is: a SigLIP tower whose patches are average-pooled into
    ``mm_tokens_per_image`` soft tokens, normed and projected, into a Gemma 3 of sliding-window (local) layers and
    a global one last (the released: five local to one global), each picture's tokens attending to each other both
    ways (the processor's ``token_type_ids``). The chat template writes ``<start_of_image>``, which the processor
    expands into ``<start_of_image>``, the ``<image_soft_token>``s the model replaces and ``<end_of_image>``.
    The config's end tokens are a list, ``<eos>`` and ``<end_of_turn>`` (the released: [1, 106]), its generation
    config samples with top-k 64 and top-p 0.95 as the released one does. The sliding window is a picture's tokens
    and 8 more (the released: 1024 for 256), so that a prompt and its caption run past it."""
    import transformers as t

    tok = vlm_tokenizer(words, GEMMA3_SPECIALS, chat_template=GEMMA3_TEMPLATE, pad_token="<pad>", eos_token="<eos>",
                        bos_token="<bos>", unk_token="<unk>",
                        named={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                               "image_token": "<image_soft_token>"})
    patch, tokens = size.px // 8, 16 if size.px <= 32 else 64  # 8 x 8 patches pooled 2 x 2 at tiny, 1 x 1 at mini
    pixels = t.Gemma3ImageProcessorPil(size={"height": size.px, "width": size.px}, image_mean=[0.5] * 3,
                                       image_std=[0.5] * 3, resample=2)
    processor = t.Gemma3Processor(image_processor=pixels, tokenizer=tok, image_seq_length=tokens,
                                  chat_template=GEMMA3_TEMPLATE)
    vision = dict(model_type="siglip_vision_model", hidden_size=size.vision, intermediate_size=4 * size.vision,
                  num_hidden_layers=size.vision_layers, num_attention_heads=size.vision_heads, image_size=size.px,
                  patch_size=patch, vision_use_head=False)
    head, ids = size.text // size.text_heads, tok.convert_tokens_to_ids(GEMMA3_SPECIALS)
    text = text_config(size, len(tok), tok, head_dim=head, query_pre_attn_scalar=head, sliding_window=tokens + 8,
                 layer_types=["sliding_attention"] * (size.text_layers - 1) + ["full_attention"],
                 rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}})
    text["num_key_value_heads"] = max(1, size.text_heads // 2)  # grouped queries (the released: 4 for 8 heads)
    ends = [tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")]
    config = t.Gemma3Config(vision_config=vision, text_config=text, mm_tokens_per_image=tokens,
                            boi_token_index=ids[6], eoi_token_index=ids[7], image_token_index=ids[8],
                            eos_token_id=ends)
    model = with_ends(t.Gemma3ForConditionalGeneration(config), tok)
    settings = model.generation_config
    settings.eos_token_id, settings.do_sample, settings.top_k, settings.top_p = ends, True, 64, 0.95
    return Built(model, processor)
