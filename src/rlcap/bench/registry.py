"""Benchmarks and their table rows for ``rlcap bench``: plain dicts, one entry each.

A row of the table (:class:`BenchRow`, named by the method it shows: ``--methods xe,scst``) is a
sequence of :class:`Stage`s, each a training run from a recipe ``configs/<benchmark>_<recipe>.yaml``,
started from an earlier stage's best checkpoint. Stages of the same name are trained once per
benchmark run and shared (every row's XE pretraining). The last stage's best checkpoint is the
row's model in the table.

Adding a row is an entry in :data:`BENCH_ROWS` plus its recipe (and, for a new algorithm, its
loop in :data:`rlcap.methods.registry.METHODS`; the rows of ``make bench-rewards`` are in
:mod:`rlcap.bench.qa_rows`); adding a benchmark is an entry in
:data:`BENCHMARKS`. See docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlcap.bench.qa_rows import QA_ROWS
from rlcap.bench.stage import XE, BenchRow, Stage
from rlcap.errors import ConfigError

Report = Callable[[str], None]


@dataclass(frozen=True)
class Benchmark:
    """``prepare(data_dir, image_size, report) -> (dataset, features)`` builds (or reuses) the data;
    recipes are ``configs/<recipes>_<recipe>.yaml``; ``rows``: this benchmark's own meaning of a
    method name, over :data:`BENCH_ROWS` ([Wang18]'s ``rl`` on video is SCST, [Chaffin24]'s ``rl`` elsewhere);
    ``sample_temperature``: the temperature its RL recipes draw samples at (``decode.temperature``):
    when it is not 1, the table's random samples are also drawn at it (``rs@T`` columns), the
    policy those methods train."""

    prepare: Callable[[Path, int, Report], tuple[Path, Path]]
    recipes: str
    description: str = ""
    rows: tuple[tuple[str, "BenchRow"], ...] = ()
    sample_temperature: float = 1.0
    # refuses (one line) a data folder that ``prepare`` would regenerate over, one generated with
    # other settings; run_benchmark skips it when asked to regenerate (``rlcap bench --regenerate``)
    check: Callable[[Path], None] | None = None
    # a folder inside the data folder that ``prepare`` fills with a transformers captioner: the benchmark's policy,
    # ``model.path`` of its XE stages (the others take their architecture from the checkpoint they start from)
    policy: str = ""


def _prepare_shapes(data_dir: Path, image_size: int, report: Report) -> tuple[Path, Path]:
    from rlcap.demo import prepare_shapes

    return prepare_shapes(data_dir, image_size, report)


# shapes-hf: the folder of its transformers captioner, inside the data folder
HF_CAPTIONER = "captioner"


def _prepare_shapes_hf(data_dir: Path, image_size: int, report: Report) -> tuple[Path, Path]:
    """The shapes benchmark with a small GIT captioner as the policy (docs/MODELS.md): the pictures, the captioner
    built from a small config with random weights and a wordpiece tokenizer trained on the training captions
    (``rlcap hf-captioner``), and the store of its tower's tokens (``rlcap features --encoder hf:DIR``), each
    reused when there. ``image_size`` does not apply: the captioner's image processor sizes the pictures."""
    from rlcap.models.hf.build_captioner import build_captioner

    return _shapes_with_policy(data_dir, report, "a small GIT captioner",
                               lambda folder, captions: build_captioner("git", folder, captions, "small"))


def _prepare_shapes_vlm(data_dir: Path, image_size: int, report: Report) -> tuple[Path, Path]:
    """The shapes benchmark with a small instruction vision-language model as the policy (docs/MODELS.md): a
    SmolVLM (Idefics3) built offline at size mini (``rlcap hf-captioner --family smolvlm --size mini``: the widths
    of shapes-hf's GIT) and the store of its image tokens, as :func:`_prepare_shapes_hf`."""
    from rlcap.models.hf.build_vlm import build_vlm

    return _shapes_with_policy(data_dir, report, "a mini SmolVLM",
                               lambda folder, captions: build_vlm("smolvlm", folder, captions, "mini"))


def _shapes_with_policy(data_dir: Path, report: Report, what: str,
                        build: Callable[[Path, list[str]], Path]) -> tuple[Path, Path]:
    """The shapes pictures, the policy ``build`` makes in ``data_dir``/:data:`HF_CAPTIONER` (random weights, a
    tokenizer of the training captions) and the store ``rlcap features --encoder hf:DIR`` writes for it."""
    from rlcap.data.readers import read_dataset
    from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes
    from rlcap.encoders.extract import extract_features
    from rlcap.progress import progress

    config = ShapesConfig()
    report(f"[1/3] shapes data -> {data_dir}")
    with progress(config.n_images, "shapes", unit="img") as bar:
        dataset = generate_shapes(config, data_dir, progress=bar.update)
    records = read_dataset(dataset)
    captioner = data_dir / HF_CAPTIONER
    report(f"[2/3] {what} (random weights, tokenizer of the training captions) -> {captioner}")
    if not (captioner / "config.json").is_file():
        build(captioner, [c for r in records if r.split == "train" for c in r.captions])
    feats = data_dir / f"{HF_CAPTIONER}.h5"
    report(f"[3/3] the tokens it reads of each picture -> {feats}")
    images = {r.id: data_dir / r.filename for r in records}
    with progress(len(images), "features", unit="img") as bar:
        extract_features(images, feats, batch_size=64, progress=bar.update, encoder=f"hf:{captioner}")
    return dataset, feats


def _check_shapes(data_dir: Path) -> None:
    from rlcap.data.synthetic.shapes import ShapesConfig, check_settings

    check_settings(ShapesConfig(), data_dir)


# Where `rlcap bench --benchmark coco-concepts` reads COCO's captions, relative to the working directory
# (the repository root, as for configs/): the shared data folder beside the repository.
COCO_CAPTIONS = Path("../shared/data/coco")


def _prepare_coco_concepts(data_dir: Path, image_size: int, report: Report) -> tuple[Path, Path]:
    """COCO scenes from their concepts (docs/CONCEPTS.md); ``image_size`` does not apply (no images)."""
    from rlcap.data.concepts import ConceptsConfig, build_concepts

    report(f"[1/1] COCO concepts data from {COCO_CAPTIONS} -> {data_dir}")
    config = ConceptsConfig(agreement=str(COCO_CAPTIONS / "human_agreement_5k.json"))
    result = build_concepts(COCO_CAPTIONS / "val2014_captions.json", data_dir, config)
    return result.dataset, result.features


def _check_moving_shapes(data_dir: Path) -> None:
    from rlcap.data.synthetic.moving import MovingShapesConfig, check_settings

    check_settings(MovingShapesConfig(), data_dir)


def _prepare_moving_shapes(data_dir: Path, image_size: int, report: Report) -> tuple[Path, Path]:
    """Moving-shapes clips (MP4) and their frame features (4 frames a second, at most 16), both reused when complete."""
    from rlcap.data.readers import read_dataset
    from rlcap.data.synthetic.moving import MovingShapesConfig, generate_moving_shapes
    from rlcap.encoders.video import extract_video_features
    from rlcap.progress import progress

    config = MovingShapesConfig()
    report(f"[1/2] moving-shapes clips -> {data_dir}")
    with progress(config.n_videos, "moving-shapes", unit="clip") as bar:
        annotations = generate_moving_shapes(config, data_dir, progress=bar.update)
    size = min(image_size, 96)  # 64-px frames: 96 px is the encoder's 3x3 grid, enough for pooled frame vectors
    feats = data_dir / f"frames_{size}.h5"
    report(f"[2/2] EfficientNet-Lite0 frame features at {size} px, 4 frames/s -> {feats}")
    videos = {r.id: data_dir / r.filename for r in read_dataset(annotations)}
    with progress(len(videos), "features", unit="clip") as bar:
        extract_video_features(videos, feats, image_size=size, fps=4.0, max_frames=16, progress=bar.update)
    return annotations, feats


def _prepare_user_video(data_dir: Path, image_size: int, report: Report) -> tuple[Path, Path]:
    """A user's MSR-VTT-format video dataset in ``--data DIR``: ``annotations.json`` and ``frames.h5``
    (``rlcap features DIR --dataset DIR/annotations.json --fps 3 --out DIR/frames.h5``)."""
    from rlcap.errors import DataError

    annotations, feats = data_dir / "annotations.json", data_dir / "frames.h5"
    missing = [p.name for p in (annotations, feats) if not p.is_file()]
    if missing:
        raise DataError(f"--benchmark video reads {data_dir}/annotations.json (MSR-VTT format) and {data_dir}/frames.h5 "
                        f"(rlcap features ... --fps 3); missing: {', '.join(missing)}")
    report(f"video data: {annotations}, {feats}")
    return annotations, feats


EMBEDDING = Stage("embedding", "embedding")  # the embedding reward's model ([Shi18 sec. 3.3.1])
# [Chaffin24]: the training retriever (the rewards' model) and a second judge trained independently, never a reward
RETRIEVAL, JUDGE = Stage("retrieval", "retrieval"), Stage("judge", "judge")


def _distinct(name: str) -> tuple[Stage, ...]:
    """A [Chaffin24] method's stages: XE, both retrievers, then the method from XE with the training retriever."""
    return (XE, RETRIEVAL, JUDGE, Stage(name, name, "xe", (("retrieval", "retrieval"),)))


_AC = (XE, EMBEDDING, Stage("ac", "ac", "xe", (("embedding", "embedding"),)))
# the same with a value network that also attends over the regions the policy reads (docs/RL.md, "What the value
# network reads")
_AC_ATT = (XE, EMBEDDING, Stage("ac_att", "ac", "xe", (("embedding", "embedding"),), ("ac.value_features=att",)))


def _after_xe(name: str) -> tuple[Stage, ...]:
    """XE, then the method's own stage from XE's best checkpoint with the recipe of its name."""
    return (XE, Stage(name, name, "xe"))


BENCH_ROWS: dict[str, BenchRow] = {
    "xe": BenchRow((XE,), "cross-entropy (teacher forcing)"),
    "scst": BenchRow(_after_xe("scst"), "self-critical sequence training (Rennie et al. 2017)"),
    "sll_me": BenchRow(_after_xe("sll_me"), "SCST with an entropy bonus ([Chen20 sec. 5.2])"),
    "sll_sle": BenchRow(_after_xe("sll_sle"), "SCST with sequence-level exploration ([Chen20])"),
    "ac": BenchRow(_AC, "actor-critic with a value network, CIDEr-D + embedding reward ([Shi18])"),
    "ac_lookahead": BenchRow(_AC, "the ac checkpoint decoded by lookahead inference, lambda chosen on validation "
                                  "([Shi18 Fig. 1])", decoder="lookahead"),
    "ac_att": BenchRow(_AC_ATT, "actor-critic whose value network also attends over the regions "
                                "(ac.value_features=att)"),
    "ac_att_lookahead": BenchRow(_AC_ATT, "the ac_att checkpoint decoded by lookahead inference", decoder="lookahead"),
    "pg_cider": BenchRow(_after_xe("pg_cider"), "PG with Monte-Carlo rollouts, CIDEr-D reward ([Liu17])"),
    "pg_bcmr": BenchRow(_after_xe("pg_bcmr"), "PG with Monte-Carlo rollouts, BCMR reward ([Liu17])"),
    "pg_spider": BenchRow(_after_xe("pg_spider"), "PG-SPIDEr: Monte-Carlo rollouts, SPIDEr ([Liu17])"),
    "mixer": BenchRow(_after_xe("mixer"), "MIXER: XE on a prefix annealed to 0 (Ranzato 2016, [Liu17])"),
    # GRPO ([Shao24]) with TRL's defaults, and the variants make bench-grpo sets beside SCST (docs/RL.md, "GRPO")
    "grpo": BenchRow(_after_xe("grpo"), "GRPO with TRL's defaults: group-normalised advantages, one update per "
                                        "batch, DAPO's word-level average ([Shao24], [Yu25])"),
    "grpo_clip": BenchRow((XE, Stage("grpo_clip", "grpo", "xe", (), ("grpo.iterations=2", "grpo.epsilon_high=0.28"))),
                          "GRPO, two clipped updates per sampled batch (epsilon 0.2, DAPO's clip-higher 0.28)"),
    "dr_grpo": BenchRow((XE, Stage("dr_grpo", "grpo", "xe", (), ("grpo.scale=none", "grpo.loss=dr_grpo"))),
                        "Dr. GRPO: advantages not divided by the group's std, a constant normaliser ([Liu25])"),
    "grpo_kl": BenchRow((XE, Stage("grpo_kl", "grpo", "xe", (), ("rl.kl_coef=0.04",))),
                        "GRPO with a KL term to the XE policy, beta 0.04 (k3, [Shao24 eq. 4])"),
    # [Xing26]'s QA utility beside CIDEr-D, make bench-rewards (docs/RL.md, "QA utility"; the rows in qa_rows.py)
    "scst_end": BenchRow(_after_xe("scst"), "the scst run judged at the end of its budget (its last checkpoint)",
                         checkpoint="last"),
    **QA_ROWS,
    # [Chaffin24]'s Table 1 (docs/DISTINCT.md); every one also trains the two retrievers that judge it
    "tf": BenchRow((RETRIEVAL, JUDGE, XE), "teacher forcing: the XE checkpoint, judged by the retrievers "
                                           "([Chaffin24] TF)"),
    # (at the end of the budget, as [Chaffin24 sec. 4.1] trains a fixed 5 epochs: a choice by validation CIDEr-D would
    # pick the least distinctive epoch)
    "wtf": BenchRow(_distinct("wtf"), "weighted teacher forcing, ground truth weighted by r ([Chaffin24])",
                    checkpoint="last"),
    "wtf_rl": BenchRow(_distinct("wtf_rl"), "WTF-RL: beam search and ground truth weighted by r, eq. 3 ([Chaffin24])",
                       checkpoint="last"),
    "beam_rl": BenchRow(_distinct("beam_rl"), "[Chaffin24]'s RL: beam-search trajectories only, bidirectional "
                                              "contrastive reward + discriminator", checkpoint="last"),
    "beam_rl_i2t": BenchRow(_distinct("beam_rl_i2t"), "[Chaffin24]'s RL-Unidirectional: beam_rl with the "
                                                      "image-to-text reward only", checkpoint="last"),
    "scst_discriminator": BenchRow(_distinct("scst_discriminator"), "SCST, CLIP-S + discriminator reward "
                                                                    "([Chaffin24])", checkpoint="last"),
    # not in [Chaffin24]: plain teacher forcing with those methods' budget, the control for "training on"
    # (docs/DISTINCT.md)
    "tf_continued": BenchRow((XE, RETRIEVAL, JUDGE, Stage("tf_continued", "tf_continued", "xe")),
                             "teacher forcing continued from TF with the [Chaffin24] methods' budget",
                             checkpoint="last"),
}

# [Wang18]'s Table 2 (docs/VIDEO.md): the attention baselines, and HRL with goals of 16, 32 or 64. [Chen20]'s
# Table 3 rows beside its SLL (scst here, [Wang18]'s RL-baseline), sll_me and sll_sle, are the BENCH_ROWS entries
# unchanged: the same XE stage, their moving-shapes recipes (configs/moving-shapes_sll_me.yaml,
# configs/moving-shapes_sll_sle.yaml)
CRITIC = Stage("critic", "critic")
VIDEO_ROWS: tuple[tuple[str, BenchRow], ...] = (
    ("scst", BenchRow(_after_xe("scst"), "[Wang18]'s RL-baseline: the attention model by SCST on CIDEr-D")),
    *((f"hrl_{g}", BenchRow((CRITIC, Stage(f"xe_hrl_{g}", f"xe_hrl_{g}", None, (("model.critic_from", "critic"),)),
                             Stage(f"hrl_{g}", "hrl", f"xe_hrl_{g}")),
                            f"HRL, goal size {g}: internal critic, XE warm start, alternating phases ([Wang18])"))
      for g in (16, 32, 64)),
)

BENCHMARKS: dict[str, Benchmark] = {
    "shapes": Benchmark(_prepare_shapes, "shapes", "synthetic coloured shapes (docs/SHAPES.md)",
                        check=_check_shapes),
    "shapes-hf": Benchmark(_prepare_shapes_hf, "shapes-hf", "synthetic coloured shapes, a small transformers (GIT) "
                           "captioner as the policy (docs/MODELS.md)", check=_check_shapes, policy=HF_CAPTIONER),
    "shapes-vlm": Benchmark(_prepare_shapes_vlm, "shapes-vlm", "synthetic coloured shapes, a small instruction "
                            "vision-language model (SmolVLM) as the policy (docs/MODELS.md)", check=_check_shapes,
                            policy=HF_CAPTIONER),
    "coco-concepts": Benchmark(_prepare_coco_concepts, "coco-concepts",
                               "COCO val2014 scenes as noisy concept regions, human captions (docs/CONCEPTS.md)",
                               sample_temperature=0.5),
    "moving-shapes": Benchmark(_prepare_moving_shapes, "moving-shapes",
                               "synthetic clips of moving shapes, events told in order (docs/VIDEO.md)", VIDEO_ROWS,
                               check=_check_moving_shapes),
    # any MSR-VTT-format dataset a user brings, with frame features; the moving-shapes recipes, its data overridden
    "video": Benchmark(_prepare_user_video, "moving-shapes", "a user's MSR-VTT-format videos (--data DIR)",
                       VIDEO_ROWS),
}


def bench_rows(benchmark: str) -> dict[str, BenchRow]:
    """The rows as ``benchmark`` means them: :data:`BENCH_ROWS` with the benchmark's own entries over them."""
    return {**BENCH_ROWS, **dict(BENCHMARKS[benchmark].rows)} if benchmark in BENCHMARKS else dict(BENCH_ROWS)


def check_names(benchmark: str, methods: list[str]) -> None:
    """One clear line for an unknown benchmark or method, listing the known ones."""
    if benchmark not in BENCHMARKS:
        raise ConfigError(f"unknown benchmark {benchmark!r}; expected one of {sorted(BENCHMARKS)}")
    known = bench_rows(benchmark)
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ConfigError(f"unknown method {unknown[0]!r}; expected some of {sorted(known)}")


def stages_of(methods: list[str], benchmark: str = "") -> list[Stage]:
    """Every stage the methods need, each once, in an order where a stage follows the one it starts from."""
    order: dict[str, Stage] = {}
    catalogue = bench_rows(benchmark)
    for method in methods:
        for stage in catalogue[method].stages:
            known = order.setdefault(stage.name, stage)
            if known != stage:
                raise ConfigError(f"two stages are named {stage.name!r} with different recipes: {known} and {stage}")
    for stage in order.values():
        if stage.init_from is not None and stage.init_from not in order:
            raise ConfigError(f"stage {stage.name!r} starts from {stage.init_from!r}, which no method trains")
        for name, source in stage.paths:
            if source not in order:
                raise ConfigError(f"stage {stage.name!r} loads {name!r} from {source!r}, which no method trains")
    return list(order.values())
