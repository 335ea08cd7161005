"""Feature extraction throughput of each encoder `rlcap features` offers, at its default input size.

    python benchmarks/bench_features.py [--images 64] [--parts cpu,gpu] [--out docs/BENCHMARKS.md]

End to end through `rlcap.encoders.extract.extract_features`: JPEG decoding on one loader thread, the encoder's
own preprocessing, the forward pass, writing float16 rows; the model's loading included, as a user's run has it.
EfficientNet-Lite0 carries its ImageNet weights; the transformers encoders are built from their published
base-size configs with random weights (what is timed is their arithmetic, the same with any weights) and a tiny
config of each, saved as a downloaded model's folder and read through `--encoder hf:DIR`. A GPU section follows
where CUDA is present (fp16 autocast, as `rlcap features --device cuda` runs); elsewhere it says it was not run.

Writes its CPU section of docs/BENCHMARKS.md between the bench-features markers and its GPU section between
the bench-features-gpu markers (each only when that part ran), and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from benchdoc import DOC, load_note, machine, replace_section
from PIL import Image

from rlcap.encoders.extract import extract_features

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def _encoders(transformers) -> dict[str, tuple[object, object] | None]:
    """name -> (model, image processor) to save, or None for EfficientNet-Lite0 (shipped with rlcap)."""
    t = transformers
    clip = t.CLIPImageProcessor()  # 224 px: shortest edge 224, centre crop 224
    vit = t.ViTImageProcessor(size={"height": 224, "width": 224})
    return {
        "efficientnet-lite0": None,
        "CLIP ViT-B/32 vision + projection (base)": (t.CLIPVisionModelWithProjection(t.CLIPVisionConfig(
            hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, image_size=224,
            patch_size=32, projection_dim=512)), clip),
        "CLIP vision + projection (tiny)": (t.CLIPVisionModelWithProjection(t.CLIPVisionConfig(
            **TINY, image_size=224, patch_size=32, projection_dim=64)), clip),
        "ViT-B/16 (base)": (t.ViTModel(t.ViTConfig(image_size=224, patch_size=16)), vit),
        "ViT/16 (tiny)": (t.ViTModel(t.ViTConfig(**TINY, image_size=224, patch_size=16)), vit),
        "DINOv2-S/14 (small)": (t.Dinov2Model(t.Dinov2Config(hidden_size=384, num_hidden_layers=12,
                                                             num_attention_heads=6, image_size=224, patch_size=14)),
                                t.BitImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224,
                                                                                           "width": 224})),
        "ConvNeXt-T (published config)": (t.ConvNextModel(t.ConvNextConfig(
            hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3])), t.ConvNextImageProcessor(
                size={"shortest_edge": 224}, crop_pct=1.0)),
    }


def write_jpegs(folder: Path, n: int) -> dict[str, Path]:
    """n 640x480 JPEGs of smooth random colour fields (what a photo costs to decode)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images = {}
    for k in range(n):
        small = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)
        path = folder / f"{k}.jpg"
        Image.fromarray(small).resize((640, 480), Image.Resampling.BICUBIC).save(path, quality=90)
        images[str(k)] = path
    return images


def measure(k: int, name: str, spec, images: dict[str, Path], folder: Path, device: str) -> dict[str, float | int | str]:
    if spec is None:
        encoder = "efficientnet-lite0"
    else:
        model, processor = spec
        where = folder / f"model{k}"
        if not (where / "config.json").exists():
            model.save_pretrained(where)
            processor.save_pretrained(where)
        encoder = f"hf:{where}"
    out = folder / f"{device}_{k}.h5"
    out.unlink(missing_ok=True)
    stats = extract_features(images, out, encoder=encoder, batch_size=32, num_workers=1, device=device)
    import h5py

    with h5py.File(out, "r") as f:
        shape = f["att"].shape[1:], f["fc"].shape[1]
    return {"images": stats.encoded, "seconds": round(stats.seconds, 2), "images_per_s": round(stats.images_per_second, 1),
            "att": f"{shape[0][0]} x {shape[0][1]}", "fc": int(shape[1])}


def table(rows: dict[str, dict]) -> str:
    lines = ["| encoder | att (regions x width) | fc | images | seconds | images/s |", "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {n} | {r['att']} | {r['fc']} | {r['images']} | {r['seconds']} | {r['images_per_s']} |"
              for n, r in rows.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import os

    import transformers

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=64, help="JPEGs encoded by each encoder on the CPU (default 64)")
    p.add_argument("--gpu-images", type=int, default=1000, help="JPEGs encoded by each encoder on CUDA (default 1000)")
    p.add_argument("--parts", default="cpu,gpu", help="cpu, gpu or both (default; gpu only where CUDA is present)")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    args = p.parse_args(argv)
    parts = {x.strip() for x in args.parts.split(",")}
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    load = [os.getloadavg()[0]]
    specs = _encoders(transformers)
    results: dict[str, dict] = {}
    gpu = "gpu" in parts and torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        images = write_jpegs(folder / "jpegs", max(args.images if "cpu" in parts else 0, args.gpu_images if gpu else 0))
        if "cpu" in parts:
            cpu_images = dict(list(images.items())[: args.images])
            results["cpu"] = {name: measure(k, name, spec, cpu_images, folder, "cpu")
                              for k, (name, spec) in enumerate(specs.items())}
        if gpu:
            gpu_images = dict(list(images.items())[: args.gpu_images])
            results["cuda"] = {name: measure(k, name, spec, gpu_images, folder, "cuda")
                               for k, (name, spec) in enumerate(specs.items())}
    load.append(os.getloadavg()[0])
    versions = machine(torch=torch.__version__, transformers=transformers.__version__)
    if "cpu" in results:
        replace_section("bench-features", f"""## Feature extraction: images/s of each encoder (`make bench-features`)

`python benchmarks/bench_features.py --images {args.images}` on {versions}.
{load_note((load[0], load[1]))}

{args.images} generated 640x480 JPEGs per encoder, end to end through `rlcap features` (decoding on one loader
thread, the encoder's own preprocessing at its default size, 224 px for all of these; the forward pass in batches
of 32; float16 rows written; the model's loading included). The transformers encoders have random weights in their
published configs, which cost what the trained ones cost; `tiny` rows are 2-layer, 64-wide versions of the same
families, where decoding and preprocessing dominate.

### CPU

{table(results['cpu'])}
""", args.out)
    if "gpu" in parts:
        body = (f"""### GPU ({torch.cuda.get_device_name(0)}, fp16 autocast)

`python benchmarks/bench_features.py --parts gpu --gpu-images {args.gpu_images}` on {versions}, CUDA
{torch.version.cuda}: {args.gpu_images} JPEGs per encoder, as above, the forward pass on the GPU under fp16 autocast
(as `rlcap features --device cuda` runs it), decoding and preprocessing on one loader thread of the CPU.

{table(results['cuda'])}
""" if gpu else """### GPU

Not run: this machine has no CUDA device (`torch.cuda.is_available()` is false). The script fills this section
where one is present.""")
        replace_section("bench-features-gpu", body, args.out)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
