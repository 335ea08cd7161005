"""What an XE step costs at data.max_len 16, at the longest caption's length and at 60: each batch is padded to
its longest caption, so data.max_len beyond the longest caption costs nothing (goal: 60 within 10% of it).

    python benchmarks/bench_xe_width.py [--images 400] [--steps 7] [--threads 1] [--out docs/BENCHMARKS.md]

The captions are the shapes generator's (`rlcap data shapes`, 32-px pictures: the captions do not depend on the
size); the features are random rows of the shape of shapes' 128-px EfficientNet-Lite0 store (a 4x4 grid of
1280-d cells), as a step's cost does not depend on their values. The step is `configs/shapes_xe.yaml`'s: UpDown
at its sizes, 50 images x 5 captions, teacher-forced logits, the masked cross-entropy, its backward pass and an
Adam step, in training mode (dropout 0.3), on the batches `SplitData.batches` builds. For comparison, the same
step on those batches padded back to data.max_len + 2 columns, as every batch was before. The fastest of
``--steps`` steps after one warm-up step (the fastest: other jobs on a shared machine only add time), in
one torch thread by default; the configurations take their steps in turn, batch by batch.

Writes its section of docs/BENCHMARKS.md between the bench-xe-width markers and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchdoc import DOC, load_note, machine, replace_section

from rlcap.data.features import HDF5FeatureWriter
from rlcap.data.loader import load_data
from rlcap.data.synthetic.shapes import DATASET_FILE, ShapesConfig, generate_shapes
from rlcap.data.vocab import PAD
from rlcap.methods import load_run_config
from rlcap.models import build_model
from rlcap.rl.losses import xe_loss

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "shapes_xe.yaml"
GRID, DIM = 16, 1280  # shapes' 128-px store: a 4x4 grid of EfficientNet-Lite0 cells


def shapes_data(folder: Path, images: int) -> tuple[Path, Path]:
    """The shapes generator's captions for ``images`` training images and a store of random features."""
    generate_shapes(ShapesConfig(n_train=images, n_val=0, n_test=0, image_size=32, workers=1), folder)
    dataset = folder / DATASET_FILE
    ids = [str(r["imgid"]) for r in json.loads(dataset.read_text())["images"]]
    rng = np.random.default_rng(0)
    att = rng.normal(size=(len(ids), GRID, DIM)).astype(np.float32)
    feats = folder / "feats.h5"
    with HDF5FeatureWriter(feats, DIM, DIM, GRID) as writer:
        writer.write(ids, att.mean(1), att)
    return dataset, feats


class Variant:
    """One configuration timed: a model trained at ``max_len`` on its batches, padded to ``width`` when given."""

    def __init__(self, dataset: Path, feats: Path, max_len: int, padded: bool):
        cfg = load_run_config(str(RECIPE), [f"data.dataset={dataset}", f"data.features={feats}",
                                            f"data.max_len={max_len}"])
        train = load_data(cfg.data, ("train",)).splits["train"]
        self.max_len, self.padded, self.per_image = max_len, padded, cfg.data.seq_per_img
        self.batches = list(train.batches(cfg.xe.batch_size, cfg.data.seq_per_img, seed=0, epoch=0))
        self.cut = int((train.caption_lengths > max_len).sum())
        self.captions, self.longest = len(train.caption_lengths), int(train.caption_lengths.max())
        torch.manual_seed(0)
        self.model = build_model(cfg.model, len(train.vocab), train.fc_dim, train.att_dim).train()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.optim.lr)
        self.times: list[float] = []

    def tokens(self, k: int) -> torch.Tensor:
        tokens = self.batches[k].tokens
        return torch.nn.functional.pad(tokens, (0, self.max_len + 2 - tokens.shape[1]), value=PAD) \
            if self.padded else tokens

    def step(self, k: int) -> None:
        """Batch ``k``'s XE step (teacher-forced logits, masked cross-entropy, backward, Adam), timed."""
        tokens, feats = self.tokens(k), self.batches[k].feats
        start = time.perf_counter()
        logits = self.model(feats, tokens[:, :-1], seq_per_img=self.per_image)  # (B*S, T+1, V)
        loss = xe_loss(logits, tokens[:, 1:], tokens[:, 1:] != PAD)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.times.append(time.perf_counter() - start)

    @property
    def fastest(self) -> float:
        """The fastest step after the warm-up: other jobs on a shared machine only ever add time to a step."""
        return min(self.times[1:])

    @property
    def widest(self) -> int:
        return max(self.tokens(k).shape[1] for k in range(len(self.batches)))


def measure(dataset: Path, feats: Path, steps: int) -> dict[str, Variant]:
    """Every variant's steps in turn, batch by batch, so that a change in the machine's load reaches them all."""
    longest = Variant(dataset, feats, 60, False).longest
    variants = {f"{n}{' padded' * padded}": Variant(dataset, feats, n, padded)
                for n, padded in ((16, False), (longest, False), (60, False), (16, True), (60, True))}
    for k in range(steps + 1):
        for variant in variants.values():
            variant.step(k)
    return variants


def section(variants: dict[str, Variant], images: int, steps: int, load: tuple[float, float]) -> str:
    short, whole, long = (variants[k] for k in variants if "padded" not in k)
    none_cut = long.fastest / whole.fastest
    vs_16, before = long.fastest / short.fastest, variants["60 padded"].fastest / variants["16 padded"].fastest
    threads = torch.get_num_threads()
    rows = [f"| {v.max_len} | {v.cut} of {v.captions} | {'data.max_len + 2' if v.padded else 'its longest caption'} "
            f"| {v.widest} | {v.fastest * 1000:.0f} ms |" for v in variants.values()]
    return "\n".join([
        "## An XE step at data.max_len 16 and 60 (batches padded to their longest caption)", "",
        f"Command: `make bench-xe-width` (`python benchmarks/bench_xe_width.py --images {images} --steps {steps} --threads {torch.get_num_threads()}`). "
        f"Machine: {machine(torch=torch.__version__)}, {threads} torch thread{'s' * (threads != 1)}. {load_note(load)}",
        "",
        f"UpDown at `configs/shapes_xe.yaml`'s sizes, 50 images x 5 captions a step, the shapes generator's captions "
        f"(the longest {long.longest} words) on random features of shapes' store shape; the fastest of {steps} steps "
        "(forward, loss, backward, Adam), the configurations timed in turn on the same batches. \"before\": the same "
        "batches padded to data.max_len + 2 columns, as every batch was until batches were cut to their longest caption.",
        "",
        "| data.max_len | captions cut | batch padded to | widest batch (columns) | step |",
        "|---:|---:|---|---:|---:|",
        *rows, "",
        f"- data.max_len 60 against {whole.max_len} (the longest caption: neither cuts any): **{none_cut:.2f}x** the step "
        f"time (goal: at most 1.10x: {'met' if none_cut <= 1.10 else 'not met'}).",
        f"- data.max_len 60 against 16: **{vs_16:.2f}x**; 16 cuts {short.cut} captions, so its batches are at most "
        f"{short.widest} columns wide against {long.widest}: the words 16 cuts are trained at 60. Padded to "
        f"data.max_len + 2 as before: {before:.2f}x.",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=400, help="training images (default 400: 8 batches of 50)")
    p.add_argument("--steps", type=int, default=7, help="timed steps after the warm-up (default 7)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    args = p.parse_args(argv)
    if args.images < 50 * (args.steps + 1):
        p.error(f"--images: {args.steps + 1} batches of 50 need at least {50 * (args.steps + 1)} images")
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        variants = measure(*shapes_data(Path(tmp), args.images), args.steps)
    body = section(variants, args.images, args.steps, (load, os.getloadavg()[0]))
    replace_section("bench-xe-width", body, args.out)
    print(body)
    print(json.dumps({name: {"step_ms": round(v.fastest * 1000, 1), "widest": v.widest, "cut": v.cut}
                      for name, v in variants.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
