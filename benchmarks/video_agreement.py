"""Human agreement and caption statistics of the moving-shapes benchmark, written to docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/video_agreement.py

The captions of the default dataset's test clips are drawn without rendering the clips (they do not
depend on the frames). Caption 0 of each clip is the candidate, the other four its references,
corpus CIDEr-D as pycocoevalcap computes it (the same protocol as the shapes and COCO figures).
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchdoc import machine, replace_section

from rlcap.data.synthetic.agreement import caption_stats, human_agreement
from rlcap.data.synthetic.captions import tokenize_caption
from rlcap.data.synthetic.moving import MovingShapesConfig, clip_and_captions


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    start = time.perf_counter()
    config = MovingShapesConfig()
    first_test = config.n_train + config.n_val
    images, events = [], []
    for i in range(first_test, config.n_videos):
        clip, captions = clip_and_captions(config, i)
        events.append(len(clip.events))
        images.append({"split": "test", "sentences": [{"tokens": tokenize_caption(text)} for _, text, _ in captions]})
    stats = caption_stats(images, "test")
    agreement = human_agreement(images, "test")
    body = "\n".join([
        "## Moving shapes: human agreement", "",
        f"`.venv/bin/python benchmarks/video_agreement.py` (the default `rlcap data moving-shapes` dataset, seed "
        f"{config.seed}: its {config.n_test} test clips). Machine: {machine()}. {time.perf_counter() - start:.0f} s.", "",
        "| data | human agreement (CIDEr-D) | clips | events per clip | vocabulary | mean length | distinct captions |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| moving shapes, test split | **{agreement:.3f}** | {stats.n_images:,} | {statistics.mean(events):.2f} | "
        f"{stats.vocab_size} | {stats.mean_length:.1f} | {stats.distinct_share:.0%} |", "",
        "Caption 0 of each clip is the candidate and the other four its references (pycocoevalcap's CIDEr-D, document "
        "frequencies from those references), as for shapes and COCO above.",
    ])
    replace_section("video-agreement", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
