"""bench_hf.py's VLM table: rlcap's sampling against the same model's ``generate()`` for each instruction
vision-language family (rlcap.models.hf.build_vlm), like for like.

For each family, in a child process of its own: a folder built at ``size`` (random weights), ``images`` random
pictures' image tokens computed once (rlcap.encoders: what ``rlcap features --encoder hf:DIR`` stores), then,
alternating, ``sample(policy, feats, SAMPLES, Decoding("sample", MAX_LEN))`` under ``torch.no_grad`` against the policy's own
model's ``generate(do_sample=True, num_return_sequences=SAMPLES, max_new_tokens=MAX_LEN)``, both reading the same
stored tokens and the same prompt:

* decoder-only families (Qwen2-VL, SmolVLM, PaliGemma, LLaVA): ``generate`` gets the policy's prompt inputs (ids,
  mask, grid or token types: ``HFVLMCaptioner._prompt``) and the stored image tokens as ``mm_encoder_outputs``,
  which ``generate`` expands for the samples and the model's forward scatters into the prompt, as the policy's
  calls do;
* Florence-2: the policy's model holds the stored map in its tower's place (``StoredMap``), so ``generate`` gets the
  stored cells as its ``pixel_values`` and runs the model's projector and language encoder, as ``encode`` does.

Sampling settings alike: temperature 1, no top-k or top-p, rlcap's end token, the tokens rlcap never writes
suppressed. The median of the rounds (at most ``repeats``, stopped after ``budget`` seconds), each side's mean tokens
a caption (with its end token, as rlcap's mask counts it).

Run as a child: ``python hf_vlm_speed.py FAMILY SIZE IMAGES REPEATS BUDGET THREADS`` prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

SAMPLES, MAX_LEN = 5, 16
CAPTIONS = ["a red circle on the left", "a big blue square", "a small green triangle", "the red square .",
            "two small circles", "a large yellow triangle on the right"]
SIDES = ("rlcap", "generate")


def _stored(folder: Path, images: int, px: int):
    """The policy, its Feats for ``images`` random pictures, and the ``generate`` call that reads the same."""
    import numpy as np
    import torch
    from PIL import Image

    from rlcap.data.feats import Feats
    from rlcap.encoders.hf_vlm import load_vlm_encoder
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner, is_seq2seq_vlm

    rng = np.random.default_rng(0)
    pictures = [Image.fromarray(rng.integers(0, 255, (px, px, 3), dtype=np.uint8)) for _ in range(images)]
    if is_seq2seq_vlm(folder):
        from rlcap.encoders.hf import HFImageEncoder

        pixels = torch.stack([torch.from_numpy(np.asarray(p, np.float32) / 255).permute(2, 0, 1)  # cpu: the store
                              for p in pictures])
        fc, att = HFImageEncoder(folder).features(pixels)
        feats = Feats(fc, att, torch.ones(att.shape[:2], dtype=torch.bool))  # cpu: as the store is read
        policy = Seq2SeqVLMCaptioner(folder).eval()
        channels, high, wide = policy.grid
        grid = att.transpose(1, 2).reshape(len(att), channels, high, wide)
        inputs = {"pixel_values": grid, "input_ids": policy.prompt_ids.expand(len(att), -1)}
        return policy, feats, inputs, len(policy.prefix)
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    encoder = load_vlm_encoder(folder)
    fc, att, counts = encoder.features_with_counts(torch.from_numpy(encoder.prepare(pictures)))  # cpu: the store
    feats = Feats(fc, att, torch.arange(att.shape[1])[None] < counts[:, None])  # cpu: as the store is read
    policy = HFVLMCaptioner(folder).eval()
    ids, kwargs, _ = policy._prompt(att, fc)
    kwargs.pop("position_ids")  # (generate computes them)
    per_image = [att[i, :int(n)] for i, n in enumerate(counts)]  # each picture's tokens (T_i, D)
    # as the model's get_image_features gives them: generate expands them for the samples picture by picture
    tokens = tuple(per_image) if policy.per_image else torch.stack(per_image)
    inputs = {"input_ids": ids, **kwargs, "mm_encoder_outputs": {"image": BaseModelOutputWithPooling(
        pooler_output=tokens)}}
    return policy, feats, inputs, ids.shape[1]


def _length(rows: list[list[int]], skip: int, end: int, pad: int | None) -> float:
    """Mean tokens a caption after the first ``skip`` (prompt or decoder prefix), up to and with ``end``."""
    total = 0
    for row in rows:
        row = row[skip:]
        total += row.index(end) + 1 if end in row else sum(1 for t in row if t != pad)
    return total / len(rows)


def measure_family(family: str, size: str, images: int, repeats: int, budget: float, threads: int) -> dict:
    """Build ``family`` at ``size`` in a temporary folder and time both samplers, alternating (module docstring)."""
    import torch

    from rlcap.decoding.sampling import sample
    from rlcap.decoding.settings import Decoding
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from rlcap.models.hf.build_vlm import SIZES, build_vlm

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        folder = build_vlm(family, Path(root) / family, CAPTIONS, size)
        policy, feats, inputs, skip = _stored(folder, images, SIZES[size].px)
    ids = policy.ids
    banned = policy.banned() if isinstance(policy, HFVLMCaptioner) else sorted({ids.pad, ids.start} - {ids.end, None})

    sampling = Decoding.on(feats.fc.device, "sample", MAX_LEN, compile=False, temperature=1.0)

    def run_rlcap() -> float:
        with torch.no_grad():
            out = sample(policy, feats, SAMPLES, sampling)
        return float(out.mask.sum(1).float().mean())

    def run_generate() -> float:
        with torch.no_grad():
            out = policy.model.generate(**inputs, do_sample=True, num_return_sequences=SAMPLES,
                                        max_new_tokens=MAX_LEN, eos_token_id=ids.end, suppress_tokens=banned,
                                        top_k=0, top_p=1.0, temperature=1.0)
        return _length(out.tolist(), skip, ids.end, ids.pad)

    calls = {"rlcap": run_rlcap, "generate": run_generate}
    run_rlcap(), run_generate()  # warm-up
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    lengths: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(repeats):
        for side in SIDES:
            start = time.perf_counter()
            lengths[side].append(calls[side]())
            times[side].append(time.perf_counter() - start)
        if sum(map(sum, times.values())) > budget:
            break
    out = {"family": family, "size": size, "images": images, "samples": SAMPLES, "rounds": len(times["rlcap"])}
    for side in SIDES:
        seconds = statistics.median(times[side])
        out[side] = {"seconds": seconds, "samples_per_s": images * SAMPLES / seconds,
                     "tokens_per_caption": statistics.mean(lengths[side])}
    return out


def vlm_lines(rows: list[dict], run: str = "") -> list[str]:
    """The bench-hf-vlm section: heading, ``run`` (its command and machine), what it measures, the goal read from
    the rows, the table."""
    if not rows:
        return []
    reading = "; ".join(f"{r['family']} {r['rlcap']['samples_per_s'] / r['generate']['samples_per_s']:.2f}x "
                        f"({'met' if r['rlcap']['samples_per_s'] >= r['generate']['samples_per_s'] else 'not met'})"
                        for r in rows)
    rounds = sorted({r["rounds"] for r in rows})
    lines = ["## Instruction VLMs (model.arch=hf): rlcap's sampling against the same model's `generate`", "",
             *([run, ""] if run else []),
             f"Each family built at the `{rows[0]['size']}` size with random weights (`rlcap.models.hf.build_vlm`), "
             f"{rows[0]['images']} random pictures x {SAMPLES} samples of at most {MAX_LEN} tokens, one process a "
             "family. Both sides read the same stored image tokens and the same prompt: rlcap's `sample(policy, "
             "feats, n=5, max_len=16)` under `torch.no_grad`; the policy's own model's `generate(do_sample=True, "
             "num_return_sequences=5, max_new_tokens=16)` given the policy's prompt inputs and the stored tokens as "
             "`mm_encoder_outputs` (Florence-2: the stored map as `pixel_values`, its tower's place holding the "
             "map), temperature 1, no top-k or top-p, rlcap's end token, the tokens rlcap never writes suppressed. "
             f"Neither side runs the vision tower. The median of {'-'.join(map(str, rounds))} alternating rounds "
             "after a warm-up call; tokens a caption count the end token.", "",
             f"Goal: rlcap's sampling at least as fast as `generate` (rlcap's samples/s over generate's): {reading}.",
             "", "| family | images x samples | rlcap samples/s | generate samples/s | rlcap / generate | "
                 "rlcap tokens a caption | generate tokens a caption |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        ours, theirs = r["rlcap"], r["generate"]
        lines.append(f"| {r['family']} | {r['images']} x {r['samples']} | {ours['samples_per_s']:.1f} | "
                     f"{theirs['samples_per_s']:.1f} | {ours['samples_per_s'] / theirs['samples_per_s']:.2f}x | "
                     f"{ours['tokens_per_caption']:.1f} | {theirs['tokens_per_caption']:.1f} |")
    return lines


def run_vlm(families: list[str], size: str, images: int, repeats: int, budget: float, threads: int) -> list[dict]:
    """One row a family, each measured in a child process of its own (:func:`measure_family`)."""
    import os
    import subprocess

    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    rows = []
    for family in families:
        argv = [sys.executable, str(Path(__file__).resolve()), family, size, str(images), str(repeats), str(budget),
                str(threads)]
        out = subprocess.run(argv, capture_output=True, text=True, env=env)
        if out.returncode:
            sys.stderr.write(out.stderr[-4000:])
            raise SystemExit(f"bench_hf: the VLM child for {family} ({size}, {images} images) failed")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"bench_hf: VLM {family} {size} {images} x {SAMPLES} done", file=sys.stderr)
    return rows


def vlm_families(text: str) -> list[str]:
    """``--vlm-families``: a comma-separated list of rlcap.models.hf.build_vlm's families, '' for none."""
    from rlcap.models.hf.build_vlm import VLM_FAMILIES

    families = [f.strip() for f in text.split(",") if f.strip()]
    if unknown := [f for f in families if f not in VLM_FAMILIES]:
        raise SystemExit(f"bench_hf: --vlm-families: {', '.join(unknown)} not one of {', '.join(VLM_FAMILIES)}")
    return families


def vlm_figures(rows: list[dict]) -> dict[str, dict]:
    """The rows' figures for bench_hf's JSON line, keyed ``family_size_IMAGESxSAMPLES``."""
    return {f"{r['family']}_{r['size']}_{r['images']}x{r['samples']}": {
        f"{side}_{k}": round(r[side][k], 3) for side in SIDES for k in ("samples_per_s", "tokens_per_caption")}
        for r in rows}


if __name__ == "__main__":
    name, size_name, n_images, n_repeats, seconds_budget, n_threads = sys.argv[1:7]
    print(json.dumps(measure_family(name, size_name, int(n_images), int(n_repeats), float(seconds_budget),
                                    int(n_threads))))
