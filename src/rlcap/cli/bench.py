"""``rlcap bench --benchmark shapes --methods xe,scst,sll_me,sll_sle --out DIR``."""

from __future__ import annotations

import argparse

from rlcap.cli.options import IMAGE_SIZE, add_data_folder_arguments, int_range, set_threads, threads_option
from rlcap.cli.tables import print_scores
from rlcap.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from rlcap.bench.registry import BENCH_ROWS, BENCHMARKS, VIDEO_ROWS

    p = sub.add_parser("bench", help="train methods (shared stages once) and tabulate them")
    p.add_argument("--benchmark", default="shapes", help=f"benchmark: {', '.join(sorted(BENCHMARKS))}")
    p.add_argument("--methods", default="xe,scst,sll_me,sll_sle",
                   help=f"comma-separated methods: {', '.join(sorted(BENCH_ROWS))}; on moving-shapes also "
                        f"{', '.join(name for name, _ in VIDEO_ROWS)} (scst there is [Wang18]'s RL-baseline)")
    p.add_argument("--out", required=True, help="output folder: results.json, results.md, curves.png")
    add_data_folder_arguments(p, None, "benchmark data folder (default data/BENCHMARK; generated when missing)",
                              "folder of the method recipes")
    p.add_argument("--rl", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for every stage that is not XE (the methods' budget)")
    p.add_argument("--xe", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for the XE stages")
    p.add_argument("--max-train-images", type=int_range(0), default=0,
                   help="a budget: every stage trains on the first N training images (0: all)")
    p.add_argument("--image-size", type=IMAGE_SIZE, default=128,
                   help="encoder input size for the benchmark's features (default 128: 4x4 grid; 224: 7x7)")
    p.add_argument("--clip", default=None, metavar="DIR",
                   help="also CLIP-S and RefCLIP-S ([Hessel21], docs/METRICS.md) of each method's beam captions, "
                        "with the CLIP of this local transformers folder")
    p.add_argument("--threads", type=threads_option, default="auto",
                   help="torch CPU threads of this command's own work (the benchmark's features and the test "
                        "evaluations): a count, or auto (default, as a run's threads setting); each stage's run "
                        "reads its own threads setting (--xe/--rl threads=N)")
    p.add_argument("--resume", action="store_true",
                   help="continue each stage's run in --out with the settings a run may change (e.g. a larger "
                        "rl.epochs in --rl), as rlcap train's resume=true; without it a stage folder holding a run "
                        "of other settings is refused")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from rlcap.bench.methods import run_benchmark
    from rlcap.bench.registry import bench_rows

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise ConfigError(f"--methods {args.methods!r} names no method; give one or more of "
                          f"{', '.join(sorted(bench_rows(args.benchmark)))}")
    set_threads(args.threads)
    results = run_benchmark(args.benchmark, methods, args.out, args.data, args.configs, args.rl, args.xe, report=print,
                            image_size=args.image_size, max_train_images=args.max_train_images,
                            regenerate=args.regenerate, clip=args.clip, resume=args.resume)
    for how in ("beam", "rs", "bs"):
        print(f"\n{how}:")
        print_scores({m: r[how] for m, r in results["methods"].items()})
    print(f"\nwrote {args.out}/results.json, results.md and curves.png")
    return 0
