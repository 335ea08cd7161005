"""FLOPs of one SCST step on COCO-size inputs, counted by torch's FlopCounterMode, for docs/SCALING.md.

One step as the SCST recipes run it: 50 images, 5 captions sampled per image with gradients (16 words at most),
the REINFORCE loss and its backward pass; with ``--greedy`` also the greedy baseline's decode. Inputs are COCO's
usual sizes: bottom-up features (36 regions x 2048-d, the pooled 2048-d vector) and a 9,487-word vocabulary
(Karpathy's split, words seen 5 times or more). Only the matrix products, convolutions and attention are
counted (what FlopCounterMode counts); the element-wise work and the CPU reward are not. Every sampled caption is
forced to the full 16 words (no early end token), the upper bound of a step.

Run with ``python benchmarks/scst_flops.py``: prints a Markdown table (GFLOP per step and per COCO epoch).
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchdoc import REPO

sys.path.insert(0, str(REPO))

COCO_TRAIN_IMAGES = 113_287  # Karpathy's train split with restval
VOCAB = 9_487


def step_flops(arch: str, batch: int, samples: int, max_len: int, greedy: bool) -> int:
    from rlcap.data.feats import Feats
    from rlcap.data.vocab import BOS
    from rlcap.decoding import Decoding, continue_decoding
    from rlcap.models.base import expand_memory
    from rlcap.decoding.sampling import sample
    from rlcap.models import build_model
    from rlcap.models.model_config import ModelConfig
    from rlcap.rl.losses import reinforce_loss

    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch), VOCAB, 2048, 2048)
    model.train()
    feats = Feats(torch.randn(batch, 2048), torch.randn(batch, 36, 2048), torch.ones(batch, 36, dtype=torch.bool))
    # no early end: the end token's logit pushed down, so every caption has max_len words (the step's upper bound)
    head = next(m for m in reversed(list(model.modules())) if isinstance(m, torch.nn.Linear) and m.out_features == VOCAB)
    with torch.no_grad():
        head.bias[2] = -1e4 if head.bias is not None else 0.0
    with FlopCounterMode(display=False) as counter:
        out = sample(model, feats, samples, Decoding("sample", max_len))
        loss = reinforce_loss(out.logprobs, out.mask.float(), torch.randn(batch * samples))
        loss.backward()
        if greedy:
            # the greedy decode, without inference mode (FlopCounterMode's module hooks fail on inference tensors)
            with torch.no_grad():
                model.eval()
                memory = expand_memory(model, model.encode(feats), 1)
                word = torch.full((batch,), BOS, dtype=torch.long)
                continue_decoding(model, memory, model.init_state(memory), word, Decoding("greedy", max_len))
    return counter.get_total_flops()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=16)
    parser.add_argument("--greedy", action="store_true", help="also count the greedy baseline's decode")
    args = parser.parse_args(argv)
    steps = -(-COCO_TRAIN_IMAGES // args.batch)
    print(f"| model | GFLOP per SCST step ({args.batch} images x {args.samples} samples, {args.max_len} words"
          f"{', greedy baseline' if args.greedy else ''}) | TFLOP per COCO epoch ({steps:,} steps) |")
    print("|---|---:|---:|")
    for arch in ("fc", "updown", "transformer"):
        flops = step_flops(arch, args.batch, args.samples, args.max_len, args.greedy)
        print(f"| {arch} | {flops / 1e9:,.1f} | {flops * steps / 1e12:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
