"""The report of a COCO-size bench folder: how long ``rlcap report`` takes and how large the page is.

Run with ``make bench-report``. The folder is built the way ``rlcap bench`` lays one out, with real caption
text: the 5,000 COCO val2014 images of ../shared/data/coco/human_agreement_5k.json as the test split, 7 methods
whose captions are human captions of each image (method k writes one annotator's caption, a different one per
method, so the captions differ as methods' do), each caption's CIDEr-D against the image's other references
(rlcap's CIDEr-D; SPICE is left out of the per-caption scores to keep the set-up short), training logs the size of a
30-epoch COCO run logged every 20 steps (3,400 records a method), and one 640 x 480 JPEG per image (drawn shapes:
no COCO pictures can be had here). Then ``write_report`` is timed with the default gallery (a sample of 48 plus
each method's largest gains and losses) and with ``--all``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section

sys.path.insert(0, str(REPO))

METHODS = ["xe", "scst", "sll_me", "sll_sle", "ac", "pg_spider", "mixer"]
RECORDS = 3400  # a 30-epoch COCO run (113k images / 50 a batch = 2,266 steps an epoch) logged every 20 steps


def build_folder(folder: Path, shared: Path, images: int) -> Path:
    from PIL import Image, ImageDraw

    from rlcap.metrics import score_captions

    entries = json.loads((shared / "data" / "coco" / "human_agreement_5k.json").read_text())[:images]
    ids = [str(e["image_id"]) for e in entries]
    captions = {str(e["image_id"]): [e["candidate"], *e["references"]] for e in entries}
    pictures = folder / "images"
    pictures.mkdir(parents=True)
    rng = random.Random(0)
    for i in ids:
        img = Image.new("RGB", (640, 480), tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(img)
        for _ in range(4):
            x, y = rng.randrange(560), rng.randrange(400)
            draw.ellipse((x, y, x + 80, y + 80), fill=tuple(rng.randrange(256) for _ in range(3)))
        img.save(pictures / f"{i}.jpg", quality=85)
    dataset = folder / "dataset.json"
    dataset.write_text(json.dumps({"images": [
        {"cocoid": int(i), "filepath": "images", "filename": f"{i}.jpg", "split": "test",
         "sentences": [{"raw": c} for c in captions[i][1:]]} for i in ids]}))
    bench = folder / "bench"
    results = {"benchmark": "coco-5k", "split": "test", "methods": {}}
    t0 = 1.8e9
    for k, method in enumerate(METHODS):
        written = {i: captions[i][k % len(captions[i])] for i in ids}
        refs = {i: [c for c in captions[i] if c != written[i]] or captions[i][1:] for i in ids}
        scored = score_captions(refs, {i: [c] for i, c in written.items()}, ["CIDEr"])
        per_image = {i: {"CIDEr": scored.per_image[i]["CIDEr"]} for i in ids}
        mean = scored.corpus["CIDEr"]
        results["methods"][method] = {"beam": {"CIDEr": mean}, "checkpoint": f"runs/bench/{method}/best"}
        (bench / "captions").mkdir(parents=True, exist_ok=True)
        (bench / "captions" / f"{method}.json").write_text(json.dumps({"captions": written, "per_image": per_image,
                                                                       "ranks": {}}))
        run = bench / method
        run.mkdir()
        config = {"algorithm": method if method != "pg_spider" else "pg", "seed": 1234,
                  "data": {"dataset": str(dataset), "features": "feats.h5"}, "model": {"arch": "updown"}}
        (run / "config.json").write_text(json.dumps(config))
        with (run / "log.jsonl").open("w") as f:
            for r in range(RECORDS):
                step = 20 * (r + 1)
                f.write(json.dumps({"step": step, "split": "train", "loss": 3.0 / (1 + r / 100), "reward": mean * r / RECORDS,
                                    "entropy": 1.0 / (1 + r / 300), "length": 9.5, "time": t0 + 0.4 * step}) + "\n")
                if step % 2260 == 0:
                    f.write(json.dumps({"step": step, "split": "val", "CIDEr": mean * (0.8 + 0.2 * r / RECORDS),
                                        "time": t0 + 0.4 * step + 30}) + "\n")
    (bench / "results.json").write_text(json.dumps(results))
    return bench


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    parser.add_argument("--no-doc", action="store_true", help="print the figures, leave docs/BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    import torch

    from rlcap.report import write_report

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        bench = build_folder(Path(tmp), args.shared, args.images)
        built = time.perf_counter() - start
        for label, everything in (("default (a sample of 48 and each method's extremes)", False),
                                  ("--all (every image)", True)):
            start = time.perf_counter()
            page = write_report(bench, Path(tmp) / "report.html", everything=everything)
            seconds = time.perf_counter() - start
            html = page.read_text(encoding="utf-8")
            rows.append((label, seconds, page.stat().st_size / 1e6, html.count('class="item"')))
    lines = ["## Report: a COCO-size bench folder", "",
             f"Command: `make bench-report` (`benchmarks/bench_report.py --images {args.images}`; the folder took "
             f"{built:.0f} s to build). Machine: {machine(torch=torch.__version__)}.", "",
             f"{args.images:,} test images, {len(METHODS)} methods, real COCO caption text and per-caption CIDEr-D, "
             f"{RECORDS:,} log records a method, one 640 x 480 JPEG per image (the set-up: the script's docstring). "
             "Goal: the default page written in under 30 s and under 20 MB.", "",
             "| gallery | seconds to write | page size (MB) | gallery items |", "|---|---:|---:|---:|"]
    lines += [f"| {label} | {s:.1f} | {mb:.1f} | {n:,} |" for label, s, mb, n in rows]
    body = "\n".join(lines)
    if not args.no_doc:
        replace_section("bench-report", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
