"""Memory per rank of DDP and FSDP2 for 1B, 3B and 7B vision-language policies, computed (not measured) from the
widths of their published configs: each model is built on the meta device (no weights, no download) and its
parameters counted, each once.

    python benchmarks/fsdp_memory.py            (prints the markdown table docs/SCALING.md holds)

The formula (Adam, fp32 master weights, as rlcap trains with ``precision: bf16``: autocast and FSDP2's mixed
precision compute in bf16, the weights, gradients and optimizer state stay fp32), P the language model's
parameters (what ``model.train: all`` trains: the tower is read from the store, kept aside), V the tower's:

* full fine-tuning, DDP: 16 P bytes a rank (4 weights + 4 gradients + 8 Adam's two moments), whatever N;
* full fine-tuning, FSDP2 over N ranks: 16 P / N at rest, plus while a step runs the units it has gathered in bf16
  (the root's embeddings and output layer, 2 bytes each, and a decoder layer or two), and while it samples the whole
  language model gathered in bf16 (2 P: :func:`rlcap.distributed.whole_weights`);
* LoRA (``model.train: lora``, the weights frozen in ``model.dtype: bfloat16``): DDP 2 P, FSDP2 2 P / N (the
  adapters' few million parameters left out).

Activations, the key/value cache and the tower (V, kept aside on each rank: 2 V bytes in bf16) come on top of each.
"""

from __future__ import annotations

from typing import Any, NamedTuple

GB = 1e9


class Policy(NamedTuple):
    name: str
    source: str  # where the widths come from
    build: Any  # () -> the transformers model class and its config


def _qwen2_5_vl_3b() -> tuple[Any, Any]:
    import transformers as t

    return t.Qwen2_5_VLForConditionalGeneration, t.Qwen2_5_VLConfig(
        text_config=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048),
        tie_word_embeddings=True)


def _qwen2_vl_7b() -> tuple[Any, Any]:
    import transformers as t

    return t.Qwen2VLForConditionalGeneration, t.Qwen2VLConfig(
        text_config=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                         num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
        vision_config=dict(depth=32, embed_dim=1280, hidden_size=3584, mlp_ratio=4, num_heads=16),
        tie_word_embeddings=False)


def _internvl3_1b() -> tuple[Any, Any]:
    import transformers as t

    return t.InternVLForConditionalGeneration, t.InternVLConfig(
        text_config=dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151674),
        vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                           image_size=[448, 448], patch_size=[14, 14]),
        downsample_ratio=0.5, tie_word_embeddings=True)


POLICIES = (
    Policy("InternVL3-1B", "OpenGVLab/InternVL3-1B-hf: InternViT-300M (24 x 1024) + Qwen2.5-0.5B (24 x 896, tied "
                           "embeddings)", _internvl3_1b),
    Policy("Qwen2.5-VL-3B", "Qwen/Qwen2.5-VL-3B-Instruct config.json (36 x 2048, vocabulary 151,936, tied; tower "
                            "32 x 1280)", _qwen2_5_vl_3b),
    Policy("Qwen2-VL-7B", "Qwen/Qwen2-VL-7B-Instruct config.json (28 x 3584, vocabulary 152,064, untied; tower "
                          "32 x 1280)", _qwen2_vl_7b),
)


class Counts(NamedTuple):
    total: int   # every parameter, each once
    tower: int   # the image side's (vision tower and projector / merger)
    root: int    # what FSDP2's root unit holds: the language model's parameters outside its decoder layers
    layer: int   # one decoder layer's


def count(policy: Policy) -> Counts:
    """``policy``'s parameters, built on the meta device."""
    import torch

    model_class, config = policy.build()
    with torch.device("meta"):
        model = model_class(config)
    seen: dict[int, tuple[str, int]] = {}
    for name, param in model.named_parameters():
        seen.setdefault(id(param), (name, param.numel()))
    tower = sum(n for name, n in seen.values() if any(k in name for k in ("visual", "vision", "projector")))
    total = sum(n for _, n in seen.values())
    layers = [n for name, n in seen.values() if ".layers." in name and "vision" not in name and "visual" not in name]
    text_layers = config.get_text_config().num_hidden_layers
    layer = sum(layers) // text_layers
    return Counts(total, tower, total - tower - sum(layers), layer)


def rows(ranks: tuple[int, ...] = (2, 4, 8)) -> list[str]:
    """The markdown table: per policy, its counts and GB a rank (module docstring's formula)."""
    head = ["policy", "P (language model)", "V (tower)", "full FT: DDP", *[f"full FT: FSDP2, N={n}" for n in ranks],
            "+ gathered for sampling (bf16)", "LoRA: DDP", *[f"LoRA: FSDP2, N={n}" for n in ranks]]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for policy in POLICIES:
        c = count(policy)
        p = c.total - c.tower
        gathered = 2 * (c.root + 2 * c.layer)  # bf16: the root and two layers (one computing, one prefetched)
        cells = [policy.name, f"{p / 1e9:.2f} B", f"{c.tower / 1e9:.2f} B", f"{16 * p / GB:.1f}",
                 *[f"{(16 * p / n + gathered) / GB:.1f}" for n in ranks], f"{2 * p / GB:.1f}", f"{2 * p / GB:.1f}",
                 *[f"{2 * p / n / GB:.1f}" for n in ranks]]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # (--help; no options)
    for line in rows():
        print(line)
    for policy in POLICIES:
        c = count(policy)
        print(f"- {policy.name}: {c.total:,} parameters ({c.total - c.tower:,} language model, {c.tower:,} tower), "
              f"root unit {c.root:,}, a decoder layer {c.layer:,}; widths from {policy.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
