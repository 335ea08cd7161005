"""``make bench-rewards``' trained rows judged again on a wider test split: the same checkpoints, N test pictures.

Run with ``make bench-rewards-wide`` (``QUESTIONS``, ``IMAGE_SIZE`` and ``EPOCHS`` as ``make bench-rewards``;
``TEST_IMAGES``: the test pictures, 5,000 by default; ``ROWS``: the rows, default the set's). The bench's 1,000 test
pictures hold about 1,800 shape mentions, so a row's CHAIR_i moves by 0.0006 with one misnamed shape, and the
QA-acc goal (+10% relative) is about as wide as the spread between two held-out judges. This script trains
nothing: it generates the shapes data again with ``TEST_IMAGES`` test pictures into ``data/shapes_testN``
(``rlcap data shapes --n-test N``: picture i depends on (seed, i), so the training and validation pictures and the
first 1,000 test pictures are the bench's own, which it checks), encodes the new pictures alone (the bench's
feature store is copied first), decodes each row's checkpoint (the one ``make bench-rewards`` judges it by) with
beam 3 as the bench does, and scores the captions with the bench's own functions (``bench_rewards.py``: both judges,
CHAIR, coverage, CIDEr-D, SPICE, the template share, the judges by kind, what the captions say, the goals). It adds
each QA row's gain over CIDEr-D SCST with a 95% interval from a paired bootstrap over the test pictures. The
figures are kept in ``judged.json`` beside the captions and read again while the rows' checkpoints are the same.
Writes the set's section of docs/BENCHMARKS.md with ``-testN`` after its name; prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import bench_rewards as br
from benchdoc import REPO, machine, replace_section

TEST_IMAGES = 5000
BENCH_TEST = 1000  # the bench's own test pictures (rlcap data shapes' default), the first of the wider split
BOOTSTRAP = 2000  # resamples of the test pictures for a gain's interval
BASES = (br.BOXED_BASE, br.BASE)  # CIDEr-D SCST, the rows' baseline (from xe_box, or from xe)


def wide_data(n_test: int, image_size: int) -> Path:
    """The shapes data with ``n_test`` test pictures and its features at ``image_size`` (made where not complete),
    refused unless its training, validation and first test pictures are the bench's (``br.DATA``)."""
    from rlcap.data.synthetic.shapes import ShapesConfig
    from rlcap.demo import prepare_shapes

    folder = br.DATA.parent / f"shapes_test{n_test}"
    store = f"feats_{image_size}.h5"
    if not (folder / store).exists() and (br.DATA / store).exists():  # the bench's pictures are not encoded again
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(br.DATA / store, folder / store)
    dataset, _ = prepare_shapes(folder, image_size, print, ShapesConfig(n_test=n_test))
    check_same_pictures(br.DATA / "dataset_shapes.json", dataset)
    return folder


def check_same_pictures(ours: Path, wider: Path) -> None:
    """Refuse the dataset JSON ``wider`` unless it holds every picture of ``ours`` as it is (scene, captions,
    split, file)."""
    theirs = {r["imgid"]: r for r in json.loads(wider.read_text())["images"]}
    differ = [r["imgid"] for r in json.loads(ours.read_text())["images"] if theirs.get(r["imgid"]) != r]
    if differ:
        raise SystemExit(f"{wider} holds other pictures than {ours} (image {differ[0]} and {len(differ) - 1} "
                         "more): the rows were not trained on them")


def checkpoint(name: str, out: Path) -> Path:
    """The checkpoint ``make bench-rewards`` judges the row ``name`` by (rlcap.bench.methods.method_checkpoint)."""
    from rlcap.bench.methods import method_checkpoint
    from rlcap.bench.registry import bench_rows

    row = bench_rows("shapes")[name]
    found = method_checkpoint(row, {s.name: out / s.name / "best" for s in row.stages})
    if not (found / "config.json").is_file():
        raise SystemExit(f"{found} is not there: run the row first (make bench-rewards)")
    return found


def decode(name: str, qs: br.QuestionSet, wide: Path, image_size: int, out: Path) -> None:
    """Write the row ``name``'s captions of the wider test split to ``out``/captions/NAME.json (as rlcap bench writes
    a row's: beam 3 at the run's length), unless there from the same checkpoint."""
    from rlcap.decoding.settings import Decoding
    from rlcap.decoding.split import decode_split
    from rlcap.eval.open_run import open_run

    path = out / "captions" / f"{name}.json"
    ckpt = checkpoint(name, REPO / qs.out)
    made = (ckpt / "config.json").stat().st_mtime_ns
    if path.is_file() and json.loads(path.read_text()).get("checkpoint") == [str(ckpt), made]:
        return
    run = open_run(ckpt, "cpu")
    data = run.data(("test",), data_config=run.data_config(
        [f"dataset={wide / 'dataset_shapes.json'}", f"features={wide / f'feats_{image_size}.h5'}"]))
    said = decode_split(run.policy, data.splits["test"], run.vocab,
                        Decoding.search(run.device, 3, run.decoding.max_len))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"captions": said, "checkpoint": [str(ckpt), made]}))


def judged(names: list[str], qs: br.QuestionSet, wide_qs: br.QuestionSet) -> tuple[dict, dict, dict, dict]:
    """The rows' scores, the judges' QA-acc by kind, what the captions say, and each judge's QA-acc of each
    picture ((row, judge) -> {id: value}), as bench_rewards.py reads them from the wider split's captions; kept in
    ``wide_qs``.out/judged.json row by row, a row's read from there while its captions are from the same checkpoint
    (the rows added or changed alone are scored)."""
    path = REPO / wide_qs.out / "judged.json"
    rows = {n: json.loads((REPO / wide_qs.out / "captions" / f"{n}.json").read_text())["checkpoint"] for n in names}
    kept = json.loads(path.read_text()) if path.is_file() else {}
    fresh = [n for n in names if kept.get("rows", {}).get(n) != rows[n]]
    if fresh:  # scored and merged into the file; rows not asked for now stay in it
        per_image: dict[tuple[str, str], dict[str, float]] = {}
        found = br.scores(fresh, wide_qs, per_image)
        kept = {"rows": {**kept.get("rows", {}), **{n: rows[n] for n in fresh}},
                "scores": {**kept.get("scores", {}), **found},
                "by_kind": {j: {**kept.get("by_kind", {}).get(j, {}), **br.by_kind(fresh, wide_qs, j)}
                            for j in br.JUDGES},
                "phrases": {**kept.get("phrases", {}), **br.phrases(fresh, wide_qs.out, qs.out)},  # (the runs' cap)
                "per_image": {**kept.get("per_image", {}), **{f"{n} {j}": v for (n, j), v in per_image.items()}}}
        path.write_text(json.dumps(kept))
    return ({n: kept["scores"][n] for n in names}, {j: {n: kept["by_kind"][j][n] for n in names} for j in br.JUDGES},
            {n: kept["phrases"][n] for n in names},
            {(n, j): kept["per_image"][f"{n} {j}"] for n in names for j in br.JUDGES})


def paired_gain(row: dict[str, float], base: dict[str, float], seed: int = 0) -> tuple[float, float, float]:
    """The relative gain of mean ``row`` over mean ``base`` (id -> a picture's value, the same ids) and its 95%
    interval from ``BOOTSTRAP`` paired resamples of the pictures."""
    import numpy as np

    ids = sorted(base)
    a, b = np.array([row[i] for i in ids]), np.array([base[i] for i in ids])
    picks = np.random.default_rng(seed).integers(0, len(ids), size=(BOOTSTRAP, len(ids)))
    gains = a[picks].mean(axis=1) / b[picks].mean(axis=1) - 1
    low, high = np.percentile(gains, [2.5, 97.5])
    return float(a.mean() / b.mean() - 1), float(low), float(high)


def gain_lines(names: list[str], per_image: dict[tuple[str, str], dict[str, float]]) -> list[str]:
    """Each QA row's QA-acc gain over CIDEr-D SCST (the judges' mean, and each judge's) with its interval, from
    ``per_image`` (bench_rewards.scores()': (row, judge) -> {id: the picture's QA-acc})."""
    base = next((b for b in BASES if b in names), None)
    if base is None:
        return ["- No CIDEr-D SCST row was judged: no gain is read."]
    judged = {n: {j: per_image[n, j] for j in br.JUDGES} for n in names}
    ids = sorted(set.intersection(*(set(judged[n][j]) for n in names for j in br.JUDGES)))
    mean = {n: {i: sum(judged[n][j][i] for j in br.JUDGES) / len(br.JUDGES) for i in ids} for n in names}
    lines = []
    for n in (n for n in names if "qa" in n.split("_")):  # the QA-utility rows, summed or not
        each = ", ".join("{} {:+.1%} ({:+.1%} to {:+.1%})".format(
            j, *paired_gain({i: judged[n][j][i] for i in ids}, {i: judged[base][j][i] for i in ids}))
            for j in br.JUDGES)
        lines.append("- {}: {:+.1%} (95% interval {:+.1%} to {:+.1%}); {}.".format(
            n, *paired_gain(mean[n], mean[base]), each))
    return lines


def count_line(found: dict[str, dict[str, float]], n_test: int) -> str:
    """CHAIR_s as the count of test captions naming a shape the picture does not hold."""
    return ("- Captions naming a shape the picture does not hold (CHAIR_s x pictures): "
            + ", ".join(f"{n} {round(f['CHAIR_s'] * n_test)}" for n, f in found.items() if "CHAIR_s" in f)
            + f", of {n_test}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", choices=sorted(br.SETS), default="main", help="as bench_rewards.py's")
    parser.add_argument("--image-size", type=int, choices=br.SIZES, default=128, help="as bench_rewards.py's")
    parser.add_argument("--epochs", type=int, default=br.EPOCHS, help="as bench_rewards.py's")
    parser.add_argument("--rows", help="the rows judged (comma-separated; default: the set's), already run")
    parser.add_argument("--test-images", type=int, default=TEST_IMAGES,
                        help=f"test pictures, more than the bench's {BENCH_TEST} (its own are the first)")
    args = parser.parse_args(argv)
    if args.test_images <= BENCH_TEST:
        parser.error(f"--test-images must be above the bench's own {BENCH_TEST}")
    qs = br.at_budget(br.at_size(br.SETS[args.questions], args.image_size), args.epochs)
    names = (args.rows or qs.rows).split(",")
    import torch
    import transformers

    wide = wide_data(args.test_images, args.image_size)
    wide_qs = replace(qs, out=f"{qs.out}_test{args.test_images}", section=f"{qs.section}-test{args.test_images}")
    for n in names:
        decode(n, qs, wide, args.image_size, REPO / wide_qs.out)
    br.TEST_DATA = wide
    found, kinds, said, per_image = judged(names, qs, wide_qs)
    make = f"make bench-rewards-wide QUESTIONS={args.questions} IMAGE_SIZE={args.image_size}" + (
        f" TEST_IMAGES={args.test_images}" if args.test_images != TEST_IMAGES else "") + (
        f" EPOCHS={args.epochs}" if args.epochs != br.EPOCHS else "") + (f" ROWS={args.rows}" if args.rows else "")
    body = [br.heading(argparse.Namespace(questions=args.questions, image_size=args.image_size, epochs=args.epochs))
            + f", judged on {args.test_images:,} test pictures", "",
            f"Command: `{make}` (`python benchmarks/bench_rewards_wide.py {' '.join(argv or sys.argv[1:])}`). "
            f"Machine: {machine(torch=torch.__version__, transformers=transformers.__version__)}.", "",
            f"No training: the checkpoints of `{qs.out}` (the section above's rows, each judged by the checkpoint "
            f"the bench judges it by), their captions by beam 3 of {args.test_images:,} test pictures of "
            f"`{wide.relative_to(REPO)}` (`rlcap data shapes --n-test {args.test_images}`: the same training data, "
            f"its first {BENCH_TEST:,} test pictures the bench's own), scored by `bench_rewards.py`'s own functions. "
            "QA-acc is the mean of the two held-out judges'.", "",
            *br.table(found), "", count_line(found, len(br.captions_of(names[0], wide_qs.out))), "",
            "Each QA row's QA-acc gain over CIDEr-D SCST, with a 95% interval from a paired bootstrap over the test "
            f"pictures ({BOOTSTRAP:,} resamples):", "", *gain_lines(names, per_image), "",
            *[line for j, k in kinds.items() for line in
              (f"The held-out {j}'s QA-acc on each kind of question alone:", "", *br.kind_table(k), "")],
            "What the captions say (`phrases()`, as the section above):", "", *br.phrase_table(said), "",
            *br.goals(found, wide_qs)]
    replace_section(wide_qs.section, "\n".join(body))
    print("\n".join(body))
    print(json.dumps({"scores": found, "by_kind": kinds, "phrases": said}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
