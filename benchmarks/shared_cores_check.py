"""Sampling steps of a vision-language policy alone and beside another job on the same cores, at 2 threads and at
1 (issue 66 item 7: why steps grow on a shared machine, measured).

    python benchmarks/shared_cores_check.py [--steps 8] [--rounds 3] [--size small] [--threads 2,1]
    python benchmarks/shared_cores_check.py --shape smolvlm-256m --threads auto,2 --rounds 1

A `small` Qwen2-VL (`rlcap hf-captioner --family qwen2_vl --size small`, random weights), or with ``--shape
smolvlm-256m`` a SmolVLM at HuggingFaceTB/SmolVLM-256M-Instruct's published widths (SmolLM2-135M's language model,
SigLIP base-patch16-512's tower, the pixel shuffle of 4: 64 image tokens for one 512-px tile; random weights,
build_vlm's tokenizer padded to the published vocabulary), samples 4 pictures x 4 captions of at most 16 tokens
without autograd, scores them in one pass and runs the backward pass: one RL step's policy work. Each measurement
is a new process, at each of ``--threads`` (a number, or ``auto``: rlcap's ``threads: auto``, which the process
resolves as a run does, the count it took printed with its steps), first alone, then ``--rounds`` times beside a
process whose 2 threads multiply 512 x 512 matrices without pause (another 2-thread job). It prints each
process's step times as JSON lines and writes nothing. Run it alone on the machine.
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


def steps(folder: Path, threads: str, count: int) -> dict:
    """The seconds of ``count`` steps in a new process of ``threads`` torch threads (``auto``: as a run resolves
    it), and the count it ran at."""
    import numpy as np
    import torch
    from PIL import Image

    from rlcap.data.feats import Feats
    from rlcap.decoding import Decoding, sample
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner

    from rlcap.devices import cpu_threads

    chosen = cpu_threads(threads if threads == "auto" else int(threads))
    torch.set_num_threads(chosen)
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
    return {"threads": chosen, "seconds a step": times}


def measure(folder: Path, threads: str, count: int, beside: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), "--threads", threads,
                          "--steps", str(count)], capture_output=True, text=True, check=True)
    ran = json.loads(out.stdout.strip().splitlines()[-1])
    return {"threads": threads, "ran at": ran["threads"], "beside": beside, "seconds a step": ran["seconds a step"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", default="small", help="build_vlm's size of the Qwen2-VL")
    p.add_argument("--shape", choices=("qwen2_vl", "smolvlm-256m"), default="qwen2_vl")
    p.add_argument("--threads", default="2,1", help="thread counts measured, comma-separated (a number or auto)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(steps(Path(args.child), args.threads, args.steps)))
        return 0
    from rlcap.models.hf.build_vlm import build_vlm

    captions = ["a red circle", "a big blue square"] * 8
    counts = args.threads.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        if args.shape == "smolvlm-256m":
            from smolvlm_shapes import build_smolvlm

            folder = Path(tmp) / "smolvlm"
            print(json.dumps({"shape": args.shape, "parameters": build_smolvlm(folder, captions, args.shape)}),
                  flush=True)
        else:
            folder = build_vlm("qwen2_vl", Path(tmp) / "qwen2_vl", captions, size=args.size)
        for threads in counts:
            print(json.dumps(measure(folder, threads, args.steps, "nothing")), flush=True)
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(2)
            for _ in range(args.rounds):
                for threads in counts:
                    print(json.dumps(measure(folder, threads, args.steps, "a 2-thread job")), flush=True)
        finally:
            busy.kill()
            busy.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
