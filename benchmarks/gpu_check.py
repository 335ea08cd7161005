"""The CUDA path checked against the CPU where CUDA is present, on what is deterministic across devices.

For FC, UpDown and the Transformer (small models taught a generated set by a short XE run), the same
weights on the CPU and on CUDA, fp32 with TF32 off: teacher-forced log-probabilities and the XE loss,
the SCST loss and its gradients on fixed captions and advantages, greedy and beam decodes (tokens
equal), the device CIDEr-D reward against the CPU's on the same tokens, and the mean reward of 1,000
samples on each device within a 99.9% bound. The checks and their bounds: benchmarks/gpu_checks.py.
Writes the gpu-check section of docs/BENCHMARKS.md, and exits with status 1 when a comparison fails.

    python benchmarks/gpu_check.py [--archs fc,updown,transformer]

About a minute on one H100. On a machine without CUDA it says so in one line and writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from benchdoc import DOC, machine, replace_section

from gpu_checks import ARCHS, BEAM, TOLERANCES, CheckSizes, Comparison, failures, run_checks


def describe(sizes: CheckSizes) -> str:
    """What ran and the bounds, from the sizes and :data:`TOLERANCES` the run used."""
    t = TOLERANCES
    return (f"Each model (hidden {sizes.hidden}) is taught {sizes.images} generated images by {sizes.xe_steps} "
            "full-batch XE steps, then the same weights run on both devices in fp32 with TF32 off. Bounds: "
            f"log-probabilities (teacher-forced and decoded) within {t['logprob']:g} absolute; the XE loss within "
            f"{t['loss']:g} relative, the SCST loss within {t['loss']:g} of its terms' mean size |A log p|; each "
            f"parameter's SCST gradient within {t['grad']:g} of its largest entry; greedy and beam ({BEAM}) tokens "
            f"equal; the device CIDEr-D within {t['reward']:g} of the CPU's; the two devices' mean CIDEr-D of "
            f"{sizes.samples} samples (dropout on, each device's own random stream) within the "
            f"{t['confidence']:.1%} bound of their difference, from the samples' standard deviations.")


def cell(r: Comparison) -> tuple[str, str]:
    if r.value != r.value:  # NaN: nothing was compared
        return "-", "not compared"
    return f"{r.value:.2e}", "pass" if r.passed else "**FAIL**"


def markdown(rows: list[Comparison], devices: tuple[str, str], sizes: CheckSizes, command: str) -> str:
    first, second = devices
    gpu = f", GPU {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})" if torch.cuda.is_available() else ""
    compared = [r for r in rows if r.value == r.value]  # (NaN: not compared)
    passed = sum(r.passed for r in compared)
    skipped = f"; {len(rows) - len(compared)} not compared" if len(compared) < len(rows) else ""
    lines = [f"## GPU check: {second} against {first}", "",
             f"Command: `{command}`. Machine: {machine(torch=torch.__version__)}{gpu}.", "", describe(sizes), "",
             f"{passed} of {len(compared)} comparisons passed{skipped}.", "",
             "| model | compared | difference | bound | result | where |", "|---|---|---:|---:|---|---|"]
    for r in rows:
        value, result = cell(r)
        lines.append(f"| {r.arch} | {r.check} | {value} | {r.bound:.2e} | {result} | {r.detail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archs", default=",".join(ARCHS), help=f"models checked (default {','.join(ARCHS)})")
    p.add_argument("--devices", default="cpu,cuda",
                   help="the reference device and the one checked (default cpu,cuda)")
    defaults = CheckSizes()
    p.add_argument("--images", type=int, default=defaults.images, help="generated images (default %(default)s)")
    p.add_argument("--hidden", type=int, default=defaults.hidden, help="model size (default %(default)s)")
    p.add_argument("--xe-steps", type=int, default=defaults.xe_steps, help="XE steps (default %(default)s)")
    p.add_argument("--samples", type=int, default=defaults.samples,
                   help="sampled captions a device, a multiple of --images (default %(default)s)")
    p.add_argument("--out", type=Path, default=DOC, help="markdown file whose gpu-check section is replaced")
    args = p.parse_args(argv)
    devices = tuple(args.devices.split(","))
    if len(devices) != 2:
        p.error("--devices: give two devices, e.g. cpu,cuda")
    if any(d.startswith("cuda") for d in devices) and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA device for this torch ({torch.__version__}): nothing run, nothing written")
        return 0
    archs = args.archs.split(",")
    if unknown := sorted(set(archs) - set(ARCHS)):
        p.error(f"--archs: {', '.join(unknown)} not among {', '.join(ARCHS)}")
    if args.samples % args.images:
        p.error(f"--samples {args.samples} is not a multiple of --images {args.images}")
    sizes = CheckSizes(images=args.images, hidden=args.hidden, xe_steps=args.xe_steps, samples=args.samples)
    rows = [r for arch in archs for r in run_checks(arch, sizes, devices)]
    command = "python benchmarks/gpu_check.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items()
        if k not in ("out",) and v != p.get_default(k))
    body = markdown(rows, devices, sizes, command)
    replace_section("gpu-check", body, args.out)
    print(body)
    for line in failures(rows):
        print(f"gpu_check: FAILED {line}", file=sys.stderr)
    return 1 if failures(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
