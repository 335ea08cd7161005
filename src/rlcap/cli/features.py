"""``rlcap features``: encode a folder of images (or videos: frames sampled, one vector per frame)
into an HDF5 feature file, with EfficientNet-Lite0 or a local transformers model (``--encoder hf:DIR``)."""

from __future__ import annotations

import argparse
import sys

from rlcap.cli.options import COUNT, IMAGE_SIZE, float_range, int_range, set_threads, threads_option
from rlcap.cli.stopping import how_stopped, sigterm_as_interrupt
from rlcap.data.hf_datasets import ColumnNeeded, Columns, layout
from rlcap.data.media import is_video
from rlcap.encoders.extract import extract_features
from rlcap.encoders.load import DEFAULT_ENCODER, check_encoder_name
from rlcap.encoders.sources import dataset_files, find_media, karpathy_images
from rlcap.encoders.video import extract_video_features
from rlcap.errors import ConfigError, DataError
from rlcap.progress import progress

_MAX_LISTED_FAILURES = 10


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "features",
        help="encode images with a frozen encoder (EfficientNet-Lite0, or a transformers model: hf:DIR) into an "
             "HDF5 feature file",
        description="Encode every image of IMAGE_DIR (ids = file stems) or of a Karpathy dataset "
        "JSON into an HDF5 feature file, with EfficientNet-Lite0 or a local transformers model (--encoder hf:DIR). Ids already in the file are skipped, so an "
        "interrupted run resumes when started again; an id whose image file changed since it was "
        "encoded (size, time and content are recorded) is encoded again. A file of another "
        "--image-size is refused.",
    )
    parser.add_argument("image_dir", metavar="IMAGE_DIR",
                        help="folder of images, or of videos, not both (searched recursively); with --dataset, "
                             "the folder its filepath/filename entries are relative to (the dataset's own folder "
                             "for shapes); or `convert`: rlcap features convert IN OUT.h5")
    parser.add_argument("convert", nargs="*", metavar="IN OUT.h5",
                        help="with `convert`: any store rlcap reads (bottom-up-attention .tsv files or a folder of "
                             "them, self-critical.pytorch or npz folders, HDF5) into rlcap's chunked HDF5 OUT.h5, "
                             "resumable (docs/FEATURES.md)")
    parser.add_argument("--out", help="output .h5 file (appended to if it exists)")
    parser.add_argument("--encoder", default=DEFAULT_ENCODER, metavar="NAME",
                        help=f"{DEFAULT_ENCODER} (default: ImageNet weights shipped with rlcap) or hf:DIR, a local "
                             "transformers folder (CLIP, SigLIP, ViT, DINOv2, ConvNeXt, or the image tower of a "
                             "VisionEncoderDecoder, BLIP or GIT captioner), read with its own image processor "
                             "(docs/FEATURES.md)")
    parser.add_argument("--image-size", type=IMAGE_SIZE, default=None,
                        help=f"{DEFAULT_ENCODER}: images are resized to this square; grid = ceil(size/32) (default "
                             "224 -> 7x7). An hf: model takes its image processor's size")
    parser.add_argument("--batch-size", type=COUNT, default=32, help="images per forward pass (default 32)")
    parser.add_argument("--dataset", help="Karpathy dataset JSON (ids from cocoid|id|imgid, files at "
                        "IMAGE_DIR/[filepath/]filename) or any caption file with file names (MSR-VTT annotations: "
                        "IMAGE_DIR/<video_id>.mp4)")
    parser.add_argument("--columns", default="", metavar="image=COL,id=COL,...",
                        help="a Hugging Face datasets dataset (IMAGE_DIR itself, or --dataset): the columns of its "
                             "pictures, captions, ids and splits when they are not image, caption, the file name "
                             "and its own splits (the data.*_column keys; docs/TRAINING.md)")
    parser.add_argument("--frames", type=COUNT, default=16,
                        help="videos: frames sampled evenly over each clip (default 16)")
    parser.add_argument("--fps", type=float_range(0.01), default=None,
                        help="videos: sample this many frames per second instead ([Wang18]: 3), at most --max-frames")
    parser.add_argument("--max-frames", type=COUNT, default=64, help="videos: most frames kept with --fps (default 64)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip missing or unreadable images (listed at the end) instead of stopping")
    parser.add_argument("--workers", type=int_range(0), default=1, help="image loading threads (default 1)")
    parser.add_argument("--device", default="auto", help="where the encoder runs (images): auto (CUDA when torch sees "
                                                         "it, else the CPU), cpu, cuda, cuda:N or mps")
    parser.add_argument("--threads", type=threads_option,
                        help="torch CPU threads (default: torch's choice): a count, or auto (as a run's threads "
                             "setting: the cores less those other jobs keep busy as it starts, docs/TRAINING.md); "
                             "on a machine shared with other jobs, auto or 1")
    parser.add_argument("--dtype", choices=("float16", "float32"), default="float16",
                        help="storage precision (default float16: half the size)")
    parser.set_defaults(func=run)
    return parser


def _run_videos(args: argparse.Namespace, videos: dict) -> int:
    with progress(len(videos), "features", unit="video") as bar:
        stats = extract_video_features(videos, args.out, image_size=args.image_size, encoder=args.encoder,
                                       n_frames=args.frames,
                                       fps=args.fps, max_frames=args.max_frames, progress=bar.update,
                                       on_error="skip" if args.skip_bad else "raise", dtype=args.dtype)
    print(f"{args.out}: encoded {stats.encoded} videos in {stats.seconds:.1f} s, {stats.already_done} already "
          f"present, {len(stats.failed)} skipped")
    for id, reason in stats.failed[:_MAX_LISTED_FAILURES]:
        print(f"  skipped {id}: {reason}")
    _say_recorded(args.out, stats.failed)
    return 0


def _say_recorded(out: str, failed: list) -> None:
    if failed:
        print(f"  {out} records them as skipped: a run on it leaves them out (and says so); fix them and run this "
              "command again to add them")


def run(args: argparse.Namespace) -> int:
    """Encode (or convert), SIGTERM stopping it as Ctrl-C does: either way the rows written are kept and said."""
    if args.image_dir == "convert":
        if len(args.convert) != 2 or args.out:
            raise ConfigError("rlcap features convert takes IN OUT.h5: the store to read and the HDF5 file to write")
        args.out = args.convert[1]
    elif args.convert or not args.out:
        raise ConfigError("rlcap features IMAGE_DIR --out FILE.h5 (or rlcap features convert IN OUT.h5)")
    try:
        with sigterm_as_interrupt():
            return _convert(args) if args.image_dir == "convert" else _run(args)
    except KeyboardInterrupt as exc:
        how, code = how_stopped(exc)
        kept = _rows(args.out)
        print(f"rlcap features: {how}; {args.out} keeps the {kept} rows written before. Continue with the same "
              "command: the rows already there are not encoded again", file=sys.stderr)
        return code


def _convert(args: argparse.Namespace) -> int:
    from rlcap.data.features import open_feature_store
    from rlcap.data.features.convert import convert_store

    with open_feature_store(args.convert[0]) as source:
        total = len(source)
    with progress(total, "convert", unit="img") as bar:
        stats = convert_store(args.convert[0], args.out, dtype=args.dtype, progress=bar.update)
    print(f"{args.out}: converted {stats.converted} images from {args.convert[0]} in {stats.seconds:.1f} s, "
          f"{stats.already_present} already present")
    return 0


def _rows(path: str) -> int:
    """The rows a store holds (0 when there is none yet)."""
    from rlcap.data.features import open_feature_store

    try:
        with open_feature_store(path) as store:
            return len(store)
    except (DataError, OSError):
        return 0


def _columns(text: str) -> Columns:
    """``image=img,id=img_id`` -> the columns of a datasets dataset (the others their defaults)."""
    given = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    unknown = sorted(set(given) - set(Columns._fields))
    if unknown or any("=" not in item for item in text.split(",") if item):
        raise ConfigError(f"--columns {text!r}: expected KEY=COLUMN pairs, KEY one of {', '.join(Columns._fields)}")
    return Columns(**given)


def _images(args: argparse.Namespace, columns: Columns) -> dict:
    """id -> picture of what the command names: a datasets dataset, a caption file's images, or a folder's."""
    if args.dataset is None and layout(args.image_dir) is not None:  # a datasets dataset: its pictures, in place
        args.dataset = args.image_dir
    if args.dataset and layout(args.dataset) is not None:
        return dataset_files(args.dataset, args.image_dir, columns)
    if args.dataset:
        try:
            return karpathy_images(args.dataset, args.image_dir)
        except DataError:
            return dataset_files(args.dataset, args.image_dir, columns)
    return find_media(args.image_dir)  # its images or its videos, never both


def _run(args: argparse.Namespace) -> int:
    check_encoder_name(args.encoder)  # before any image is looked for
    if args.threads:
        set_threads(args.threads)
    try:
        images = _images(args, _columns(args.columns))
    except ColumnNeeded as exc:  # the column named as this command names it, not by the training key
        raise exc.named_by(f"--columns {exc.field}=COL") from None
    if images and all(is_video(p) for p in images.values()):
        return _run_videos(args, images)
    with progress(len(images), "features", unit="img") as bar:
        stats = extract_features(
            images, args.out, image_size=args.image_size, batch_size=args.batch_size, encoder=args.encoder,
            progress=bar.update, on_error="skip" if args.skip_bad else "raise",
            num_workers=args.workers, dtype=args.dtype, device=args.device,
        )
    changed = f", {stats.changed} of them changed since last encoded" if stats.changed else ""
    print(f"{args.out}: encoded {stats.encoded} images ({stats.images_per_second:.1f}/s{changed}), "
          f"{stats.already_done} already present, {len(stats.failed)} skipped")
    for id, reason in stats.failed[:_MAX_LISTED_FAILURES]:
        print(f"  skipped {id}: {reason}")
    if len(stats.failed) > _MAX_LISTED_FAILURES:
        print(f"  ... and {len(stats.failed) - _MAX_LISTED_FAILURES} more")
    _say_recorded(args.out, stats.failed)
    return 0
