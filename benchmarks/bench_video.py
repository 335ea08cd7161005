"""[Wang18]'s Table 2 on moving shapes: XE- and RL-baselines, [Chen20]'s SLL-ME and SLL-SLE, and HRL with goals of 16, 32 and 64.

Run with ``make bench-video``: calls ``rlcap bench --benchmark moving-shapes --methods
xe,scst,sll_me,sll_sle,hrl_16,hrl_32,hrl_64``, copies the test-split table (BLEU-1..4, METEOR, ROUGE-L,
CIDEr-D, SPICE of the beam captions; CIDEr-D, Div-1, Div-2 and mBLEU-4 of 5 random samples and of the
5-best beam, as [Chen20]'s Table 4) into the bench-video section of docs/BENCHMARKS.md with the checks of rlcap's
goals, SLL-ME and SLL-SLE against the RL-baseline ([Chen20]'s SLL, Table 3), the internal critic's boundary
precision and recall on the validation captions, and, per model, a test clip's frames with its caption
cut where the critic ends segments (docs/figures/). ``--goals``
(``make bench-video GOALS=16``) trains fewer goal sizes, for a shorter run. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchdoc import REPO, machine, replace_section, run_bench

GOALS = (16, 32, 64)  # [Wang18]'s goal sizes
EXPLORATION = ("sll_me", "sll_sle")  # [Chen20]'s Table 3 rows beside its SLL, the RL-baseline (SCST, greedy baseline)
# [Chen20]'s Table 3 (TGIF, beam 5): SLL, SLL-ME, SLL-SLE
PAPER_TABLE3 = {"METEOR": (17.8, 18.2, 18.8), "CIDEr": (45.9, 48.1, 50.8), "SPICE": (15.9, 16.0, 16.6)}


def segment_figure(checkpoint, dataset: str, features: str, out, clip: int = 0) -> str:
    """Frames of test clip ``clip``, and the model's greedy caption cut where its critic ends a segment."""
    import torch
    from PIL import Image, ImageDraw

    from rlcap.data.loader import DataConfig, load_data
    from rlcap.data.readers import read_dataset
    from rlcap.data.vocab import EOS
    from rlcap.encoders.video import read_frames
    from rlcap.eval.open_run import open_run

    run = open_run(checkpoint, device="cpu")
    model, vocab = run.policy, run.vocab
    test = load_data(DataConfig(dataset=dataset, features=features), ("test",), vocab=vocab).splits["test"]
    feats = test.feats(torch.tensor([clip]))
    memory = model.encode(feats)
    state, word, words, cuts = model.init_state(memory), torch.tensor([1]), [], []
    with torch.no_grad():
        for _ in range(40):
            lp, state = model.step(memory, state, word)
            if hasattr(model, "segment_start") and bool(model.segment_start(state)[0]) and words:
                cuts.append(len(words))
            word = lp.argmax(1)
            if int(word) == EOS:
                break
            words.append(vocab.itos[int(word)])
    text = " | ".join(" ".join(words[a:b]) for a, b in zip([0, *cuts], [*cuts, len(words)]))
    record = next(r for r in read_dataset(dataset) if r.id == test.ids[clip])
    frames = read_frames(REPO / dataset.rsplit("/", 1)[0] / record.filename, n_frames=8)
    strip = Image.new("RGB", (8 * 96, 96 + 40), "white")
    for k, f in enumerate(frames):
        strip.paste(f.resize((96, 96)), (96 * k, 0))
    ImageDraw.Draw(strip).text((4, 100), text[:120], fill="black")
    ImageDraw.Draw(strip).text((4, 116), text[120:240], fill="black")
    strip.save(out)
    return text


def learning_rows(out: str, goals: list[int]) -> list[str]:
    """Per stage, from its log: the best validation CIDEr-D, and for the RL stages the mean CIDEr-D of
    the sampled training captions per epoch (HRL: its worker phases), to see where each gain comes from."""
    rows = ["| stage | best validation CIDEr-D | sampled captions' CIDEr-D by epoch |", "|---|---:|---|"]
    for stage in ["xe", "scst", *EXPLORATION, *(f"{kind}_{g}" for g in goals for kind in ("xe_hrl", "hrl"))]:
        records = [json.loads(x) for x in (REPO / out / stage / "log.jsonl").read_text().splitlines()]
        by_epoch: dict[int, list[float]] = {}
        for r in records:
            if r.get("split") == "train" and "reward" in r and r.get("phase", 1) == 1:
                by_epoch.setdefault(r["epoch"], []).append(r["reward"])
        rewards = ", ".join(f"{sum(v) / len(v):.2f}" for _, v in sorted(by_epoch.items())) or "-"
        rows.append(f"| {stage} | {max(r['CIDEr'] for r in records if 'CIDEr' in r):.3f} | {rewards} |")
    return rows


def exploration_lines(methods: dict) -> list[str]:
    """SLL-ME and SLL-SLE against the RL-baseline ([Chen20]'s SLL): Table 3's beam columns, and the rs / bs
    Div-2 of [Chen20]'s Table 4, each as a relative change, with [Chen20]'s own direction on TGIF."""
    scst = methods["scst"]
    lines = []
    for name in EXPLORATION:
        row = methods[name]
        beam = ", ".join(f"{c} **{row['beam'][c] / scst['beam'][c] - 1:+.1%}**" for c in PAPER_TABLE3)
        lines.append(f"- {name} over the RL-baseline ([Chen20]'s SLL): beam {beam}; rs Div-2 "
                     f"**{row['rs']['Div-2'] / scst['rs']['Div-2'] - 1:+.1%}**, bs Div-2 "
                     f"**{row['bs']['Div-2'] / scst['bs']['Div-2'] - 1:+.1%}**.")
    paper = "; ".join(f"{c} {' / '.join(f'{v:g}' for v in values)}" for c, values in PAPER_TABLE3.items())
    return [*lines, f"- [Chen20]'s Table 3 (TGIF, beam 5), SLL / SLL-ME / SLL-SLE: {paper}."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/bench_video", help="output folder of rlcap bench")
    parser.add_argument("--goals", default=",".join(map(str, GOALS)),
                        help="HRL goal sizes to train, the best on validation reported (default: [Wang18]'s 16,32,64)")
    args = parser.parse_args(argv)
    goals = [int(g) for g in args.goals.split(",")]
    if not goals or any(g not in GOALS for g in goals):
        parser.error(f"--goals: some of {GOALS}, got {args.goals}")
    methods = ",".join(["xe", "scst", *EXPLORATION, *(f"hrl_{g}" for g in goals)])
    command, seconds = run_bench("moving-shapes", methods, args.out)
    results = json.loads((REPO / args.out / "results.json").read_text())
    beam = {m: r["beam"] for m, r in results["methods"].items()}
    hrl = {g: beam[f"hrl_{g}"]["CIDEr"] for g in goals}
    val = {g: max(r["CIDEr"] for r in map(json.loads, (REPO / args.out / f"hrl_{g}" / "log.jsonl").read_text().splitlines())
                  if "CIDEr" in r) for g in goals}
    chosen = max(val, key=val.get)
    critic = [json.loads(x) for x in (REPO / args.out / "critic" / "log.jsonl").read_text().splitlines()]
    critic = max((r for r in critic if "F1" in r), key=lambda r: r["F1"])
    cfg = json.loads((REPO / args.out / "xe" / "config.json").read_text())["data"]
    figures = []
    (REPO / "docs" / "figures").mkdir(exist_ok=True)
    for method in ("xe", "scst", f"hrl_{chosen}"):
        stage = method
        png = REPO / "docs" / "figures" / f"video_{method}.png"
        text = segment_figure(REPO / args.out / stage / "best", cfg["dataset"], cfg["features"], png)
        figures.append(f"- {method}: ![{method}](figures/{png.name}) \"{text}\"")
    import torch

    from rlcap.bench.report import video_markdown

    body = "\n".join([
        "## Video: moving shapes (Table 2 layout of [Wang18])", "",
        f"Command: `make bench-video` (`{' '.join(command)}`), {seconds / 60:.0f} min. "
        f"Machine: {machine(torch=torch.__version__)}. Recipes: configs/moving-shapes_*.yaml (docs/VIDEO.md).", "",
        "Test split, 500 clips. The beam captions (beam size 3): pycocoevalcap metrics x 100. `rs`: 5 random samples "
        "per clip (temperature 1), CIDEr-D x 100 averaged over the 5; `bs`: the 5-best of a size-5 beam. Div-1/Div-2: "
        "distinct unigrams/bigrams over words among the 5 captions of a clip; mBLEU-4: each caption against the other "
        "4 (lower is more diverse), as [Chen20]'s Table 4.", "", video_markdown(results).strip(), "",
        f"- RL-baseline over XE-baseline, CIDEr-D: **{beam['scst']['CIDEr'] / beam['xe']['CIDEr'] - 1:+.1%}**.",
        *exploration_lines(results["methods"]),
        f"- HRL, goal size chosen on validation among {', '.join(map(str, goals))}"
        + ("" if len(goals) == len(GOALS) else f" (of [Wang18]'s {', '.join(map(str, GOALS))}: the others not trained in this run)")
        + f": {chosen} (validation CIDEr-D {val[chosen]:.3f}); test CIDEr-D "
        f"{hrl[chosen]:.3f} against the RL-baseline's {beam['scst']['CIDEr']:.3f} "
        f"(**{hrl[chosen] / beam['scst']['CIDEr'] - 1:+.1%}**; [Wang18]: 21.6 to 23.2 on Charades).",
        f"- Internal critic, segment ends on the validation captions (best epoch): precision "
        f"{critic['precision']:.3f}, recall {critic['recall']:.3f}, F1 {critic['F1']:.3f}.", "",
        "Where the gains come from (validation split; docs/VIDEO.md reads this table):", "",
        *learning_rows(args.out, goals), "",
        "A test clip (8 of its frames), each model's greedy caption, \"|\" where its critic ended a segment:", "",
        *figures,
    ])
    replace_section("bench-video", body)
    print(body)
    print(json.dumps({"scst_over_xe": beam["scst"]["CIDEr"] / beam["xe"]["CIDEr"] - 1, "hrl_goal": chosen,
                      **{f"{m}_over_scst": beam[m]["CIDEr"] / beam["scst"]["CIDEr"] - 1 for m in EXPLORATION},
                      "hrl_over_scst": hrl[chosen] / beam["scst"]["CIDEr"] - 1, "minutes": round(seconds / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
