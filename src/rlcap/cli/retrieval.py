"""``rlcap retrieval train CONFIG [key=value ...]`` and ``rlcap retrieval eval CHECKPOINT``.

The retriever of distinctive captioning ([Chaffin24]): rlcap's dual encoder, the
embedding model trained with the symmetric contrastive loss (``algorithm: retriever``). ``eval`` reports R@1/5/10 in both directions
(caption -> image ``t2i``, image -> caption ``i2t``), median rank and MRR on a split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlcap import api
from rlcap.cli.options import COUNT, int_range
from rlcap.command_options import command_options
from rlcap.devices import resolve_device
from rlcap.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("retrieval", help="train or evaluate an image-caption retriever (rewards of [Chaffin24])")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = actions.add_parser("train", help="train rlcap's dual encoder contrastively (algorithm=retriever)")
    t.add_argument("config", help="YAML recipe (e.g. configs/shapes_retrieval.yaml)")
    t.add_argument("overrides", nargs="*", help="key=value overrides, dotted for sections")
    t.set_defaults(func=run_train)
    e = actions.add_parser("eval", help="R@1/5/10 in both directions on a split")
    e.add_argument("checkpoint", help="checkpoint folder of a retriever (e.g. runs/x/best)")
    e.add_argument("--split", default="test", help="split to retrieve in (default: test)")
    e.add_argument("--max-images", type=int_range(0), default=0, help="only the first N images of the split (0: all)")
    e.add_argument("data_overrides", nargs="*", metavar="data.KEY=VALUE",
                   help="data overrides, e.g. data.features=other.h5")
    e.set_defaults(func=run_eval)
    x = actions.add_parser("index", help="embed every image of a dataset once and mine each one's nearest training "
                                         "images: the image bank of the retrieval rewards")
    x.add_argument("retriever", help="a dual-encoder checkpoint folder or a local CLIP folder")
    x.add_argument("--dataset", required=True, help="caption file (Karpathy JSON, COCO with coco_splits, or JSONL)")
    x.add_argument("--features", default="", help="feature store, for a dual encoder (required with one)")
    x.add_argument("--images", default=None, help="folder of the image files, for CLIP")
    x.add_argument("--neighbours", type=COUNT, default=10, help="mined neighbours kept per image (default 10)")
    x.add_argument("--out", required=True, help="the bank to write (HDF5)")
    for p in (e, x):
        p.add_argument("--device", default="auto", help="where the retriever runs: auto (CUDA when torch sees it, "
                                                        "else the CPU), cpu, cuda, cuda:N or mps")
    x.set_defaults(func=run_index)
    return p


def run_train(args: argparse.Namespace) -> int:
    options, overrides = command_options(args.overrides)
    if options.nproc > 1:
        raise ConfigError("nproc: rlcap retrieval train runs one process; rlcap train RECIPE algorithm=retriever "
                          f"nproc={options.nproc} starts several")
    cfg = api.load_run_config(args.config, ["algorithm=retriever", *overrides])
    result = api.train(cfg, resume=options.resume, overwrite=options.overwrite)
    print(f"done: {result.steps} steps, best validation mean recall {result.best_score:.2f}, "
          f"run folder {result.out_dir}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from rlcap.data.loader import load_data
    from rlcap.eval.open_run import checkpoint_data_config
    from rlcap.models.embedding import load_embedding_model
    from rlcap.methods.embedding import retrieval_scores

    model, vocab = load_embedding_model(args.checkpoint)
    model.to(resolve_device(args.device, "--device"))
    config = json.loads((Path(args.checkpoint) / "config.json").read_text(encoding="utf-8"))
    data_cfg = checkpoint_data_config(args.checkpoint, config, [o.removeprefix("data.") for o in args.data_overrides])
    split = load_data(data_cfg, (args.split,), vocab=vocab).splits[args.split]
    scores = retrieval_scores(model, split, limit=args.max_images)
    images = len(split) if args.max_images <= 0 else min(args.max_images, len(split))
    print(f"{args.split}: {images} images")
    for direction, name in (("t2i", "caption -> image"), ("i2t", "image -> caption")):
        recalls = "  ".join(f"R@{k} {scores[f'{direction}_R@{k}']:5.1f}" for k in (1, 5, 10))
        print(f"{name:17s} {recalls}  median rank {scores[f'{direction}_MedR']:.0f}  MRR {scores[f'{direction}_MRR']:.3f}")
    return 0


def run_index(args: argparse.Namespace) -> int:
    from rlcap.data.loader import DataConfig
    from rlcap.files import check_writable
    from rlcap.rewards.image_bank import build_image_bank

    check_writable(args.out)  # before the images are embedded
    bank = build_image_bank(args.retriever, DataConfig(dataset=args.dataset, features=args.features), args.images,
                            args.neighbours, device=str(resolve_device(args.device, "--device")))
    bank.save(args.out)
    print(f"wrote {args.out}: {len(bank.ids)} images, {bank.embeddings.size(1)}-d, "
          f"{bank.neighbours.size(1)} neighbours each ({bank.kind})")
    return 0
