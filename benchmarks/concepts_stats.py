"""Statistics of the COCO concepts benchmark beside COCO's own and shapes', written to docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/concepts_stats.py [--data data/coco-concepts] [--shapes data/shapes]

Builds the dataset into ``--data`` when it is not there (``rlcap data concepts`` with the benchmark's
settings; a no-op otherwise), then measures: vocabulary, caption length and the share of distinct
captions of its references, of all COCO val2014 captions and of the shapes captions (``--shapes``
if it holds a generated dataset, else ``--shapes-images`` test images generated into a temporary
folder); concepts per scene; the human agreement of each test split (the held-out caption against
the references, every metric of ``rlcap.metrics.score_captions``); and the two reference
captioners on the concepts test split. Replaces the ``concepts-stats`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from benchdoc import REPO, machine, replace_section
from rlcap.api import evaluation_metrics
from rlcap.data.concepts import ConceptsConfig, build_concepts, load_concepts
from rlcap.data.concepts.stats import (captions_as_images, dataset_caption_stats, held_out_agreement,
                                       scene_stats)
from rlcap.data.loader import DataConfig, load_data
from rlcap.data.synthetic.agreement import CaptionStats, caption_stats
from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes, load_shapes
from rlcap.metrics import score_captions
from rlcap.reference_captioners import nearest_neighbour_predictions, template_predictions

COCO_DIR = REPO.parent / "shared" / "data" / "coco"
SECTION = "concepts-stats"
COMMAND = ".venv/bin/python benchmarks/concepts_stats.py"


def shapes_images(folder: Path | None, n_test: int) -> tuple[list[dict], str]:
    """Karpathy entries of a shapes dataset (generated when ``folder`` holds none) and where they came from."""
    if folder is not None and (folder / "dataset_shapes.json").is_file():
        shown = folder.resolve().relative_to(REPO) if folder.resolve().is_relative_to(REPO) else folder
        return load_shapes(folder)["images"], f"`{shown}`, all splits"
    out = Path(tempfile.mkdtemp(prefix="shapes_stats_"))
    generate_shapes(ShapesConfig(n_train=0, n_val=0, n_test=n_test), out)
    return load_shapes(out)["images"], f"{n_test} test images generated with the default settings (seed 0)"


def shapes_agreement(images: list[dict], metrics: list[str]) -> dict[str, float]:
    test = [im for im in images if im["split"] == "test"]
    refs = {str(k): [s["raw"] for s in im["sentences"][1:]] for k, im in enumerate(test)}
    preds = {str(k): [im["sentences"][0]["raw"]] for k, im in enumerate(test)}
    return score_captions(refs, preds, metrics).corpus


def reference_captioners(data_dir: Path, metrics: list[str]) -> dict[str, dict[str, float]]:
    data = load_data(DataConfig(dataset=str(data_dir / "dataset_concepts.json"),
                                features=str(data_dir / "feats.h5")), ("train", "test"))
    train, test = data.splits["train"], data.splits["test"]
    refs = dict(zip(test.ids, test.refs))
    out = {}
    for name, fn in (("template", template_predictions), ("nearest_neighbour", nearest_neighbour_predictions)):
        preds = fn(train, test)
        out[name] = score_captions(refs, {i: [c] for i, c in preds.items()}, metrics).corpus
    return out


def caption_row(name: str, s: CaptionStats) -> str:
    return (f"| {name} | {s.n_images:,} | {s.n_captions:,} | {s.vocab_size:,} | {s.mean_length:.2f} | "
            f"{s.distinct_share:.3f} |")


def markdown(stats: dict, metrics: list[str], seconds: float, shapes_from: str, data_dir: Path) -> str:
    scenes = stats["scenes"]
    lines = [
        "## COCO concepts: the dataset beside COCO and shapes",
        "",
        f"`{COMMAND}` (dataset `{data_dir}`, built with the benchmark's settings: seed 0, drop 0.2, "
        f"1-2 distractors), {seconds:.0f} s on {machine()}. docs/CONCEPTS.md describes the benchmark.",
        "",
        "| captions | images | captions | vocabulary (distinct tokens) | mean length (tokens) | distinct captions |",
        "|---|---:|---:|---:|---:|---:|",
        caption_row("COCO val2014, all captions", stats["coco"]),
        caption_row("concepts: references, all splits", stats["concepts"]),
        caption_row("concepts: training references", stats["concepts_train"]),
        caption_row(f"shapes ({shapes_from})", stats["shapes"]),
        "",
        "Scenes (concepts are lemmatised nouns, verbs and adjectives of the held-out caption that GloVe has):",
        "",
        "| split | scenes | true concepts | kept | dropped | distractors | regions | distinct concepts |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for split, s in scenes.items():
        lines.append(f"| {split} | {s.n_scenes:,} | {s.concepts:.2f} | {s.kept:.2f} | {s.dropped:.2f} | "
                     f"{s.distractors:.2f} | {s.regions:.2f} | {s.concept_vocab:,} |")
    header = " | ".join(metrics)
    lines += [
        "",
        "Human agreement (the held-out caption of each test image against its references; "
        "`rlcap.metrics.score_captions`, SPICE by the Python port) and the reference captioners "
        "(`rlcap eval --reference`) on the same test split:",
        "",
        f"| test split | {header} |",
        "|---|" + "---:|" * len(metrics),
    ]
    rows = {"COCO concepts (= COCO's 5k human agreement)": stats["agreement"],
            "shapes": stats["shapes_agreement"],
            "COCO concepts: template captioner": stats["references"]["template"],
            "COCO concepts: nearest neighbour": stats["references"]["nearest_neighbour"]}
    for name, scores in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{scores[m]:.3f}" for m in metrics) + " |")
    lines += ["", f"pycocoevalcap's CIDEr-D on `human_agreement_5k.json`: {stats['coco_expected']:.4f}; "
                  f"the test split's here: {stats['agreement']['CIDEr']:.4f}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO / "data" / "coco-concepts")
    parser.add_argument("--shapes", type=Path, default=REPO / "data" / "shapes")
    parser.add_argument("--shapes-images", type=int, default=1000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    start = time.perf_counter()
    metrics = [m for m in evaluation_metrics() if m != "SPIDEr"]
    build_concepts(COCO_DIR / "val2014_captions.json", args.data,
                   ConceptsConfig(agreement=str(COCO_DIR / "human_agreement_5k.json")))
    concepts = load_concepts(args.data)
    coco = json.loads((COCO_DIR / "val2014_captions.json").read_text())
    shapes, shapes_from = shapes_images(args.shapes, args.shapes_images)
    stats = {
        "coco": caption_stats(captions_as_images(coco)),
        "concepts": dataset_caption_stats(args.data),
        "concepts_train": dataset_caption_stats(args.data, "train"),
        "shapes": caption_stats(shapes),
        "scenes": {split: scene_stats(concepts, split) for split in ("train", "val", "test")},
        "agreement": held_out_agreement(args.data, metrics),
        "shapes_agreement": shapes_agreement(shapes, metrics),
        "references": reference_captioners(args.data, metrics),
        "coco_expected": json.loads((COCO_DIR / "pycocoevalcap_expected_5k.json").read_text())["scores"]["CIDEr"],
    }
    body = markdown(stats, metrics, time.perf_counter() - start, shapes_from, args.data.relative_to(REPO)
                    if args.data.is_relative_to(REPO) else args.data)
    replace_section(SECTION, body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
