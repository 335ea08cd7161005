"""The CUDA path of training, checked where CUDA is present: XE and then SCST on a small shapes set,
once with device=cpu and once with device=cuda from the same seed, their per-step losses compared,
and the CUDA run's speed. Written to the gpu-check section of docs/BENCHMARKS.md.

    python benchmarks/gpu_check.py [--steps 20]

On a machine without CUDA (as the project's own) it says so and writes nothing: no GPU can be had
there, so this script is how the CUDA path is checked when one is lent.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchdoc import DOC, machine, replace_section

from rlcap import api
from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes
from rlcap.encoders.extract import extract_features
from rlcap.train.logger import read_log

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def train_losses(recipe: str, overrides: list[str], out: Path) -> tuple[list[float], float]:
    """The run's logged training losses and its wall-clock seconds."""
    start = time.perf_counter()
    api.train(api.load_run_config(str(CONFIGS / recipe), [*overrides, f"out_dir={out}"]))
    seconds = time.perf_counter() - start
    return [r["loss"] for r in read_log(out / "log.jsonl") if r["split"] == "train"], seconds


def compare(folder: Path, steps: int, devices: tuple[str, str] = ("cpu", "cuda")) -> dict:
    data = folder / "shapes"
    dataset = generate_shapes(ShapesConfig(n_train=400, n_val=50, n_test=50, image_size=64, workers=1), data)
    feats = data / "feats_64.h5"
    records = json.loads(dataset.read_text())["images"]
    extract_features({str(r["imgid"]): data / r["filepath"] / r["filename"] for r in records}, feats, image_size=64)
    common = [f"data.dataset={dataset}", f"data.features={feats}", f"max_steps={steps}", "log_every=1",
              "val.max_images=50", "data.min_count=1", "tensorboard=false"]
    rows = []
    for k, device in enumerate(devices):
        xe = folder / f"{k}_{device}" / "xe"
        row = {"xe": train_losses("shapes_xe.yaml", [*common, f"device={device}"], xe)}
        row["scst"] = train_losses("shapes_scst.yaml", [*common, f"device={device}", f"init_from={xe}/last"],
                                   folder / f"{k}_{device}" / "scst")
        rows.append(row)
    return {"devices": list(devices), "runs": rows}


def largest_difference(a: list[float], b: list[float]) -> float:
    """The largest relative difference between two runs' losses, step by step."""
    return max((abs(x - y) / max(abs(x), 1e-8) for x, y in zip(a, b)), default=math.nan)


def markdown(result: dict, steps: int) -> str:
    first, second = result["devices"]
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    lines = [f"## GPU check: training on {second} against {first}", "",
             f"Command: `python benchmarks/gpu_check.py --steps {steps}`. Machine: {machine(torch=torch.__version__)}"
             f"{gpu}.", "",
             f"| stage | steps | largest relative loss difference | {first} s | {second} s |", "|---|---|---|---|---|"]
    for stage in ("xe", "scst"):
        a, b = result["runs"][0][stage], result["runs"][1][stage]
        lines.append(f"| {stage} | {len(b[0])} | {largest_difference(a[0], b[0]):.2e} | {a[1]:.1f} | {b[1]:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps of each run (default 20)")
    p.add_argument("--devices", default="cpu,cuda", help="the two devices compared (default cpu,cuda)")
    p.add_argument("--out", type=Path, default=DOC, help="markdown file whose gpu-check section is replaced")
    args = p.parse_args(argv)
    devices = tuple(args.devices.split(","))
    if len(devices) != 2:
        p.error("--devices: give two devices, e.g. cpu,cuda")
    if any(d.startswith("cuda") for d in devices) and not torch.cuda.is_available():
        print(f"CUDA is not available to this torch ({torch.__version__}): nothing run, nothing written")
        return 0
    with tempfile.TemporaryDirectory() as folder:
        result = compare(Path(folder), args.steps, devices)
    body = markdown(result, args.steps)
    replace_section("gpu-check", body, args.out)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
