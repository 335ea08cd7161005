"""Tokenizers for the vision-language models built offline (rlcap.models.hf.build_vlm): WordPiece subwords trained
in seconds on the captions and the words of the family's prompts, the family's special tokens (image token,
turn markers, task tokens) first in the vocabulary, and the family's chat template where it has one; and those
chat templates, shortened from the ones the families' instruct checkpoints ship (same turn markers, same image
placement)."""

from __future__ import annotations

from typing import Any, NamedTuple

from rlcap.models.hf.tokenizer_train import caption_tokenizer

# Qwen2-VL-Instruct's template: a default system turn, the picture as <|vision_start|><|image_pad|><|vision_end|>.
QWEN_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen3-VL-Instruct's: Qwen2-VL's turns and picture, no default system turn.
QWEN3_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# GLM-4.1V's: "[gMASK]<sop><|user|>\n<|begin_of_image|><|image|><|end_of_image|>text<|assistant|>\n".
GLM4V_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# SmolVLM-Instruct's (Idefics3): "User:<image>text<end_of_utterance>\nAssistant:".
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
# HuggingFaceM4/idefics2-8b's: IDEFICS3_TEMPLATE without <|im_start|>, the <s> its tokenizer puts first written here
# (the tokenizers built here add no special tokens of their own).
IDEFICS2_TEMPLATE = "{{ bos_token }}" + IDEFICS3_TEMPLATE.removeprefix("<|im_start|>")
# google/gemma-3-4b-it's (its system turn left out): "<bos><start_of_turn>user\n<start_of_image>text<end_of_turn>\n
# <start_of_turn>model\n", the assistant's role written "model"; the processor expands <start_of_image>.
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' }}{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for item in message['content'] %}{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
# llava-hf/llava-1.5's: "USER: <image>\ntext ASSISTANT:".
LLAVA_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}USER: {% else %}ASSISTANT: {% endif %}"
    "{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}"
    "{% elif item['type'] == 'image' %}<image>\n{% endif %}{% endfor %}"
    "{% if message['role'] == 'user' %} {% else %}{{ eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)
# OpenGVLab/InternVL3-hf's: Qwen2's turns, the picture as <IMG_CONTEXT> and a newline (the processor writes
# <img>, its tiles' <IMG_CONTEXT>s and </img> there).
INTERNVL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<IMG_CONTEXT>\n{% elif content['type'] == 'video' %}<video>\n"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# llava-hf/llava-onevision-qwen2-ov-hf's: Qwen2's turns, a turn's pictures first, then its text after a newline.
ONEVISION_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}<image>{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}<video>{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}\n{{ content['text'] }}"
    "{% endfor %}{% endif %}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# mistralai/Mistral-Small-3.1-Instruct's: <s>, a system prompt (its own long default here shortened), the picture as
# [IMG] inside [INST] ... [/INST] (the processor writes its rows of [IMG]s ended by [IMG_BREAK], the last [IMG_END]).
MISTRAL3_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set system_message = messages[0]['content'] %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set system_message = 'You are a helpful assistant.' %}"
    "{% set loop_messages = messages %}{% endif %}[SYSTEM_PROMPT]{{ system_message }}[/SYSTEM_PROMPT]"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}[INST]{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for block in message['content'] %}{% if block['type'] == 'text' %}"
    "{{ block['text'] }}{% elif block['type'] in ['image', 'image_url'] %}[IMG]{% endif %}{% endfor %}{% endif %}"
    "[/INST]{% elif message['role'] == 'assistant' %}{{ message['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
# PaliGemma has no chat template: its processor puts <image>s and <bos> before the prompt ("caption en").
PROMPT_WORDS = "you are a helpful assistant user system describe this image briefly in one sentence caption en " \
               "what does the : . , ?"


class Words(NamedTuple):
    """What a tokenizer learns: the captions, ``kind`` ``wordpiece`` (subwords, at most ``vocab_size``) or
    ``word`` (whole words)."""

    captions: list[str]
    kind: str = "wordpiece"
    vocab_size: int = 4096


def vlm_tokenizer(words: Words, specials: list[str], *, chat_template: str | None = None,
                  named: dict[str, str] | None = None, **roles: str) -> Any:
    """A fast tokenizer trained on ``words`` (and the prompts' words), lower-cased, ``specials`` at ids 0.. in
    order, ``roles`` (pad_token=..., eos_token=..., unk_token=...) and ``named`` special tokens (image_token=...:
    the attributes the family's processor reads) among them."""
    from transformers import PreTrainedTokenizerFast

    tok = caption_tokenizer([*words.captions, PROMPT_WORDS], words.kind, words.vocab_size, specials,
                            roles["unk_token"])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, extra_special_tokens=named or {}, **roles)
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast
