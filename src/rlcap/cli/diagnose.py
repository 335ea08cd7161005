"""``rlcap diagnose MEASUREMENT ...``: rerun on your own data the measurements behind rlcap's documented findings.

- ``reward-spread CHECKPOINT``: each part of a combined reward among one image's sampled captions:
  mean, within-image standard deviation and correlation, share of the combined reward's variance
  (:mod:`rlcap.diagnose.reward_spread`).
- ``reward-forms CHECKPOINT --form NAME=REGEX ...``: what a reward pays for: each named form of caption's mean
  reward and leave-one-out advantage among an image's samples (:mod:`rlcap.diagnose.reward_forms`).
- ``value-fit CHECKPOINT``: an actor-critic value network's R^2 by caption position
  (:mod:`rlcap.diagnose.value_fit`).
- ``prefix-credit DATASET``: where per-word delta rewards put the cost of a wrong prefix, by metric
  (:mod:`rlcap.diagnose.prefix_credit`).

Each prints a table and, with ``--out FILE.json``, writes the figures (an undefined one as null).
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from rlcap import api
from rlcap.cli.options import COUNT, CommandParser, float_range, int_range
from rlcap.cli.tables import format_scores
from rlcap.errors import DataError
from rlcap.files import check_writable
from rlcap.rewards.registry import REWARDS

SHARE_DEFINITION = ("share_i = Cov(w_i r_i, R) / Var(R), R = sum_i w_i r_i, with covariances taken among each "
                    "image's samples (centred on the image's mean) and pooled over images; the shares sum to 1. "
                    "own_share_i = Var(w_i r_i) / Var(R) leaves out the covariances between rewards")
R2_DEFINITION = ("R^2_t = 1 - sum_i (R_i - v(s_t))^2 / sum_i (R_i - mean R)^2 over the captions still running "
                 "at position t; overall: over every valid step")
FORMS_DEFINITION = ("each sample is labelled by the first form whose pattern it contains (re.search), else 'other'; "
                    "advantage: the sample's reward minus the mean of its image's other samples' (the leave-one-out "
                    "baseline), averaged over the form's samples; contested: images where the form's samples sit "
                    "beside another form's")
CREDIT_DEFINITION = ("the first SWAP words of each caption are replaced by the next clip's caption's; wrong / later: "
                     "the mean change per caption of the delta rewards summed over the replaced words / the "
                     "identical words after them; later_share = later / (wrong + later)")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("diagnose", help="rerun the measurements behind the documented findings on your data")
    inner = p.add_subparsers(dest="measurement", metavar="MEASUREMENT", parser_class=CommandParser, required=True)
    _add_reward_spread(inner)
    _add_reward_forms(inner)
    _add_value_fit(inner)
    _add_prefix_credit(inner)
    return p


TEMPERATURE = float_range(0.0, include_low=False)  # argparse type: a sampling temperature


def reward_weights(text: str) -> dict[str, float]:
    """``cider_d:0.5,spice:0.5`` -> {"cider_d": 0.5, "spice": 0.5}; a weight left out is 1 (the weight
    follows the last colon, so a dotted path ``mypkg.mod:func:0.5`` keeps its own)."""
    weights: dict[str, float] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, weight = item.rpartition(":")
        try:
            value = float(weight)
        except ValueError:
            if name in REWARDS:  # `cider_d:abc` is a weight that is not a number, not a module cider_d
                raise argparse.ArgumentTypeError(f"{item!r}: the weight {weight!r} of {name} is not a number "
                                                 "(NAME:WEIGHT,... e.g. cider_d:0.5,spice:0.5)") from None
            name, value = item, 1.0
        if not name or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected NAME:WEIGHT,... (e.g. cider_d:0.5,spice:0.5), got {item!r}")
        weights[name] = value
    if not weights:
        raise argparse.ArgumentTypeError(f"expected NAME:WEIGHT,... (e.g. cider_d:0.5,spice:0.5), got {text!r}")
    return weights


def _add_sampling(p: argparse.ArgumentParser, default_split: str) -> None:
    """The options of a measurement on a checkpoint's sampled captions."""
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/x/best)")
    p.add_argument("--split", choices=("train", "val", "test"), default=default_split,
                   help=f"images measured (default {default_split}); the reward's references are the training "
                        "split's and this one's")
    p.add_argument("--images", type=int_range(0), default=500, help="the split's first N images (default 500; 0: all)")
    p.add_argument("--samples", type=int_range(2), default=None,
                   help="captions sampled per image (default: the run's rl.n_samples)")
    p.add_argument("--temperature", type=TEMPERATURE, default=None,
                   help="sampling temperature (default: the run's decode.temperature)")
    p.add_argument("--seed", type=int_range(0), default=0, help="seed of the sampling (default 0)")
    p.add_argument("--batch-size", type=COUNT, default=50, help="images per forward pass (default 50)")
    p.add_argument("--out", default=None, metavar="FILE.json", help="also write the figures to this JSON file")
    p.add_argument("data_overrides", nargs="*", metavar="data.KEY=VALUE",
                   help="data overrides, anywhere after the checkpoint, e.g. data.features=other.h5 (reward-spread "
                        "also takes reward.KEY=VALUE, e.g. reward.paths='{qa_utility: DIR, qa_file: FILE}')")


def _add_reward_spread(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("reward-spread", help="each reward's spread among an image's samples and its share of "
                                               "the combined reward's variance")
    _add_sampling(p, "val")
    p.add_argument("--rewards", type=reward_weights, default=None, metavar="NAME:W,...",
                   help="the combined reward, e.g. cider_d:0.5,spice:0.5 for SPIDEr (default: the run's "
                        "reward.weights)")
    p.set_defaults(func=run_reward_spread)


def caption_form(text: str) -> tuple[str, str]:
    """``third=(circle|square).*(circle|square)`` -> ("third", the regular expression), checked."""
    name, sep, pattern = text.partition("=")
    if not sep or not name.strip() or not pattern:
        raise argparse.ArgumentTypeError(f"expected NAME=REGEX (e.g. count='with (two|three) other'), got {text!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{name.strip()}: {pattern!r} is not a regular expression ({exc})") from None
    return name.strip(), pattern


def _add_reward_forms(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("reward-forms", help="each form of caption's mean reward and leave-one-out advantage among "
                                              "an image's samples: what the reward pays for")
    _add_sampling(p, "val")
    p.add_argument("--form", dest="forms", type=caption_form, action="append", required=True,
                   metavar="NAME=REGEX", help="a form of caption: the samples whose text contains REGEX (the first "
                                              "form matched labels a sample); repeat for more")
    p.add_argument("--rewards", type=reward_weights, default=None, metavar="NAME:W,...",
                   help="the combined reward (default: the run's reward.weights)")
    p.add_argument("--max-len", type=int_range(1), default=None,
                   help="the most words a sample may have (default: the run's decode.max_len)")
    p.add_argument("--examples", type=int_range(0), default=3, help="captions shown per form (default 3)")
    p.set_defaults(func=run_reward_forms)


def _add_value_fit(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("value-fit", help="an actor-critic value network's R^2 by caption position")
    _add_sampling(p, "val")
    p.set_defaults(func=run_value_fit)


def _add_prefix_credit(inner: argparse._SubParsersAction) -> None:
    p = inner.add_parser("prefix-credit", help="where per-word delta rewards put the cost of a wrong prefix")
    p.add_argument("dataset", help="caption file (Karpathy split JSON, MSR-VTT annotations, JSONL, or COCO "
                                   "annotations with --coco-splits)")
    p.add_argument("--split", default="train", help="clips measured (default train)")
    p.add_argument("--clips", type=int_range(0), default=300, help="the split's first N clips (default 300; 0: all)")
    p.add_argument("--swap", type=int_range(1), default=5, help="words replaced at the start (default 5)")
    p.add_argument("--metrics", type=_names, default=("cider_d", "cider"), metavar="NAME,...",
                   help="rewards scoring the prefixes (default cider_d,cider)")
    p.add_argument("--no-eos", dest="eos_counts", action="store_false",
                   help="do not score the end token (default: scored, as reward.eos_counts)")
    p.add_argument("--format", default="auto", help="dataset format, as data.format (default auto)")
    p.add_argument("--coco-splits", default=None, help="for the coco format: JSON of split -> image ids")
    p.add_argument("--out", default=None, metavar="FILE.json", help="also write the figures to this JSON file")
    p.set_defaults(func=run_prefix_credit)


def _names(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"expected NAME,... (e.g. cider_d,cider), got {text!r}")
    return names


def _data_overrides(args: argparse.Namespace, rewards_apart: bool = False) -> list[str]:
    """The data overrides; ``rewards_apart``: leave out the reward.KEY=VALUE ones (reward-spread's; elsewhere they
    stay, and the data section refuses them)."""
    return [o.removeprefix("data.") for o in args.data_overrides if not (rewards_apart and o.startswith("reward."))]


def _reward_overrides(args: argparse.Namespace) -> list[str]:
    return [o.removeprefix("reward.") for o in args.data_overrides if o.startswith("reward.")]


def _json_ready(figures: Any) -> Any:
    """``figures`` with NaN (an undefined figure) as None: JSON has no NaN."""
    if isinstance(figures, dict):
        return {k: _json_ready(v) for k, v in figures.items()}
    if isinstance(figures, list):
        return [_json_ready(v) for v in figures]
    return None if isinstance(figures, float) and math.isnan(figures) else figures


def run_reward_spread(args: argparse.Namespace) -> int:
    import torch

    from rlcap.diagnose.reward_spread import even_weights, reward_spread

    _check_out(args.out)
    got = reward_spread(args.checkpoint, args.split, args.images, args.samples, args.temperature, args.rewards,
                        _data_overrides(args, rewards_apart=True), args.batch_size, args.seed, progress=True,
                        reward_overrides=_reward_overrides(args))
    s, names = got.stats, got.rewards
    even = even_weights(s.within_std, torch.tensor(got.weights)).tolist()
    rewards = {name: {"weight": got.weights[i], "mean": s.mean[i].item(), "within_std": s.within_std[i].item(),
                      "share": s.share[i].item(), "own_share": s.own_share[i].item(), "even_weight": even[i]}
               for i, name in enumerate(names)}
    correlation = {a: {b: s.within_corr[i, j].item() for j, b in enumerate(names)} for i, a in enumerate(names)}
    combined = {"mean": s.combined_mean.item(), "within_std": s.combined_std.item()}
    print(f"{got.images} images of {got.split}, {got.samples_per_image} samples each at temperature "
          f"{got.temperature:g}; within an image's samples:")
    print(format_scores({**rewards, "R (combined)": combined}, label="reward"))
    print(format_scores(correlation, label="correlation"))
    print(SHARE_DEFINITION)
    print(f"even_weight: the weights that give each reward the within-image spread of {names[0]}'s term "
          "(w_0 std_0 / std_i): " + ", ".join(f"{n} {w:.3g}" for n, w in zip(names, even)))
    return _write(args.out, {
        "measurement": "reward-spread", "checkpoint": got.checkpoint, "split": got.split, "images": got.images,
        "samples_per_image": got.samples_per_image, "temperature": got.temperature, "definition": SHARE_DEFINITION,
        "rewards": rewards, "correlation": correlation, "combined": combined})


def run_reward_forms(args: argparse.Namespace) -> int:
    from rlcap.diagnose.reward_forms import reward_forms

    _check_out(args.out)
    forms = dict(args.forms)
    got = reward_forms(args.checkpoint, forms, args.split, args.images, args.samples, args.temperature, args.rewards,
                       _data_overrides(args, rewards_apart=True), args.batch_size, args.seed, progress=True,
                       reward_overrides=_reward_overrides(args), max_len=args.max_len)
    s, sampled = got.stats, got.sampled
    flat = [c for row in sampled.captions for c in row]
    labels = got.labels.reshape(-1).tolist()
    table, figures = {}, {}
    for f, name in enumerate(got.names):
        parts = {r: {"mean_reward": by.mean_reward[f].item(), "mean_advantage": by.mean_advantage[f].item()}
                 for r, by in zip(sampled.rewards, got.by_reward)}
        figures[name] = {"pattern": forms.get(name), "samples": s.samples[f].item(), "images": s.images[f].item(),
                         "contested": s.contested[f].item(), "mean_reward": s.mean_reward[f].item(),
                         "mean_advantage": s.mean_advantage[f].item(), "by_reward": parts,
                         "examples": [c for c, label in zip(flat, labels) if label == f][:args.examples]}
        table[name] = {"samples": figures[name]["samples"], "images": figures[name]["images"],
                       "contested": figures[name]["contested"], "mean R": figures[name]["mean_reward"],
                       "advantage R": figures[name]["mean_advantage"],
                       **({f"advantage {r}": p["mean_advantage"] for r, p in parts.items()} if len(parts) > 1 else {})}
    weights = ", ".join(f"{w:g} x {r}" for r, w in zip(sampled.rewards, sampled.weights))
    print(f"{len(sampled.image_ids)} images of {sampled.split}, {sampled.samples_per_image} samples each of at most "
          f"{sampled.max_len} words at temperature {sampled.temperature:g}; R = {weights}:")
    print(format_scores(table, label="form"))
    print(FORMS_DEFINITION)
    for name, fig in figures.items():
        for caption in fig["examples"]:
            print(f"  {name}: {caption}")
    return _write(args.out, {
        "measurement": "reward-forms", "checkpoint": sampled.checkpoint, "split": sampled.split,
        "images": len(sampled.image_ids), "samples_per_image": sampled.samples_per_image,
        "temperature": sampled.temperature, "max_len": sampled.max_len,
        "rewards": dict(zip(sampled.rewards, sampled.weights)),
        "definition": FORMS_DEFINITION, "forms": figures})


def run_value_fit(args: argparse.Namespace) -> int:
    from rlcap.diagnose.value_fit import value_fit

    _check_out(args.out)
    got = value_fit(args.checkpoint, args.split, args.images, args.samples, args.temperature, _data_overrides(args),
                    args.batch_size, args.seed, progress=True)
    by_position, rows = got.fit.by_position.tolist(), [int(x) for x in got.fit.rows.tolist()]
    print(f"{got.images} images of {got.split}, {got.samples_per_image} samples each at temperature "
          f"{got.temperature:g}; value network reads {got.value_features}; mean reward {got.mean_reward:.4f}")
    print(f"{'position':>8}  {'R^2':>8}  {'captions':>8}")
    for t, (r2, n) in enumerate(zip(by_position, rows)):
        print(f"{t:>8}  {r2:>8.4f}  {n:>8}")
    print(f"{'overall':>8}  {got.fit.overall.item():>8.4f}  {sum(rows):>8}")
    print(R2_DEFINITION)
    return _write(args.out, {
        "measurement": "value-fit", "checkpoint": got.checkpoint, "split": got.split,
        "value_features": got.value_features, "images": got.images, "samples_per_image": got.samples_per_image,
        "temperature": got.temperature, "mean_reward": got.mean_reward, "definition": R2_DEFINITION,
        "r2_overall": got.fit.overall.item(), "r2_by_position": by_position, "captions_by_position": rows})


def run_prefix_credit(args: argparse.Namespace) -> int:
    from rlcap.diagnose.prefix_credit import prefix_credit_on_dataset

    _check_out(args.out)
    got = prefix_credit_on_dataset(args.dataset, args.split, args.clips, args.swap, args.metrics, args.eos_counts,
                                   args.format, args.coco_splits)
    metrics = {name: {"wrong": shift.wrong, "later": shift.later, "captions": shift.captions,
                      "later_share": shift.later / (shift.wrong + shift.later) if shift.wrong + shift.later else math.nan}
               for name, shift in got.shifts.items()}
    measured = next(iter(got.shifts.values())).captions  # the same captions under every metric
    print(f"first caption of {got.clips} clips of {got.split} against the others ({measured} long enough and changed "
          f"by the swap), first {got.swap} words swapped (end token {'scored' if got.eos_counts else 'not scored'}); "
          "mean change per caption:")
    print(format_scores({name: {"wrong words": m["wrong"], "later words": m["later"], "later_share": m["later_share"]}
                         for name, m in metrics.items()}, label="metric"))
    print(CREDIT_DEFINITION)
    return _write(args.out, {
        "measurement": "prefix-credit", "dataset": got.dataset, "split": got.split, "clips": got.clips,
        "swap": got.swap, "eos_counts": got.eos_counts, "definition": CREDIT_DEFINITION, "metrics": metrics})


def _check_out(path: str | None) -> None:
    """``--out`` checked before the measurement, not after it has been printed."""
    if path is not None:
        check_writable(path)


def _write(path: str | None, figures: dict[str, Any]) -> int:
    if path is not None:
        try:
            api.write_json(path, _json_ready(figures))
        except OSError as exc:
            raise DataError(f"--out {path}: cannot write ({exc.strerror or exc})") from None
        print(f"wrote {path}")
    return 0
