"""[Chaffin24]'s Table 1 on a benchmark: TF, WTF, WTF-RL, RL, RL-Unidirectional, SCST-Discriminator.

Run with ``make bench-distinct`` (shapes, then COCO concepts with a training-image budget): calls
``rlcap bench --benchmark NAME --methods tf,wtf,wtf_rl,beam_rl,beam_rl_i2t,scst_discriminator``,
copies its Table 1 into the benchmark's section of docs/BENCHMARKS.md with the checks of rlcap's goals
for, and shows the reward-hacking check: the WTF-RL captions the training retriever ranks highest
against their image while the independent judge ranks them lowest. Prints a last line of JSON.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchdoc import REPO, machine, replace_section, run_bench

# [Chaffin24]'s Table 1, then rlcap's control: teacher forcing continued with the methods' budget (not in [Chaffin24])
METHODS = "tf,wtf,wtf_rl,beam_rl,beam_rl_i2t,scst_discriminator,tf_continued"


def hacking_examples(out: str, benchmark_data: list[str], shown: int = 5) -> list[str]:
    """WTF-RL test captions with the largest gap between the training retriever's and the judge's
    rank of their own image (caption -> image): where the reward may have been gamed."""
    import torch

    from rlcap.bench.distinct import image_embeddings
    from rlcap.data.loader import load_data
    from rlcap.metrics.retrieval import expected_ranks
    from rlcap.models.retriever import load_retriever
    from rlcap.methods import load_run_config
    from rlcap.decoding.options import Decoding
    from rlcap.decoding.split import decode_split
    from rlcap.eval.open_run import open_run

    run = open_run(REPO / out / "wtf_rl" / "last", device="cpu")  # the checkpoint the table judges
    model, vocab = run.policy, run.vocab
    test = load_data(load_run_config(None, benchmark_data).data, ("test",), vocab=vocab).splits["test"]
    predictions = decode_split(model, test, vocab, Decoding.search(run.device, 3, 16))
    captions = [predictions[i] for i in test.ids]
    ranks = {}
    for name in ("retrieval", "judge"):
        retriever = load_retriever(REPO / out / name / "best")
        sim = image_embeddings(retriever, test, None) @ retriever.embed_captions(captions).T  # (I images, I captions)
        ranks[name] = torch.as_tensor(expected_ranks(sim.numpy())["t2i"])  # of the caption's own image, ties shared
    gap = ranks["judge"] - ranks["retrieval"]
    lines = ["| caption (WTF-RL, beam 3) | rank of its image, training retriever | rank, judge | a reference |",
             "|---|---:|---:|---|"]
    for k in torch.argsort(gap, descending=True)[:shown].tolist():
        lines.append(f"| {captions[k]} | {float(ranks['retrieval'][k]):g} | {float(ranks['judge'][k]):g} | "
                     f"{test.refs[k][0]} |")
    return lines


def human_row(out: str, benchmark_data: list[str]) -> dict[str, float]:
    """The scale of the R@k columns: each test image's first human reference caption (not a method),
    retrieved as the methods' captions are, by both retrievers, with its Self-BLEU."""
    from rlcap.bench.distinct import distinct_row, load_judges
    from rlcap.data.loader import load_data
    from rlcap.eval.open_run import open_run
    from rlcap.methods import load_run_config

    vocab = open_run(REPO / out / "xe" / "best", device="cpu").vocab
    test = load_data(load_run_config(None, benchmark_data).data, ("test",), vocab=vocab).splits["test"]
    judges = load_judges({name: REPO / out / name / "best" for name in ("retrieval", "judge")}, test)
    return distinct_row({i: refs[0] for i, refs in zip(test.ids, test.refs)}, test, judges)


def human_line(row: dict[str, float]) -> str:
    return ("- Human captions (each test image's first reference, not a method; the scale of the R@k columns): "
            f"T2I R@1 {row['T2I R@1']:.1f}, I2T R@1 {row['I2T R@1']:.1f} (judge {row['judge T2I R@1']:.1f}, "
            f"{row['judge I2T R@1']:.1f}), Self-BLEU {row['Self-BLEU']:.1f}.")


def distinct_table(path) -> str:
    """The Table 1 part of rlcap bench's results.md."""
    text = path.read_text()
    return text[text.index("| method | T2I"):].strip() if "| method | T2I" in text else "(no Table 1: no retriever stage)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="shapes", choices=("shapes", "coco-concepts"))
    parser.add_argument("--out", default=None, help="output folder of rlcap bench (default runs/distinct_BENCHMARK)")
    parser.add_argument("--max-train-images", type=int, default=0, help="train on the first N training images (0: all)")
    parser.add_argument("--rl", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides of every stage that is not XE, e.g. threads=1 when another job shares the cores")
    parser.add_argument("--human", action="store_true",
                        help="only print the human-caption row of a finished bench folder (--out), training nothing")
    args = parser.parse_args(argv)
    args.out = args.out or f"runs/distinct_{args.benchmark}"
    if args.human:
        cfg = json.loads((REPO / args.out / "xe" / "config.json").read_text())
        row = human_row(args.out, [f"data.{k}={cfg['data'][k]}" for k in ("dataset", "features")])
        print(human_line(row))
        print(json.dumps({k: round(v, 2) for k, v in row.items()}))
        return 0
    command, seconds = run_bench(args.benchmark, METHODS, args.out, args.max_train_images, args.rl)
    results = json.loads((REPO / args.out / "results.json").read_text())
    m = {name: row["distinct"] | {"CIDEr": row["beam"]["CIDEr"]} for name, row in results["methods"].items()}
    gain = lambda a, b, col: m[a][col] / m[b][col] - 1 if m[b][col] else float("inf")  # noqa: E731
    checks = {
        "wtf_rl_t2i_r1": gain("wtf_rl", "tf", "T2I R@1"), "wtf_rl_i2t_r1": gain("wtf_rl", "tf", "I2T R@1"),
        "wtf_rl_judge_t2i_r1": gain("wtf_rl", "tf", "judge T2I R@1"),
        "wtf_rl_judge_i2t_r1": gain("wtf_rl", "tf", "judge I2T R@1"),
        "wtf_rl_self_bleu": m["wtf_rl"]["Self-BLEU"] - m["tf"]["Self-BLEU"],
        "wtf_t2i_r1": gain("wtf", "tf", "T2I R@1"), "wtf_cider": gain("wtf", "tf", "CIDEr"),
        "i2t_minus_bicont_t2i_r1": m["beam_rl_i2t"]["T2I R@1"] - m["beam_rl"]["T2I R@1"],
        "tf_continued_t2i_r1": gain("tf_continued", "tf", "T2I R@1"),
        "tf_continued_i2t_r1": gain("tf_continued", "tf", "I2T R@1"),
        "tf_continued_judge_i2t_r1": gain("tf_continued", "tf", "judge I2T R@1"),
        "tf_continued_cider": gain("tf_continued", "tf", "CIDEr"),
    }
    cfg = json.loads((REPO / args.out / "wtf_rl" / "config.json").read_text())
    data = [f"data.{k}={cfg['data'][k]}" for k in ("dataset", "features")]
    import torch

    budget = (f" Training images: the first {args.max_train_images:,} of the training split." if args.max_train_images
              else "")
    body = "\n".join([
        f"## Distinctive captioning on {args.benchmark} (Table 1 layout of [Chaffin24])", "",
        f"Command: `make bench-distinct` (`{' '.join(command)}`), {seconds / 60:.0f} min in this run (stages already "
        "trained by an earlier run of the same folder are reused). "
        f"Machine: {machine(torch=torch.__version__)}.{budget} Every method starts from the same XE checkpoint "
        f"(TF) with the same budget, {cfg['rl']['epochs']} epochs of {cfg['rl']['batch_size']} images, and is judged at "
        f"its end (the run's last checkpoint; TF: the XE run's best), "
        f"lr {cfg['optim']['lr']}, alpha {cfg['wtf_rl']['alpha']} (docs/DISTINCT.md).", "",
        "R@k: the test images retrieved with one generated caption each (T2I) and the generated captions "
        "retrieved with each image (I2T), by the training retriever (the reward's) and by the judge (another "
        "seed, the other half of the training captions; never a reward). Quality: pycocoevalcap metrics x 100.", "",
        distinct_table(REPO / args.out / "results.md"), "",
        f"- WTF-RL over TF, R@1: T2I **{checks['wtf_rl_t2i_r1']:+.0%}**, I2T **{checks['wtf_rl_i2t_r1']:+.0%}** "
        f"(training retriever); T2I **{checks['wtf_rl_judge_t2i_r1']:+.0%}**, I2T **{checks['wtf_rl_judge_i2t_r1']:+.0%}** "
        f"(judge); goal at least +30% each. Self-BLEU {checks['wtf_rl_self_bleu']:+.1f} (goal: lower than TF).",
        f"- WTF over TF: T2I R@1 **{checks['wtf_t2i_r1']:+.0%}**, CIDEr-D **{checks['wtf_cider']:+.1%}** "
        "(goal: R@1 up, CIDEr-D no more than 2% lower).",
        f"- RL-Unidirectional minus RL, T2I R@1: **{checks['i2t_minus_bicont_t2i_r1']:+.1f}** ([Chaffin24]: lower).",
        f"- TF continued (the control, not in [Chaffin24]: teacher forcing with the same budget) over TF: R@1 T2I "
        f"{checks['tf_continued_t2i_r1']:+.0%}, I2T {checks['tf_continued_i2t_r1']:+.0%} (judge I2T "
        f"{checks['tf_continued_judge_i2t_r1']:+.0%}), CIDEr-D {checks['tf_continued_cider']:+.1%}: what training on "
        "gives without the reward.",
        human_line(human_row(args.out, data)), "",
        "Reward hacking check: the WTF-RL captions whose image the training retriever ranks much higher than "
        "the judge does.", "", *hacking_examples(args.out, data),
    ])
    replace_section(f"bench-distinct-{args.benchmark}", body)
    print(body)
    print(json.dumps({k: round(v, 4) for k, v in checks.items()} | {"minutes": round(seconds / 60, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
