"""``rlcap caption CHECKPOINT IMAGE...``: image files to captions."""

from __future__ import annotations

import argparse

from rlcap import api


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("caption", help="caption image files with a trained checkpoint")
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/demo/xe/best)")
    p.add_argument("images", nargs="+", help="image files (JPEG, PNG, ...; converted to RGB)")
    p.add_argument("--beam-size", type=int, default=3, help="beam size (1: greedy; default 3)")
    p.add_argument("--max-len", type=int, default=16, help="longest caption in words")
    p.add_argument("--image-size", type=int, default=None,
                   help="encoder input size (default: the size of the checkpoint's training features)")
    p.add_argument("--out", default=None, help="also write {image: caption} to this JSON file")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    captions = api.caption_images(args.checkpoint, args.images, args.beam_size, args.max_len, args.image_size)
    for path, text in captions.items():
        print(f"{path}\t{text}")
    if args.out:
        api.write_json(args.out, captions)
    return 0
