"""``rlcap hf-captioner OUT --dataset DS``: a transformers captioner with random weights and a tokenizer trained on
the dataset's training captions, saved as a downloaded one's folder (rlcap.models.hf.build_captioner), for `model.arch: hf`
where no pretrained captioner can be had: the shapes-hf benchmark, bench_hf.py, trying the flow offline."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlcap.cli.options import int_range


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from rlcap.models.hf.build_captioner import CAPTIONER_FAMILIES, SIZES
    from rlcap.models.hf.build_vlm import SIZES as VLM_SIZES, VLM_FAMILIES

    parser = subparsers.add_parser(
        "hf-captioner", help="build a transformers captioner folder from a small config (random weights)",
        description="Build a VisionEncoderDecoder (ViT + GPT-2), BLIP or GIT captioner, or an instruction "
                    "vision-language model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V, Gemma 3, PaliGemma, InternVL, "
                    "SmolVLM, Idefics2, LLaVA, LLaVA-OneVision, Mistral 3, Florence-2; sizes tiny, mini and small) "
                    "with its processor and chat template, with random weights and a tokenizer trained on the "
                    "dataset's training captions, saved as save_pretrained writes a downloaded model: a folder "
                    "for model.arch=hf model.path=OUT. docs/MODELS.md.")
    parser.add_argument("out", type=Path, help="the folder to write (must not hold a model already)")
    parser.add_argument("--dataset", type=Path, required=True, help="the caption file whose training captions the "
                                                                    "tokenizer learns")
    parser.add_argument("--family", choices=CAPTIONER_FAMILIES + VLM_FAMILIES, default="git",
                        help="the transformers model family to build (the folder then runs as model.arch=hf)")
    parser.add_argument("--size", choices=list(dict.fromkeys([*SIZES, *VLM_SIZES])), default="small",
                        help="tiny, small or base for a captioner; tiny, mini or small for a vision-language model")
    parser.add_argument("--tokenizer", choices=["wordpiece", "word"], default="wordpiece")
    parser.add_argument("--vocab-size", type=int_range(8), default=30522, help="most wordpiece tokens (default 30522)")
    parser.add_argument("--seed", type=int_range(0), default=0)
    parser.set_defaults(func=run)  # fmt: skip
    return parser


def run(args: argparse.Namespace) -> int:
    from rlcap.data.readers import read_dataset
    from rlcap.errors import ConfigError
    from rlcap.files import check_writable
    from rlcap.models.hf.build_captioner import build_captioner
    from rlcap.models.hf.build_vlm import VLM_FAMILIES, build_vlm

    if (args.out / "config.json").exists():
        raise ConfigError(f"{args.out} already holds a model (config.json): choose another folder")
    check_writable(args.out, folder=True)
    captions = [c for r in read_dataset(args.dataset) if r.split == "train" for c in r.captions]
    if args.family in VLM_FAMILIES:
        build_vlm(args.family, args.out, captions, args.size, args.seed, args.tokenizer, args.vocab_size)
    else:
        build_captioner(args.family, args.out, captions, args.size, args.seed, args.tokenizer, args.vocab_size)
    print(f"hf-captioner: {args.out} ({args.family}, {args.size}, tokenizer of {len(captions)} training captions)")
    return 0
