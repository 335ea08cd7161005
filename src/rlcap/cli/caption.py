"""``rlcap caption CHECKPOINT IMAGE...``: image files (or folders of them) to captions.

A folder stands for every image under it. With ``--skip-bad`` an unreadable image is reported on
stderr (one line: the file and why) and the others are captioned; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import sys

from rlcap import api
from rlcap.cli.options import COUNT, IMAGE_SIZE, add_decoding_arguments, output_file, set_threads
from rlcap.files import check_writable


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("caption", help="caption image files with a trained checkpoint")
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/demo/xe/best)")
    p.add_argument("images", nargs="+",
                   help="image or video files (JPEG, PNG, ...; MP4, AVI, ...) or folders (every image and video "
                        "under them), or a Hugging Face datasets dataset (its pictures, read in place, each "
                        "named by its row: DATASET train row 0)")
    add_decoding_arguments(p)
    p.add_argument("--image-size", type=IMAGE_SIZE, default=None,
                   help="encoder input size (default: the size of the checkpoint's training features)")
    p.add_argument("--out", type=output_file, default=None,
                   help="also write {image: caption} to this JSON file (its folder must exist)")
    p.add_argument("--skip-bad", action="store_true",
                   help="caption the readable images, report each unreadable one on stderr and exit with 1 "
                        "(default: stop at the first, writing nothing)")
    p.add_argument("--batch-size", type=COUNT, default=16, help="images per forward pass (default 16)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    bad: list[tuple[str, str]] = []

    def report(path: str, reason: str) -> None:
        bad.append((path, reason))
        print(f"rlcap caption: skipped: {reason}", file=sys.stderr)  # the reason names the file

    set_threads(args.threads)
    if args.out:
        check_writable(args.out)  # before the captioning, not after it
    captions = api.caption_images(args.checkpoint, args.images, args.beam_size, args.max_len, args.image_size,
                                  batch_size=args.batch_size, on_bad_image=report if args.skip_bad else None,
                                  device=args.device, precision=args.precision)
    for path, text in captions.items():
        print(f"{path}\t{text}")
    if args.out:
        api.write_json(args.out, captions)
    if bad:
        print(f"rlcap caption: {len(bad)} of {len(bad) + len(captions)} images could not be read", file=sys.stderr)
        return 1
    return 0
