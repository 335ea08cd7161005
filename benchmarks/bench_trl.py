"""GRPO by rlcap beside TRL's GRPOTrainer on the same vision-language model, pictures, references and reward.

    python benchmarks/bench_trl.py                     # make bench-trl (needs the trl extra: pip install -e ".[trl]")
    python benchmarks/bench_trl.py --steps 5 --size tiny --out /tmp/t --doc /tmp/t/B.md   # a quick try
    python benchmarks/bench_trl.py --betas 0.04 --keep   # only beta 0.04's rows; beta 0's kept as they are

1. Draws the shapes pictures (``--train-images``, 64 px), builds a Qwen2-VL folder with random weights and a
   tokenizer trained on their captions (``rlcap.models.hf.build_vlm.build_vlm``, ``--size``) and writes rlcap's
   store of its image tokens (``rlcap features --encoder hf:DIR``, timed: a one-off cost).
2. For each beta of ``--betas``: TRL's GRPOTrainer on the whole model (``trl``, as TRL sets up a VLM), the same
   with the model's picture side frozen (``trl_lm``: what rlcap trains), then rlcap's ``algorithm=grpo``
   (``model.arch=hf`` on the folder), each in a child process (``grpo_sides.py``) whose peak resident memory is
   read when it ends, with the same G, images a step, maximum length, beta, iterations, optimizer and reward
   (rlcap's CIDEr-D, handed to TRL as its reward function), one torch thread each (``--threads``), and the KL
   term as [Shao24 eq. 3] writes it on both (TRL's ``use_bias_correction_kl`` off; rlcap's ``grpo.kl_ratio``
   false).
3. Per side: samples/s of the whole step and its split (sampling, scoring, reward, backward), medians over the
   steps after the first; peak memory (RSS; GPU where CUDA is present, where both run on the GPU and the section
   is bench-trl-gpu); the mean reward over the steps and its standard error.

Goals on the CPU: rlcap at least 2x TRL's samples/s at both betas, at no more peak memory, with mean rewards
within the two runs' noise. Writes the bench-trl section of docs/BENCHMARKS.md (``--doc``) and prints a last
line of JSON. ``--render`` writes the section again from ``--out``'s results.json without measuring. ``--keep``
keeps the lines of the betas ``--betas`` leaves out from the section already in ``--doc``, as the run that
measured them wrote them, where that run's settings are this one's (but for those only a KL term reads, for
beta 0's rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchdoc import DOC, REPO, load_note, machine, replace_section
from grpo_sides import PHASES, SIDES, Settings

# why rlcap can take longer than TRL in a phase (printed only for a phase where its measured median is longer)
UNSEEN = ("Not analysed: in the runs this text was written against (docs/BENCHMARKS.md, 2026-11-28) rlcap was "
          "faster in this phase; profile both sides (python -m cProfile benchmarks/grpo_sides.py SIDE ...).")
WHY = {"sampling": UNSEEN, "scoring": UNSEEN, "backward": UNSEEN,
       "reward": "Both call the same CIDEr-D on the same number of captions (TRL through its reward function), so "
                 "a difference here is timing noise."}
CURVE = 10  # steps a point of the reward curve averages
FAMILY = "qwen2_vl"  # TRL's GRPOTrainer documents Qwen2-VL; rlcap's VLM policy takes it (docs/MODELS.md)
# --keep: the section's lines of the betas a run does not measure, as an earlier run wrote them
KEPT = "Kept (`--keep`) from an earlier run with the same settings, as it wrote them,"
TIME_HEAD, SLOWER_HEAD = "Where the time goes, a step:", "Where rlcap is slower than TRL in a phase:"
NOT_SLOWER = "- rlcap is not slower than TRL in any phase."
# the settings only a KL term reads: an earlier run's rows of beta 0 hold whatever it had them at
KL_ONLY = ("`use_bias_correction_kl",)


def prepare(out: Path, train_images: int, size: str, seed: int) -> tuple[Path, Path, Path, float]:
    """The pictures' caption file, the model folder and rlcap's store of its image tokens (each made once), and
    the seconds ``rlcap features`` took (0 when the store was there)."""
    from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes
    from rlcap.models.hf.build_vlm import build_vlm

    dataset = generate_shapes(ShapesConfig(n_train=train_images, n_val=8, n_test=0, image_size=64, workers=1),
                              out / "shapes")
    model = out / f"{FAMILY}_{size}"
    if not (model / "config.json").is_file():
        captions = [s["raw"] for im in json.loads(dataset.read_text())["images"] for s in im["sentences"]]
        build_vlm(FAMILY, model, captions, size=size, seed=seed)
    store, seconds = out / f"{FAMILY}_{size}.h5", 0.0
    if not store.is_file():
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "rlcap", "features", str(dataset.parent), "--dataset", str(dataset),
                        "--encoder", f"hf:{model}", "--out", str(store)], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
    return dataset, model, store, seconds


def run_side(side: str, settings: Settings, folder: Path) -> dict:
    """One side in a child process: its step records, its peak RSS (GB) and its peak GPU memory (GB, or None)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "settings.json").write_text(json.dumps(settings.__dict__))
    log, err = folder / f"{side}.jsonl", folder / f"{side}.stderr"
    argv = [sys.executable, str(REPO / "benchmarks" / "grpo_sides.py"), side, "--settings",
            str(folder / "settings.json"), "--log", str(log)]
    with open(err, "w") as stderr:
        proc = subprocess.Popen(argv, cwd=REPO / "benchmarks", stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own peak resident memory
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {err.read_text()[-3000:]}")
    *steps, end = [json.loads(line) for line in log.read_text().splitlines()]
    return {"steps": steps, "rss_gb": usage.ru_maxrss / 1024 ** 2, "gpu_gb": end["gpu_peak_gb"]}


def summary(run: dict, samples: int) -> dict:
    """Medians over the timed steps after the first (it loads and warms up): samples/s and each phase's seconds;
    the mean reward over every step and its standard error."""
    timed = [r for r in run["steps"][1:] if r["step_s"] is not None]
    if not timed:
        raise RuntimeError("bench_trl: no timed step after the first; run at least 3 steps (--steps)")
    rewards = [r["reward"] for r in run["steps"]]
    step_s = statistics.median(r["step_s"] for r in timed)
    return {"samples_per_s": samples / step_s, "step_s": step_s, "cpu_s": statistics.median(r["cpu_s"] for r in timed),
            **{f"{p}_s": statistics.median(r[f"{p}_s"] for r in timed) for p in PHASES},
            "reward": statistics.fmean(rewards),
            "reward_se": statistics.stdev(rewards) / math.sqrt(len(rewards)) if len(rewards) > 1 else float("nan"),
            "rss_gb": run["rss_gb"], "gpu_gb": run["gpu_gb"], "steps": len(rewards),
            "curve": [statistics.fmean(rewards[i:i + CURVE]) for i in range(0, len(rewards), CURVE)]}


def goals(trl: dict, rlcap: dict) -> dict:
    """Speed ratio, memory ratio, and the reward gap in units of the two means' combined standard error."""
    noise = math.hypot(trl["reward_se"], rlcap["reward_se"])
    return {"speedup": rlcap["samples_per_s"] / trl["samples_per_s"], "cpu_speedup": trl["cpu_s"] / rlcap["cpu_s"],
            "memory": rlcap["rss_gb"] / trl["rss_gb"],
            "reward_gap_se": abs(rlcap["reward"] - trl["reward"]) / noise if noise > 0 else float("inf")}


# TRL's GRPOConfig -> rlcap's key, as grpo_sides.trl_config and grpo_sides.rlcap_overrides set them
MATCHED = (("num_generations", "rl.n_samples", "g"),
           ("per_device_train_batch_size (completions)", "rl.batch_size (images) x rl.n_samples", None),
           ("gradient_accumulation_steps = 1", "one sampled batch a step", None),
           ("max_completion_length", "decode.max_len", "max_len"), ("beta", "rl.kl_coef", "beta"),
           ("num_iterations", "grpo.iterations", "iterations"), ("loss_type = dapo", "grpo.loss = dapo", None),
           ("scale_rewards = group", "grpo.scale = group", None),
           ("importance_sampling_level = token", "grpo.ratio = token", None),
           ("epsilon = 0.2", "grpo.epsilon = 0.2", None),
           ("mask_truncated_completions = false", "grpo.mask_truncated = false", None),
           ("use_bias_correction_kl = false (TRL's default: true)", "grpo.kl_ratio = false", None),
           ("temperature 1, top_p 1, top_k 0", "decode.temperature = 1 (sampling from the whole softmax)", None),
           ("learning_rate, constant schedule, no warm-up", "optim.lr, optim.lr_decay_every = 0", "lr"),
           ("optim = adamw_torch, weight_decay 0", "optim.name = adamw, optim.weight_decay = 0", None),
           ("max_grad_norm = 1.0", "optim.grad_clip = 1.0", None),
           ("bf16 = false, gradient_checkpointing = false (TRL's defaults: true)", "float32, rl.micro_batch = 0", None))


def settings_table(s: Settings, betas: list[float]) -> list[str]:
    values = {**dataclasses.asdict(s), "beta": ", ".join(f"{b:g}" for b in betas)}
    rows = ["| TRL GRPOConfig | rlcap | value |", "|---|---|---|"]
    for trl, ours, field in MATCHED:
        rows.append(f"| `{trl}` | `{ours}` | {values[field] if field else ''} |")
    return rows


def results_table(rows: dict[tuple[str, float], dict], cuda: bool) -> list[str]:
    head = ("| beta | side | samples/s | step s | CPU s a step | " + " | ".join(f"{p} s" for p in PHASES)
            + " | peak RSS GB |" + (" GPU peak GB |" if cuda else "") + " mean reward (+- s.e.) | by 10 steps |")
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for (side, beta), r in rows.items():
        out.append(f"| {beta:g} | {side} | {r['samples_per_s']:.1f} | {r['step_s']:.2f} | {r['cpu_s']:.2f} | "
                   + " | ".join(f"{r[f'{p}_s']:.2f}" for p in PHASES) + f" | {r['rss_gb']:.2f} |"
                   + (f" {r['gpu_gb']:.2f} |" if cuda else "") + f" {r['reward']:.4f} +- {r['reward_se']:.4f} | "
                   + ", ".join(f"{v:.3f}" for v in r["curve"]) + " |")
    return out


def verdict(met: bool, miss: str) -> str:
    return "met" if met else f"missed: {miss}"


def goal_lines(rows: dict[tuple[str, float], dict], betas: list[float]) -> list[str]:
    """A line a beta and TRL side: each goal with the figure that decides it."""
    out = []
    for beta in betas:
        for trl in (side for side in SIDES if side != "rlcap" and (side, beta) in rows):
            g = goals(rows[trl, beta], rows["rlcap", beta])
            speed = verdict(g["speedup"] >= 2, f"{1 - g['speedup'] / 2:.0%} short of 2x")
            memory = verdict(g["memory"] <= 1, f"{g['memory'] - 1:.0%} more")
            reward = verdict(g["reward_gap_se"] <= 2, "the curves differ")
            out.append(f"- beta {beta:g}, against {trl}: rlcap at **{g['speedup']:.2f}x** its samples/s (goal at "
                       f"least 2x: {speed}; **{g['cpu_speedup']:.2f}x** by CPU seconds a step); peak RSS "
                       f"**{g['memory']:.2f}x** its (goal at most 1x: {memory}); mean rewards "
                       f"**{g['reward_gap_se']:.1f}** standard errors apart (goal within 2: {reward}).")
    return out


def slower_phases(rows: dict[tuple[str, float], dict], betas: list[float]) -> list[str]:
    """Each phase where rlcap's median exceeds a TRL side's, with both figures and :data:`WHY`."""
    out = []
    for (trl, beta) in ((side, beta) for beta in betas for side in SIDES if side != "rlcap" and (side, beta) in rows):
        for p in PHASES:
            ours, theirs = rows["rlcap", beta][f"{p}_s"], rows[trl, beta][f"{p}_s"]
            if ours > theirs:
                out.append(f"- beta {beta:g}, {p}: rlcap {ours:.3f} s, {trl} {theirs:.3f} s. {WHY[p]}")
    return out or [NOT_SLOWER]


def time_lines(rows: dict[tuple[str, float], dict], betas: list[float], encode_s: float) -> list[str]:
    """A line a beta and TRL side: the seconds it spends in each phase beyond rlcap's; what freezing the picture's
    side saves TRL; and, where the store was written by this run, the run's steps with its encoding counted."""
    out = []
    for beta in betas:
        for trl in (side for side in SIDES if side != "rlcap" and (side, beta) in rows):
            more = ", ".join(f"{p} {rows[trl, beta][f'{p}_s'] - rows['rlcap', beta][f'{p}_s']:+.2f} s" for p in PHASES)
            extra = rows[trl, beta]["step_s"] - rows["rlcap", beta]["step_s"]
            out.append(f"- beta {beta:g}: {trl}'s step against rlcap's: {extra:+.2f} s ({more}).")
        if ("trl_lm", beta) in rows and ("trl", beta) in rows:
            saved = {p: rows["trl", beta][f"{p}_s"] - rows["trl_lm", beta][f"{p}_s"] for p in ("scoring", "backward")}
            out.append(f"- beta {beta:g}: trl against trl_lm (what training the tower costs TRL): backward "
                       f"{saved['backward']:+.2f} s, scoring {saved['scoring']:+.2f} s.")
        if encode_s:
            n = rows["rlcap", beta]["steps"]
            runs = ", ".join(f"{side} {rows[side, beta]['step_s'] * n:.0f} s" for side in SIDES if side != "rlcap")
            out.append(f"- beta {beta:g}, {n} steps at the median step: rlcap {rows['rlcap', beta]['step_s'] * n:.0f} "
                       f"s, {rows['rlcap', beta]['step_s'] * n + encode_s:.0f} s with the store's encoding counted "
                       f"({encode_s:.0f} s, once for every run on these pictures), {runs}.")
    return out


def run_sentence(s: Settings) -> str:
    """What a run measured with, in words: what ``--keep`` compares with the section it keeps rows from."""
    return (f"The model: a Qwen2-VL folder of `build_vlm`'s `{Path(s.model).name.removeprefix(FAMILY + '_')}` size "
            "(random weights, a wordpiece tokenizer trained on the pictures' captions), the same folder for both; "
            f"{s.steps} steps of {s.images} shapes pictures (64 px) x G = {s.g} samples, at most {s.max_len} tokens, "
            f"{s.iterations} update(s) a sampled batch, learning rate {s.lr:g}; the reward rlcap's CIDEr-D against "
            "the pictures' references (`eos_counts: false`, as the shapes recipes), handed to TRL as its reward "
            f"function; {s.threads} torch thread(s) a side")


def joined(betas: list[float]) -> str:
    return ", ".join(f"{b:g}" for b in betas)


def line_beta(line: str) -> float | None:
    """The beta a line of the section is about: a results row (``| 0.04 | trl | ...``) or a list item
    (``- beta 0.04, ...``, ``- beta 0: ...``); None for any other line."""
    if line.startswith("| "):
        head = line.removeprefix("| ").split(" |", 1)[0]
    elif line.startswith("- beta "):
        head = line.removeprefix("- beta ").replace(":", ",").split(",", 1)[0]
    else:
        return None
    try:
        return float(head)
    except ValueError:  # a row of another table, its header
        return None


def by_beta(measured: list[str], kept: list[dict], block: str) -> list[str]:
    """A block's lines of this run and the kept ones (:func:`keep_from`), in the order of their betas (a stable
    sort: each run's own order within a beta)."""
    return sorted([*measured, *(line for k in kept for line in k[block])], key=line_beta)


def command_lines(results: dict, betas: list[float]) -> list[str]:
    """The command, its minutes and machine; with kept rows, the betas it measured and each earlier run's line."""
    argv, kept = results["argv"], results.get("kept", [])
    command = "make bench-trl" if not argv else "python benchmarks/bench_trl.py " + " ".join(argv)
    measured = f", the rows of beta {joined(betas)}" if kept else ""
    out = [f"Command: `{command}`, {results['seconds'] / 60:.0f} min{measured}. Machine: {results['machine']}. "
           + ("" if results["gpu"] else load_note(tuple(results["load"])))]
    for k in kept:
        out += ["", f"{KEPT} the rows of beta {joined(k['betas'])}: {k['source']}"]
    return out


def section(results: dict) -> str:
    """The bench-trl section from a run's results (:func:`measure`), with the rows ``--keep`` kept."""
    rows = {(r["side"], r["beta"]): r for r in results["rows"]}
    s, encode_s, kept = Settings(**results["settings"]), results["encode_s"], results.get("kept", [])
    betas = sorted({beta for _, beta in rows})
    where = f"on the GPU ({results['gpu']})" if results["gpu"] else "on the CPU"
    n = rows["trl", betas[0]]["steps"]
    table = results_table(rows, bool(results["gpu"]))
    slower = [line for line in slower_phases(rows, betas) if line != NOT_SLOWER]
    slower = by_beta(slower, kept, "slower") or [NOT_SLOWER]
    return "\n".join([
        f"## GRPO by rlcap beside TRL's GRPOTrainer, {where}", "",
        *command_lines(results, betas), "",
        run_sentence(s) + " "
        "(on shared cores a second thread made every operation wait for its time slice: "
        "[notes/2026-11-28-bench-trl-threads.md](notes/2026-11-28-bench-trl-threads.md)). `trl` is GRPOTrainer "
        "as its documentation sets up a VLM: a conversational prompt and the picture in the dataset; it runs the "
        "vision tower on each completion's picture (and again in the "
        "reference model when beta > 0), preprocesses the pictures twice a step, and trains the tower with the "
        "rest. `trl_lm` is the same with the model's picture side frozen (`requires_grad` off outside "
        "`language_parameters`), so that it trains what rlcap trains. rlcap's policy (`model.arch: hf`) reads the "
        f"image tokens from the store `rlcap features --encoder hf:DIR` wrote once (" +
        (f"{encode_s:.0f} s for its {results['pictures']} pictures, not counted in the steps" if encode_s else
         "written by an earlier run") + "): its image side is frozen. So TRL's sampling runs the tower and the "
        "prompt's prefill for every completion (rlcap: the prefill once per picture, its cache repeated for the "
        "G samples); its scoring and backward passes run over prompt, image tokens and caption for every "
        "completion (rlcap's over the captions after the pictures' prefill). The reward goal asks for the same "
        "algorithm: `trl_lm` trains the same parameters as rlcap, and both weigh the KL term's k3 as [Shao24 eq. 3] "
        "writes it (`use_bias_correction_kl = false`; TRL's default multiplies it by the importance ratio, which "
        "changes its gradient: docs/RL.md, \"The KL term\"). Each side ran in its own process; the "
        "figures are medians over the steps after the first; samples/s are images x G over the whole step (start "
        "to start: loading, sampling, scoring, reward, loss, backward, optimizer step). The split: sampling (the "
        "tokens, no gradient), scoring (the log-probability passes: the policy's with gradient, the reference's; "
        "TRL's with the pictures' second preprocessing), reward, backward (the rest). Mean reward: over all "
        f"{n} steps, +- its standard error; by 10 steps: the curve, each point the mean of {CURVE} steps.", "",
        "The settings, by TRL's name and rlcap's key:", "",
        *settings_table(s, sorted({*betas, *(b for k in kept for b in k["betas"])})), "",
        *table[:2], *by_beta(table[2:], kept, "rows"), "",
        *by_beta(goal_lines(rows, betas), kept, "goals"), "",
        TIME_HEAD, "",
        *by_beta(time_lines(rows, betas, encode_s), kept, "times"), "",
        SLOWER_HEAD, "",
        *slower,
    ])


def section_lines(doc: Path, name: str) -> list[str]:
    """The lines between the section's markers in ``doc`` (none where it has no such section)."""
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    return text.split(start, 1)[1].split(end, 1)[0].splitlines() if start in text and end in text else []


def sources(lines: list[str], betas: list[float]) -> dict[float, str]:
    """Each beta's run, as the section names it: its Command line's (for the betas it measured), or a Kept line's."""
    out: dict[float, str] = {}
    for line in lines:
        if line.startswith(KEPT):
            head, source = line.removeprefix(KEPT + " the rows of beta ").split(": ", 1)
            out.update({float(b): source for b in head.split(", ")})
    main = next(line for line in lines if line.startswith("Command: "))
    command, rest = main.removeprefix("Command: ").split(". Machine: ", 1)
    command, _, own = command.partition(", the rows of beta ")
    source = f"command {command}. Machine: {rest}"
    mine = [float(b) for b in own.split(", ")] if own else [b for b in betas if b not in out]
    return {**out, **dict.fromkeys(mine, source)}


def setting_differences(lines: list[str], s: Settings, betas: list[float]) -> list[str]:
    """What the earlier run's settings (its settings table and run sentence) have that this run's have not, and the
    reverse, leaving out the beta row, and the rows only a KL term reads when every kept beta is 0."""
    def table(rows: list[str]) -> set[str]:
        return {row for row in rows if row.startswith("| `") and not row.startswith("| `beta`")}

    old, new = table(lines), table(settings_table(s, []))
    ignored = KL_ONLY if not any(betas) else ()
    changed = [row for row in sorted(old ^ new) if not row.removeprefix("| ").startswith(ignored)]
    if not any(line.startswith(run_sentence(s) + " ") for line in lines):
        changed.append(run_sentence(s))
    return changed


def keep_from(doc: Path, name: str, s: Settings, betas: list[float]) -> list[dict]:
    """The lines of ``doc``'s section for the betas it holds and this run does not measure, grouped by the run that
    measured them (its source line); refused (one line) where that run's settings are not this run's."""
    lines = section_lines(doc, name)
    keep = sorted({line_beta(line) for line in lines if line.startswith("| ")} - {None, *betas})
    if not keep:
        return []
    changed = setting_differences(lines, s, keep)
    if changed:
        raise RuntimeError(f"bench_trl --keep: the rows of beta {joined(keep)} in {doc} were measured with other "
                           f"settings ({'; '.join(changed)}): run every beta again (--betas)")
    time_at, slower_at = lines.index(TIME_HEAD), lines.index(SLOWER_HEAD)
    blocks = {"rows": [line for line in lines[:time_at] if line.startswith("| ")],
              "goals": [line for line in lines[:time_at] if line.startswith("- ")],
              "times": lines[time_at:slower_at], "slower": lines[slower_at:]}
    by_source: dict[str, list[float]] = {}
    for beta, source in sources(lines, keep).items():
        if beta in keep:
            by_source.setdefault(source, []).append(beta)
    return [{"betas": sorted(kept), "source": source,
             **{block: [line for line in text if line_beta(line) in kept] for block, text in blocks.items()}}
            for source, kept in by_source.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="sampled batches a run (the reward's mean is over them)")
    parser.add_argument("--images", type=int, default=4, help="images a step")
    parser.add_argument("--g", type=int, default=8, help="samples an image (TRL's num_generations, its default 8)")
    parser.add_argument("--max-len", type=int, default=16, help="most tokens a caption")
    parser.add_argument("--betas", default="0,0.04", help="KL weights, comma-separated")
    parser.add_argument("--iterations", type=int, default=1, help="updates a sampled batch")
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate of both")
    parser.add_argument("--size", default="small", help="build_vlm's size: tiny or small")
    parser.add_argument("--train-images", type=int, default=0,
                        help="training pictures (0: one more step's worth than --steps x --images)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of each side (1: on shared cores, a second thread makes every operation "
                             "wait for its time slice)")
    parser.add_argument("--out", default="runs/bench_trl", help="working folder")
    parser.add_argument("--doc", default=str(DOC), help="the Markdown file the section goes to")
    parser.add_argument("--render", action="store_true", help="write the section again from --out's results.json")
    parser.add_argument("--keep", action="store_true",
                        help="keep the rows of the betas --betas leaves out from the section already in --doc, as "
                             "the run that measured them wrote them (refused where its settings differ)")
    args = parser.parse_args(argv)
    out = (REPO / args.out).resolve()
    if not args.render:
        kept = keep_from(Path(args.doc), section_name(), args_settings(args, Path()), betas_of(args)) if args.keep \
            else []
        results = {**measure(args, out, sys.argv[1:] if argv is None else argv), "kept": kept}
        (out / "results.json").write_text(json.dumps(results, indent=1))
    results = json.loads((out / "results.json").read_text())
    body = section(results)
    replace_section(section_name(bool(results["gpu"])), body, Path(args.doc))
    print(body)
    print(json.dumps({f"{r['side']}@{r['beta']:g}": r for r in results["rows"]}))
    return 0


def betas_of(args: argparse.Namespace) -> list[float]:
    return [float(b) for b in args.betas.split(",")]


def args_settings(args: argparse.Namespace, model: Path, dataset: Path = Path(), store: Path = Path()) -> Settings:
    """The settings of the command line (beta 0: each run sets its own); ``model``: the folder, or a path
    with no folder for the settings alone (``--keep``'s comparison, before anything is built)."""
    model = model if model.name else Path(f"{FAMILY}_{args.size}")
    return Settings(model=str(model), dataset=str(dataset), store=str(store), out="", steps=args.steps,
                    images=args.images, g=args.g, max_len=args.max_len, iterations=args.iterations, lr=args.lr,
                    threads=args.threads)


def section_name(gpu: bool | None = None) -> str:
    """The section a run writes: bench-trl-gpu where both sides run on the GPU (``gpu`` None: this machine's)."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    return "bench-trl-gpu" if gpu else "bench-trl"


def measure(args: argparse.Namespace, out: Path, argv: list[str]) -> dict:
    """Both sides at each beta; what :func:`section` writes from, with the command, machine and load."""
    import torch
    import transformers
    import trl

    cuda, load = torch.cuda.is_available(), [os.getloadavg()[0]]
    pictures = args.train_images or (args.steps + 1) * args.images
    dataset, model, store, encode_s = prepare(out, pictures, args.size, 0)
    rows, started = [], time.perf_counter()
    for beta in betas_of(args):
        s = dataclasses.replace(args_settings(args, model, dataset, store), out=str(out / f"beta{beta:g}"), beta=beta)
        for side in SIDES:
            rows.append({"side": side, "beta": beta, **summary(run_side(side, s, Path(s.out)), args.images * args.g)})
            (out / "rows.json").write_text(json.dumps(rows, indent=1))  # what is measured so far
    load.append(os.getloadavg()[0])
    said = [a for i, a in enumerate(argv) if a not in ("--render", "--doc") and argv[i - 1:i] != ["--doc"]]
    # argv: what measured (the doc the section goes to is not part of it)
    return {"argv": said, "settings": s.__dict__, "rows": rows, "encode_s": encode_s, "pictures": pictures + 8,
            "seconds": time.perf_counter() - started, "load": load,
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "machine": machine(torch=torch.__version__, transformers=transformers.__version__, trl=trl.__version__)}


if __name__ == "__main__":
    sys.exit(main())
