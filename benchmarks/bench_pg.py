"""One PG-SPIDEr update (K = 3 Monte-Carlo rollouts per word) next to one SCST step; rollout vs
greedy decoding throughput; reward time with and without the dedupe of (caption, image) pairs.

Run with ``make bench-pg``. UpDown at the usual size (hidden 512, 2048-d features, 36 regions),
a 2,107-word vocabulary from real COCO captions (../shared/data/coco), real references for the
rewards, random features; 50 images, max_len 16, one process, 1 torch thread. Two policies:

* ``random``: random weights. Near-uniform over 2,107 words (entropy about 7.6 nats), so no
  caption ends early and no two rollouts agree: the dedupe has nothing to merge (its worst case).
* ``peaked``: the same weights with the output layer scaled by 100 and the EOS logit raised until
  sampled captions (with dropout, as training samples) average at most 9 words: about 2 nats per
  word, closer to a trained captioner, so rollouts repeat as they do in training. Synthetic: it
  stands in for a trained model's entropy and lengths only.

Each policy gets a fresh session (same seed), and the timed updates run at a learning rate of 1e-9
(Adam's arithmetic unchanged), so every figure of a policy is measured on that same policy.

Writes the bench-pg section of docs/BENCHMARKS.md and prints a last line of JSON.
"""

from __future__ import annotations

import os

# The machine is shared: passive OpenMP waiting (set before torch loads libgomp), see bench_decode.py.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from benchdoc import REPO, load_note, machine, replace_section  # noqa: E402

from rlcap.data.feats import Feats  # noqa: E402
from rlcap.data.loader import Batch, CaptionData  # noqa: E402
from rlcap.data.vocab import EOS, Vocab  # noqa: E402
from rlcap.decoding import Decoding, greedy, prefix_rollouts, sample  # noqa: E402
from rlcap.metrics import tokenize  # noqa: E402
from rlcap.models import build_model  # noqa: E402
from rlcap.models.baseline_mlp import BaselineMLP  # noqa: E402
from rlcap.rewards import RewardBatch, RewardConfig, build_reward  # noqa: E402
from rlcap.methods import pg  # noqa: E402
from rlcap.methods import load_run_config  # noqa: E402
from rlcap.methods.learned_baseline import BASELINE  # noqa: E402
from rlcap.methods.samples import caption_lengths  # noqa: E402
from rlcap.methods.scst import scst_step  # noqa: E402
from rlcap.train.session import Progress, Session, add_part  # noqa: E402
from rlcap.rewards.unique import score_unique  # noqa: E402

COCO = REPO / ".." / "shared" / "data" / "coco" / "human_agreement_5k.json"
IMAGES, K, MAX_LEN, REGIONS = 50, 3, 16, 36
PEAKED_SCALE, PEAKED_WORDS = 100.0, 9.0  # output-layer scale; mean caption length to reach


def coco() -> tuple[dict[str, list[str]], Vocab]:
    items = json.loads(COCO.read_text())
    refs = {str(x["image_id"]): x["references"] for x in items}
    counts: dict[str, int] = {}
    for caps in refs.values():
        for c in caps:
            for w in tokenize(c):
                counts[w] = counts.get(w, 0) + 1
    return refs, Vocab(["<pad>", "<bos>", "<eos>", "<unk>", *sorted(counts, key=lambda w: -counts[w])[:2103]])


SHARED = ["model.arch=updown", "model.dropout=0.5", "rl.n_samples=5", "optim.lr=0.000000001",
          f"rl.batch_size={IMAGES}", f"decode.max_len={MAX_LEN}", "track.to=[]"]


def session(vocab: Vocab) -> Session:
    cfg = load_run_config(None, ["algorithm=pg", *SHARED, "rl.n_samples=1", f"pg.rollouts={K}"])  # M = 1
    s = Session(cfg, CaptionData(vocab, {}), {}, Progress(), Path("."))
    add_part(s, "policy", build_model(cfg.model, len(vocab), 2048, 2048), cfg.optim)
    add_part(s, BASELINE, BaselineMLP(cfg.model.hidden_dim, cfg.pg.baseline_hidden),
             replace(cfg.optim, lr=cfg.pg.baseline_lr))
    return s


def make_batch(ids: list[str], refs: dict[str, list[str]], gen: torch.Generator) -> Batch:
    feats = Feats(torch.randn(IMAGES, 2048, generator=gen).relu(),
                  torch.randn(IMAGES, REGIONS, 2048, generator=gen).relu(),
                  torch.ones(IMAGES, REGIONS, dtype=torch.bool))
    return Batch(torch.arange(IMAGES), ids, feats, torch.empty(0, 0), [refs[i] for i in ids])


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


@torch.no_grad()
def peak(model: torch.nn.Module, feats: Feats) -> float:
    """Sharpen the policy: the output layer x PEAKED_SCALE, then the EOS logit raised in steps of 0.5
    until sampled captions average at most PEAKED_WORDS words; returns that EOS offset."""
    model.logit.weight.mul_(PEAKED_SCALE)
    model.logit.bias.mul_(PEAKED_SCALE)
    base, offset = float(model.logit.bias[EOS]), 0.0
    model.train()
    while offset < 60:
        model.logit.bias[EOS] = base + offset
        if float(caption_lengths(sample(model, feats, 1, Decoding("sample", MAX_LEN)).tokens).mean()) <= PEAKED_WORDS:
            break
        offset += 0.5
    return offset


def updates(s: Session, batch: Batch, reward, steps: int) -> dict:
    """Median wall time of one PG update and one SCST step (after a warm-up each), with PG's split."""
    s.model.train()
    # SCST's step reads its own section: the same parts under an SCST config (a run's config holds its method's)
    scst = replace(s, cfg=load_run_config(None, ["algorithm=scst", *SHARED, "scst.baseline=greedy"]))
    pg_runs, scst_runs = [], []
    for i in range(steps + 1):
        stats, wall, cpu = timed(lambda: pg.pg_step(s, batch, reward))
        if i:
            pg_runs.append((wall, cpu, stats))
        _, wall, cpu = timed(lambda: scst_step(scst, batch, reward))
        if i:
            scst_runs.append((wall, cpu))
    pg_runs.sort(key=lambda r: r[0])
    wall, cpu, st = pg_runs[len(pg_runs) // 2]
    scst_wall, scst_cpu = sorted(scst_runs)[len(scst_runs) // 2]
    parts = {key: st[key] for key in ("sample_s", "rollout_s", "reward_s", "backward_s")}
    return {"pg_s": wall, "pg_cpu_s": cpu, **parts, "scst_s": scst_wall, "scst_cpu_s": scst_cpu,
            "entropy": float(st["entropy"]), "length": float(st["length"]), "scored": st["scored"]}


@torch.no_grad()
def throughput(s: Session, batch: Batch, repeats: int) -> dict:
    """Sampled words per second of the rollouts vs greedy decoding, eval mode, median of ``repeats``."""
    model = s.model.eval()
    out = sample(model, batch.feats, 1, Decoding("sample", MAX_LEN))
    rolls, _, _ = timed(lambda: prefix_rollouts(model, batch.feats, out.tokens, K, Decoding("sample", MAX_LEN)))
    prefix_len = torch.arange(1, out.tokens.size(1) + 1).repeat_interleave(K).repeat(IMAGES)  # (R,)
    positions = torch.arange(rolls.tokens.size(1))
    words = int((rolls.mask & (positions[None, :] >= prefix_len[:, None])).sum())  # sampled, not forced
    rolling = Decoding("sample", MAX_LEN)
    roll_t = sorted(timed(lambda: prefix_rollouts(model, batch.feats, out.tokens, K, rolling))[1:]
                    for _ in range(repeats))[repeats // 2]
    g = greedy(model, batch.feats, MAX_LEN)
    greedy_t = sorted(timed(lambda: greedy(model, batch.feats, MAX_LEN))[1:] for _ in range(repeats))[repeats // 2]
    greedy_words = int(g.mask.sum())
    model.train()
    return {"rollout_rows": rolls.tokens.size(0), "rollout_words": words, "rollout_s": roll_t[0],
            "rollout_words_per_s": words / roll_t[0], "rollout_words_per_cpu_s": words / roll_t[1],
            "greedy_words": greedy_words, "greedy_s": greedy_t[0], "greedy_words_per_s": greedy_words / greedy_t[0],
            "greedy_words_per_cpu_s": greedy_words / greedy_t[1]}


def clear_caches(reward) -> None:
    """Forget what SPICE has parsed and scored (private caches: a benchmark's reach, to time it cold)."""
    from rlcap.metrics.spice.parser import default_parser

    for part in reward.rewards.values():
        spice = getattr(part, "spice", None)
        if spice is not None:
            spice.scorer._scores.clear()
            spice.scorer._graphs.clear()
    default_parser()._cache.clear()


def reward_times(s: Session, batch: Batch, rewards: dict) -> dict:
    """Seconds to score one PG update's captions: every rollout row, only the rows Q needs, and
    those deduplicated (what the loop does); SPICE's caches cleared before each."""
    with torch.no_grad():
        out = sample(s.model, batch.feats, 1, Decoding("sample", MAX_LEN))
        rolls = prefix_rollouts(s.model, batch.feats, out.tokens, K, Decoding("sample", MAX_LEN))
    vocab, t = s.data.vocab, out.tokens.size(1)
    feats, context = pg.sample_context(batch, 1)
    owner = torch.arange(IMAGES).repeat_interleave(t * K)
    every = [vocab.decode(r.tolist()) for r in rolls.tokens] + [vocab.decode(r.tolist()) for r in out.tokens]
    every_owner = torch.cat([owner, torch.arange(IMAGES)]).tolist()
    need = pg.needed_rollouts(out.mask)[:, :, None].expand(IMAGES, t, K).reshape(-1).nonzero().squeeze(1).tolist()
    needed = [every[i] for i in need] + every[-IMAGES:]
    needed_owner = [every_owner[i] for i in need] + every_owner[-IMAGES:]

    def batch_of(owners):
        return RewardBatch([batch.ids[i] for i in owners], [batch.refs[i] for i in owners], batch.feats,
                           torch.tensor(owners))

    row = {"rows": len(every), "needed": len(needed)}
    for name, reward in rewards.items():
        clear_caches(reward)
        _, row[f"{name}_all_s"], _ = timed(lambda: reward(every, batch_of(every_owner)))
        clear_caches(reward)
        _, row[f"{name}_needed_s"], _ = timed(lambda: reward(needed, batch_of(needed_owner)))
        clear_caches(reward)
        scored = score_unique(reward, needed, batch_of(needed_owner))
        row[f"{name}_unique_s"], row["unique"] = scored.seconds, scored.unique
        _, row[f"{name}_warm_s"], _ = timed(lambda: reward(needed, batch_of(needed_owner)))
    return row


def _span(values: list[float], fmt: str) -> str:
    """``values``' range in ``fmt`` (one figure when both ends print alike): 1.4-1.9, 38-50%."""
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low.rstrip('%')}-{high}"


def reading(results: dict) -> str:
    """What the tables say, computed from their figures (over the policies measured)."""
    u = [r["updates"] for r in results.values()]
    w = [r["rewards"] for r in results.values()]
    d = [r["throughput"] for r in results.values()]
    rollout_share = [x["rollout_s"] / x["pg_s"] for x in u]
    cider_share = [x["cider_d_unique_s"] / y["pg_s"] for x, y in zip(w, u)]
    spider_vs_rollouts = [x["spider_unique_s"] / y["rollout_s"] for x, y in zip(w, u)]
    bcmr_vs_rollouts = [x["bcmr_unique_s"] / y["rollout_s"] for x, y in zip(w, u)]
    needed = [x["needed"] / x["rows"] for x in w]
    unique = [x["unique"] / x["needed"] for x in w]
    warm = [x["spider_warm_s"] / x["spider_unique_s"] for x in w]
    words = [x["rollout_words_per_cpu_s"] / x["greedy_words_per_cpu_s"] for x in d]
    return ("Reading (computed from the figures above, over the policies measured): a PG update costs "
            f"{_span([x['pg_s'] / x['scst_s'] for x in u], '.1f')}x an SCST step, and its rollouts take "
            f"{_span(rollout_share, '.0%')} of it; a rollout word costs {_span(words, '.2f')}x the CPU time of a "
            f"greedy word. CIDEr-D takes {_span(cider_share, '.1%')} of an update; SPIDEr's scoring takes "
            f"{_span(spider_vs_rollouts, '.0%')} of the rollouts' time and BCMR's {_span(bcmr_vs_rollouts, '.0%')}. "
            f"The rows Q needs are {_span(needed, '.0%')} of all rollout rows, the unique (caption, image) pairs "
            f"{_span(unique, '.0%')} of those, and SPIDEr on captions seen before costs "
            f"{_span(warm, '.0%')} of its first scoring.")


def markdown(results: dict, load: tuple[float, float]) -> str:
    offset = results["peaked"]["eos_offset"]
    lines = ["## PG-SPIDEr: one update with Monte-Carlo rollouts (K = 3) next to one SCST step", "",
             f"Command: `make bench-pg`. Machine: {machine(torch=torch.__version__)}; 1 torch thread, "
             f"OMP_WAIT_POLICY=PASSIVE. {load_note(load)} CPU-time rates are given beside the wall-clock ones.", "",
             f"UpDown (hidden 512, 2048-d features, 36 regions, vocabulary 2,107 from COCO captions), {IMAGES} images, "
             f"max_len {MAX_LEN}, CIDEr-D reward against real COCO references, random features. PG: M = 1 sample "
             f"per image, K = {K} rollouts of every prefix (one batched `prefix_rollouts`, no autograd), the baseline "
             "MLP's step included. SCST: 5 samples per image, greedy baseline. Policies: `random` weights "
             "(near-uniform, no caption ends early, no rollouts repeat) and `peaked` (the output layer x100 "
             f"and the EOS logit +{offset:.1f}: entropy and length below, closer to a trained captioner; "
             "synthetic). Updates at learning rate 1e-9, so each policy stays the one measured.", "",
             "Wall-clock seconds, median of the timed steps; in brackets CPU seconds.", "",
             "| policy | entropy (nats/word) | words/caption | PG update | sampling | rollouts | reward | backward | "
             "SCST step | PG / SCST |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        u = r["updates"]
        cells = [f"{u['entropy']:.2f}", f"{u['length']:.1f}", f"{u['pg_s']:.2f} s ({u['pg_cpu_s']:.2f} s)"]
        cells += [f"{u[k]:.2f} s" for k in ("sample_s", "rollout_s", "reward_s", "backward_s")]
        cells += [f"{u['scst_s']:.2f} s ({u['scst_cpu_s']:.2f} s)",
                  f"{u['pg_s'] / u['scst_s']:.1f}x ({u['pg_cpu_s'] / u['scst_cpu_s']:.1f}x)"]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    lines += ["", "Decoding throughput, eval mode (sampled words; a rollout's forced prefix words are not counted):",
              "",
              "| policy | rollout rows | rollout words/s (CPU time) | greedy words/s (CPU time) | "
              "rollouts / greedy (CPU time) |",
              "|---|---|---|---|---|"]
    for name, r in results.items():
        d = r["throughput"]
        lines.append(f"| {name} | {d['rollout_rows']:,} ({d['rollout_words']:,} words) | "
                     f"{d['rollout_words_per_s']:,.0f} ({d['rollout_words_per_cpu_s']:,.0f}) | "
                     f"{d['greedy_words_per_s']:,.0f} ({d['greedy_words_per_cpu_s']:,.0f}) | "
                     f"{d['rollout_words_per_cpu_s'] / d['greedy_words_per_cpu_s']:.2f} |")
    lines += ["", "Reward time for one update's captions: all rollout rows plus the samples (no selection), only the "
              "rows Q needs (valid steps before each caption's last), and those deduplicated by (caption, image), "
              "as the loop scores them; SPICE's parse and score caches cleared before each. `warm`: the same "
              "captions again with SPICE's caches full (a string seen before costs a look-up).", "",
              "| policy | reward | all rows | needed rows | unique pairs | warm |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        w = r["rewards"]
        for reward in ("cider_d", "spider", "bcmr"):
            lines.append(f"| {name} | {reward} | {w[f'{reward}_all_s']:.2f} s ({w['rows']:,}) | "
                         f"{w[f'{reward}_needed_s']:.2f} s ({w['needed']:,}) | {w[f'{reward}_unique_s']:.2f} s "
                         f"({w['unique']:,}) | {w[f'{reward}_warm_s']:.2f} s |")
    lines += ["", reading(results)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="timed updates per policy (after one warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="timed decodes per policy")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start_load = os.getloadavg()[0]
    refs, vocab = coco()
    ids = list(refs)[:IMAGES]
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    batch = make_batch(ids, refs, gen)
    small = {i: refs[i] for i in ids}  # SPICE parses its references when built: the batch's images only
    with build_reward(RewardConfig(weights={"cider_d": 1.0}), refs) as cider, \
         build_reward(RewardConfig(weights={"spider": 1.0}), small) as spider, \
         build_reward(RewardConfig(weights={"bcmr": 1.0}), refs) as bcmr:
        results = {}
        for name in ("random", "peaked"):
            torch.manual_seed(0)
            s = session(vocab)
            offset = peak(s.model, batch.feats) if name == "peaked" else 0.0
            results[name] = {"eos_offset": offset,"updates": updates(s, batch, cider, args.steps),
                             "throughput": throughput(s, batch, args.repeats),
                             "rewards": reward_times(s, batch, {"cider_d": cider, "spider": spider, "bcmr": bcmr})}
            print(name, json.dumps(results[name]), file=sys.stderr)
    text = markdown(results, (start_load, os.getloadavg()[0]))
    replace_section("bench-pg", text)
    print(text)
    print(json.dumps({name: {"pg_s": round(r["updates"]["pg_s"], 2), "scst_s": round(r["updates"]["scst_s"], 2)}
                      for name, r in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
