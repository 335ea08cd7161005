"""Whether each encoder of `rlcap features` writes the same rows whatever the batch size, on the CPU.

    python benchmarks/bench_feature_batching.py [--images 8] [--batch-sizes 1,2,4,8] [--out docs/BENCHMARKS.md]

Each encoder of `make bench-features` (EfficientNet-Lite0 with its weights; the transformers encoders in their
published configs with random weights) and the towers of the three captioner families at base size (`rlcap
hf-captioner --size base`) encodes the same generated JPEGs once per batch size, end to end through
`rlcap.encoders.extract.extract_features`; each store's float16 rows are compared with the first batch size's.
What is counted: the values that differ, and by how many float16 steps at most. Correctness, not speed: the
figures do not depend on the machine's load, but on its kernels and its torch thread count (printed).

Writes its section of docs/BENCHMARKS.md between the bench-feature-batching markers and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
from bench_features import _encoders, write_jpegs
from benchdoc import DOC, machine, replace_section

from rlcap.encoders.extract import extract_features
from rlcap.models.hf.build_captioner import CAPTIONER_FAMILIES, build_captioner

CAPTIONS = ["a red circle on a blue square", "two green triangles", "a small yellow star beside a circle"]


def _rows(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        order = np.argsort(f["ids"].asstr()[()])
        return {key: f[key][:][order] for key in ("fc", "att")}


def _steps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance between two float16 arrays in float16 steps (units in the last place)."""
    ia, ib = (x.astype(np.float16).view(np.int16).astype(np.int64) for x in (a, b))
    # float16's bit patterns ordered as numbers (negative values count down from zero)
    ia, ib = (np.where(x < 0, -(x & 0x7FFF), x) for x in (ia, ib))
    return int(np.abs(ia - ib).max()) if ia.size else 0


def compare(encoder: str, images: dict[str, Path], folder: Path, sizes: list[int]) -> dict[str, object]:
    """Encode ``images`` once per batch size; each store against the first size's."""
    stores = {}
    for size in sizes:
        out = folder / f"b{size}.h5"
        out.unlink(missing_ok=True)
        extract_features(images, out, encoder=encoder, batch_size=size, num_workers=0)
        stores[size] = _rows(out)
    first = stores[sizes[0]]
    row: dict[str, object] = {"values": int(sum(first[k].size for k in first))}
    for size in sizes[1:]:
        diff = sum(int((stores[size][k] != first[k]).sum()) for k in first)
        steps = max(_steps(stores[size][k], first[k]) for k in first)
        most = max(float(np.abs(stores[size][k].astype(np.float32) - first[k].astype(np.float32)).max()) for k in first)
        row[f"batch {size}"] = f"{diff} ({steps} step{'s' * (steps != 1)}, {most:.2g})" if diff else "0"
    return row


def table(rows: dict[str, dict], sizes: list[int]) -> str:
    head = " | ".join(f"batch {s} vs {sizes[0]}" for s in sizes[1:])
    lines = [f"| encoder | float16 values | {head} |", "|---|---:|" + "---:|" * (len(sizes) - 1)]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['values']} | " + " | ".join(str(row[f'batch {s}']) for s in sizes[1:]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import transformers

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=8, help="JPEGs each encoder encodes per batch size (default 8)")
    p.add_argument("--batch-sizes", default="1,2,4,8", help="batch sizes compared with the first (default 1,2,4,8)")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        images = write_jpegs(folder / "jpegs", args.images)
        encoders: dict[str, str] = {}
        for k, (name, spec) in enumerate(_encoders(transformers).items()):
            if spec is None:
                encoders[name] = "efficientnet-lite0"
                continue
            model, processor = spec
            model.save_pretrained(folder / f"model{k}")
            processor.save_pretrained(folder / f"model{k}")
            encoders[name] = f"hf:{folder / f'model{k}'}"
        for family in CAPTIONER_FAMILIES:
            where = build_captioner(family, folder / family, CAPTIONS, size="base", tokenizer="word")
            encoders[f"{family} captioner's tower (base)"] = f"hf:{where}"
        for name, encoder in encoders.items():
            rows[name] = compare(encoder, images, folder, sizes)
            print(name, rows[name], flush=True)
    threads = torch.get_num_threads()
    replace_section("bench-feature-batching", f"""## Feature rows across batch sizes on the CPU (`make bench-feature-batching`)

`python benchmarks/bench_feature_batching.py --images {args.images} --batch-sizes {args.batch_sizes}` on
{machine(torch=torch.__version__, transformers=transformers.__version__)}, {threads} torch threads.

{args.images} generated 640x480 JPEGs encoded by `rlcap features` once per batch size; each cell counts the float16
values (pooled and region rows together) that differ from the batch-size-{sizes[0]} store's, with the largest
difference in float16 steps and as a number. The transformers encoders have random weights in their published configs; the
captioners' towers are those of `rlcap hf-captioner --size base` (ViT-B/16 at 224 px), whose every output token is
a region.

{table(rows, sizes)}
""", args.out)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
