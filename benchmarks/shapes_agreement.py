"""Human agreement of the "shapes" benchmark beside COCO's, written to docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/shapes_agreement.py [--data data/shapes]

Generates the default dataset into ``--data`` if it is not there yet (a no-op otherwise), holds
out caption 0 of each test image as the candidate, scores it against the other four with
pycocoevalcap's CIDEr-D, and replaces the ``shapes-agreement`` section of docs/BENCHMARKS.md.
COCO's figure is the one pycocoevalcap gives on ../shared/data/coco (5,000 val2014 images, PTB
tokenizer); the same protocol with this script's simple tokenization is shown beside it as a check.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time
from pathlib import Path

from benchdoc import DOC, REPO, machine, replace_section
from rlcap.data.synthetic.agreement import CaptionStats, caption_stats, human_agreement, scene_consensus
from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes, load_shapes

COCO_DIR = REPO.parent / "shared" / "data" / "coco"
SECTION = "shapes-agreement"
COMMAND = ".venv/bin/python benchmarks/shapes_agreement.py"


def coco_images() -> tuple[float, list[dict]] | None:
    """COCO's reference CIDEr-D and its 5,000 images as Karpathy entries (candidate first)."""
    expected = COCO_DIR / "pycocoevalcap_expected_5k.json"
    captions = COCO_DIR / "human_agreement_5k.json"
    if not expected.is_file() or not captions.is_file():
        return None
    cider = json.loads(expected.read_text())["scores"]["CIDEr"]
    images = [{"split": "test", "sentences": [{"tokens": re.findall(r"[a-z0-9]+", c.lower())}
                                              for c in [e["candidate"], *e["references"]]]}
              for e in json.loads(captions.read_text())]
    return cider, images


def stats_row(name: str, agreement: str, s: CaptionStats) -> str:
    return (f"| {name} | {agreement} | {s.n_images:,} | {s.vocab_size:,} | {s.mean_length:.1f} | "
            f"{s.share_4_to_16:.0%} | {s.distinct_share:.0%} | {s.images_sharing:.0%} |")


def render_section(shapes: tuple[float, CaptionStats, CaptionStats, float], coco, seconds: float | None,
                   config: ShapesConfig) -> str:
    agreement, test_stats, all_stats, consensus = shapes
    lines = [
        "## Shapes: human agreement",
        "",
        f"`{COMMAND}` (dataset: `rlcap data shapes --out data/shapes`, seed {config.seed}, "
        f"{config.n_train:,} / {config.n_val:,} / {config.n_test:,} images at "
        f"{config.image_size} px). Machine: {machine()}.",
        "",
        "Caption 0 of each test image is the candidate, the other four are its references; "
        "corpus CIDEr-D as pycocoevalcap 1.2 computes it (document frequencies from those "
        "references). Other columns: distinct tokens, mean tokens per caption, captions of 4 to "
        "16 tokens, distinct captions / captions, images with a caption identical to one of "
        "another image.",
        "",
        "| data | human agreement (CIDEr-D) | images | vocabulary | mean length | 4-16 tokens "
        "| distinct captions | images sharing a caption |",
        "|---|---|---|---|---|---|---|---|",
        stats_row("shapes, test split", f"**{agreement:.3f}**", test_stats),
        stats_row("shapes, all splits", "", all_stats),
    ]
    if coco is not None:
        coco_cider, coco_check, coco_stats = coco
        lines.append(stats_row("COCO val2014, first 5k", f"**{coco_cider:.3f}** "
                               f"({coco_check:.3f} with simple tokens)", coco_stats))
    lines += ["", f"Captions written from the true scene in the annotators' shared words (the salient object with "
              f"its size and where the next object is, e.g. \"a big red circle above a blue square\": what a "
              f"captioner that perceives every scene rightly can write), scored against the same four references: "
              f"CIDEr-D **{consensus:.3f}**, {consensus / agreement:.2f}x the human agreement "
              f"(`rlcap.data.synthetic.agreement.scene_consensus`).",
              "", f"Most frequent shapes caption: \"{all_stats.top_caption}\" "
              f"({all_stats.top_caption_images} images)."]
    if seconds is not None:
        lines.append(f"Generating the dataset took {seconds:.0f} s on this machine.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO / "data" / "shapes"), help="dataset folder")
    parser.add_argument("--doc", default=str(DOC), help="the markdown file to update")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    config = ShapesConfig()
    start = time.perf_counter()
    generate_shapes(config, args.data)  # a no-op when the folder is complete
    images = load_shapes(args.data)["images"]
    test = [im for im in images if im["split"] == "test"]
    consensus = human_agreement(test, "test", candidates=[scene_consensus(im["scene"]) for im in test])
    shapes = (human_agreement(images, "test"), caption_stats(images, "test"), caption_stats(images), consensus)
    coco = coco_images()
    if coco is not None:
        coco = (coco[0], human_agreement(coco[1], "test"), caption_stats(coco[1]))
    manifest = json.loads((Path(args.data) / "manifest.json").read_text())
    seconds = manifest.get("seconds")
    section = render_section(shapes, coco, seconds, config)
    replace_section(SECTION, section, Path(args.doc))
    print(section)
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
