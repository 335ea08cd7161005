"""Sampling steps of a vision-language policy alone and beside another job on the same cores, at 2 threads and at
1 (issue 66 item 7: why steps grow on a shared machine, measured).

    python benchmarks/shared_cores_check.py [--steps 8] [--rounds 3] [--size small]

A `small` Qwen2-VL (`rlcap hf-captioner --family qwen2_vl --size small`, random weights) samples 4 pictures x 4
captions of at most 16 tokens without autograd, scores them in one pass and runs the backward pass: one RL step's
policy work. Each measurement is a new process (`--threads N`), first alone, then ``--rounds`` times at 2 threads
and at 1 beside a process whose 2 threads multiply 512 x 512 matrices without pause (another 2-thread job). It
prints each process's step times as JSON lines and writes nothing. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUSY = """import torch, time, sys
torch.set_num_threads(2)
a = torch.randn(512, 512)
while True:
    a = (a @ a).tanh()
"""


def steps(folder: Path, threads: int, count: int) -> list[float]:
    """The seconds of ``count`` steps in a new process of ``threads`` torch threads."""
    import numpy as np
    import torch
    from PIL import Image

    from rlcap.data.feats import Feats
    from rlcap.decoding import Decoding, sample
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    pictures = [Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)) for _ in range(4)]
    encoder = load_vlm_encoder(folder)
    fc, att, counts = encoder.features_with_counts(torch.from_numpy(encoder.prepare(pictures)))
    feats = Feats(fc, att, torch.arange(att.shape[1])[None] < counts[:, None])
    policy = HFVLMCaptioner(folder).train()
    times = []
    for k in range(count):
        start = time.perf_counter()
        out = sample(policy, feats, 4, Decoding("sample", 16), generator=torch.Generator().manual_seed(k))
        out.logprobs.sum().backward()
        times.append(round(time.perf_counter() - start, 3))
    return times


def measure(folder: Path, threads: int, count: int, beside: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), "--threads", str(threads),
                          "--steps", str(count)], capture_output=True, text=True, check=True)
    return {"threads": threads, "beside": beside, "seconds a step": json.loads(out.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", default="small")
    p.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(steps(Path(args.child), args.threads, args.steps)))
        return 0
    from rlcap.models.hf.build_vlm import build_vlm

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_vlm("qwen2_vl", Path(tmp) / "qwen2_vl", ["a red circle", "a big blue square"] * 8,
                           size=args.size)
        for threads in (2, 1):
            print(json.dumps(measure(folder, threads, args.steps, "nothing")), flush=True)
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(2)
            for _ in range(args.rounds):
                for threads in (2, 1):
                    print(json.dumps(measure(folder, threads, args.steps, "a 2-thread job")), flush=True)
        finally:
            busy.kill()
            busy.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
