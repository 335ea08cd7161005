"""GRPO at Qwen2.5-VL-3B-Instruct's published shape (random weights, bf16, LoRA r 16), rlcap beside TRL's
GRPOTrainer (no vLLM) on the same folder, pictures and settings: the GPU section of ``make bench-scale-vlm``.

    python benchmarks/bench_scale_vlm_gpu.py --out /tmp/svg --doc OUT.md           # on a GPU: the figures
    python benchmarks/bench_scale_vlm_gpu.py --shape tiny --steps 3 --images 2 --g 2 --max-len 8 \\
        --out /tmp/svg_tiny --doc /tmp/svg_tiny/B.md                              # on the CPU: the script runs

1. Draws the shapes pictures at ``--px`` (448: 256 image tokens a picture at patch 14 and the 2 x 2 merger; COCO's
   640 x 480 pictures give about 390) and builds the policy's folder (:func:`build_policy`): the tokenizer, chat
   template and token ids of ``build_vlm``'s tiny ``qwen2_5_vl`` (a wordpiece vocabulary trained on the pictures'
   captions, so rlcap's CIDEr-D reward reads the captions), every width of :data:`SHAPES` (``qwen2.5-vl-3b``: the
   published config), random weights saved in bfloat16 as the published checkpoint is, and the processor at the
   published patch size and pixel range.
2. For each tower setting of ``--towers`` (``frozen``: LoRA on the language model's layers only, the tower frozen;
   ``lora``: adapters on the tower's layers too, rlcap's ``model.train_vision=lora``), rlcap's ``algorithm=grpo``
   then TRL's GRPOTrainer, each in a child process (``grpo_sides.py``, as ``bench_trl.py`` runs them) with the same
   images a step, G, new tokens, beta 0, one update a sampled batch, optimizer, reward (rlcap's CIDEr-D, handed to
   TRL as its reward function), dtype (``--dtype``: rlcap's ``model.dtype`` and ``precision=bf16``, TRL's
   ``bf16``, the weights loaded in it on both; LoRA adapters in float32 on both: rlcap's own rule, peft's
   ``autocast_adapter_dtype``) and LoRA rank (``--lora``; alpha 2 x rank, no dropout; the same target modules on
   both: the ``nn.Linear`` maps of the language model's layer stack, Qwen2.5-VL's ``q_proj``, ``k_proj``,
   ``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj`` in each of its 36 layers, and with
   ``--towers lora`` the tower's ``qkv``, ``proj``, ``gate_proj``, ``up_proj``, ``down_proj`` in each of its 32
   blocks: :func:`grpo_sides.lora_config`). rlcap computes the image tokens online (``--online``, the default:
   ``data.features=`` and ``data.images=``, no store), once a picture; TRL runs the tower for every completion.
   Both checkpoint activations (``--checkpointing``, the default: TRL's own default, rlcap's
   ``model.gradient_checkpointing``): without it TRL's passes with gradient over 64 completions of prompt, 256
   image tokens and caption hold about 8 MB a token in bf16 (36 layers; about 175 GB, more than a GPU), while
   rlcap's run over the captions after the pictures' prefill.
3. Per side: samples/s (images x G over the whole step), the split (sampling, scoring, reward, backward: medians
   over the steps after the first; the last step is not timed, so ``--steps`` 5 times 3 steps), peak GPU memory
   (``torch.cuda.max_memory_allocated`` of its process) and peak RSS. Goals (the issue's, on the GPU): rlcap at
   least 2x TRL's samples/s with at most its peak GPU memory.

Each side's row is written to ``--out``'s results.json and the section (``bench-scale-vlm-gpu``) to ``--doc`` as
soon as it is measured, so a run stopped by a time limit keeps what it measured; a side that fails (out of memory,
say) gets a row with its last error line and the run goes on, then exits 1. A later run with the same settings and
``--out`` adds or replaces the rows of its ``--towers`` (``device_checks.sh`` measures ``frozen`` and ``lora`` as
two steps of their own); with other settings it starts again. The folder is built once a ``--out``.

``--towers lora`` needs rlcap's ``model.train_vision`` key (a vision-language policy that trains its image side);
where this checkout's ModelConfig has no such key the script stops at once, in one line, before building anything.

Where the published values come from (each checked on 2026-12-02):

* Qwen/Qwen2.5-VL-3B-Instruct's config.json (huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json, as
  its copies that name it in ``_name_or_path`` show it: huggingface.co/jarvisvasu/Qwen2.5-VL-3B-Instruct-4bit,
  huggingface.co/dahwinsingularity/vllm2): hidden_size 2048, intermediate_size 11008, num_hidden_layers 36,
  num_attention_heads 16, num_key_value_heads 2, vocab_size 151936, tie_word_embeddings true,
  max_position_embeddings 128000, rms_norm_eps 1e-06, rope_theta 1000000.0, mrope_section [16, 24, 24],
  sliding_window 32768 with use_sliding_window false, max_window_layers 70, torch_dtype bfloat16; its
  vision_config: hidden_size 1280, out_hidden_size 2048, spatial_patch_size 14, tokens_per_second 2.
* The vision config's other values are transformers' Qwen2_5_VLVisionConfig defaults, which the published config
  leaves to them (transformers 5.24.0, checked here): depth 32, intermediate_size 3420, num_heads 16, patch_size 14,
  spatial_merge_size 2, temporal_patch_size 2, window_size 112, fullatt_block_indexes [7, 15, 23, 31], hidden_act
  silu.
* Its preprocessor_config.json: patch_size 14, merge_size 2, temporal_patch_size 2, min_pixels 3136, max_pixels
  12845056, the CLIP mean and std (which build_vlm's Qwen processors already use).

Not the published model's: the tokenizer (build_vlm's, trained on the shapes captions; its special tokens'
ids are its own, so the embedding's 151,936 rows are mostly words no caption holds, and random weights sample them:
both sides decode the same ids alike) and the weights (random, seeded).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench_trl import run_side, summary
from benchdoc import DOC, machine, replace_section
from grpo_sides import PHASES, Settings

SECTION = "bench-scale-vlm-gpu"
SIDES = ("rlcap", "trl")
TOWERS = ("frozen", "lora")  # rlcap's model.train_vision with model.train=lora: the tower frozen, or adapters on it
VISION_KEY = "train_vision"  # rlcap's ModelConfig field the tower setting needs


class Shape(NamedTuple):
    """A Qwen2.5-VL config's widths: ``text`` and ``vision`` update build_vlm's text_config and vision_config;
    ``px``: the pictures' side."""

    text: dict[str, Any]
    vision: dict[str, Any]
    px: int


SHAPES: dict[str, Shape] = {
    # the published config (module docstring)
    "qwen2.5-vl-3b": Shape(
        text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=128000,
                  rms_norm_eps=1e-6, sliding_window=32768, use_sliding_window=False, max_window_layers=70,
                  rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                    patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                    fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2, hidden_act="silu"),
        px=448),
    # the same code path at widths a CPU runs in seconds (the published vocabulary, patch and window kept)
    "tiny": Shape(
        text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=128000,
                  rms_norm_eps=1e-6, sliding_window=32768, use_sliding_window=False, max_window_layers=70,
                  rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]}),
        vision=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=14,
                    spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
                    tokens_per_second=2, hidden_act="silu"),
        px=224),
}
# the published tokenizer's size: Qwen2's 151,643 byte-level BPE tokens and 22 special ones (the output layer's
# 151,936 rows are padded past it); build_vlm's wordpiece is padded to it with words no text encodes to, since
# rlcap reads a tokenizer much smaller than the output layer as another model's
TOKENIZER_SIZE = 151_665
# the published preprocessor_config.json's pixel range (min_pixels, max_pixels) and patch
PIXELS = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2,
          "size": {"shortest_edge": 3136, "longest_edge": 12845056}}


def build_policy(folder: Path, shape: Shape, captions: list[str], seed: int = 0) -> dict[str, int]:
    """A Qwen2.5-VL folder of ``shape`` with random weights in bfloat16 (initialised on the GPU where there is
    one), build_vlm's tokenizer, chat template and token ids, and the published processor settings; returns its
    parameter counts (language model, image side)."""
    import torch

    from rlcap.models.hf.parts import language_parameters

    generation = write_settings(folder, shape, captions, seed)
    torch.manual_seed(seed)
    model = new_model(folder, "cuda" if torch.cuda.is_available() else "cpu")
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    model.save_pretrained(folder)
    (folder / "generation_config.json").write_text(generation)
    language = {id(p) for p in language_parameters(model)}
    counts = {"language": sum(p.numel() for p in model.parameters() if id(p) in language),
              "image_side": sum(p.numel() for p in model.parameters() if id(p) not in language)}
    (folder / "parameters.json").write_text(json.dumps(counts))
    return counts


def new_model(folder: Path, device: str) -> Any:
    """The folder's config as a model with random weights in bfloat16, made on ``device`` (meta: no weights)."""
    import torch
    import transformers as t

    with torch.device(device):
        return t.Qwen2_5_VLForConditionalGeneration._from_config(t.Qwen2_5_VLConfig.from_pretrained(folder),
                                                                 dtype=torch.bfloat16)


def write_settings(folder: Path, shape: Shape, captions: list[str], seed: int) -> str:
    """build_vlm's tiny folder with ``shape``'s config, the published processor settings and the tokenizer padded
    to the published size; returns its generation config (the tokenizer's end and pad tokens) to save again."""
    from rlcap.models.hf.build_vlm import build_vlm

    build_vlm("qwen2_5_vl", folder, captions, seed=seed)
    config = json.loads((folder / "config.json").read_text())
    generation = (folder / "generation_config.json").read_text()  # the tokenizer's end and pad tokens
    config["text_config"].update(shape.text)
    config["text_config"].pop("layer_types", None)  # (derived again from the number of layers)
    config["vision_config"].update(shape.vision)
    config.update(tie_word_embeddings=shape.text["tie_word_embeddings"], dtype="bfloat16")
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    processor = json.loads((folder / "processor_config.json").read_text())
    for part in ("image_processor", "video_processor"):
        processor[part].update(PIXELS)
    (folder / "processor_config.json").write_text(json.dumps(processor, indent=2))
    pad_tokenizer(folder / "tokenizer.json", min(TOKENIZER_SIZE, shape.text["vocab_size"]))
    return generation


def pad_tokenizer(path: Path, size: int) -> None:
    """Pad the wordpiece vocabulary of the tokenizer file ``path`` with ``[unusedN]`` words (which the
    pre-tokenizer, splitting at brackets, never produces) to ``size`` tokens in all, counting the added tokens
    that are not in the vocabulary (the new ids follow every id in use), so that a model's output layer has the
    published config's width (rlcap reads a model whose tokenizer has its output layer's size)."""
    tokenizer = json.loads(path.read_text())
    vocab = tokenizer["model"]["vocab"]
    added = [token["id"] for token in tokenizer["added_tokens"] if token["content"] not in vocab]
    start = max(*vocab.values(), *added) + 1
    vocab.update({f"[unused{i}]": i for i in range(start, start + size - len(vocab) - len(added))})
    path.write_text(json.dumps(tokenizer, ensure_ascii=False))


def image_tokens(folder: Path, picture: Path) -> int:
    """The image tokens the folder's processor puts in the prompt for ``picture``."""
    from PIL import Image

    from rlcap.encoders.hf_processor import load_processor

    processor = load_processor(folder)
    grid = processor.image_processor(images=[Image.open(picture).convert("RGB")], return_tensors="pt")
    merge = processor.image_processor.merge_size
    return int(grid["image_grid_thw"].prod()) // merge ** 2


def prepare(out: Path, shape_name: str, pictures: int, seed: int) -> tuple[Path, Path, dict]:
    """The shapes pictures at the shape's side, their caption file and the policy folder (each made once)."""
    from rlcap.data.synthetic.shapes import ShapesConfig, generate_shapes

    shape = SHAPES[shape_name]
    dataset = generate_shapes(ShapesConfig(n_train=pictures, n_val=8, n_test=0, image_size=shape.px, workers=1),
                              out / f"shapes_{shape.px}")
    folder = out / shape_name
    if (folder / "parameters.json").is_file():
        counts = json.loads((folder / "parameters.json").read_text())
    else:
        records = json.loads(dataset.read_text())["images"]
        counts = build_policy(folder, shape, [s["raw"] for im in records for s in im["sentences"]], seed)
    first = json.loads(dataset.read_text())["images"][0]
    picture = dataset.parent / first.get("filepath", "") / first["filename"]
    return dataset, folder, {**counts, "image_tokens": image_tokens(folder, picture)}


def modules_missing() -> str | None:
    """The one line that stops a run where TRL's side cannot start (before the policy is built)."""
    import importlib.util

    missing = [m for m in ("trl", "peft", "datasets", "accelerate") if importlib.util.find_spec(m) is None]
    return (f"bench_scale_vlm_gpu: {', '.join(missing)} not installed (pip install -e \".[trl,lora]\")"
            if missing else None)


def vision_key_missing(towers: list[str]) -> str | None:
    """The one line that stops a run asking for a trained tower where rlcap has no ``model.train_vision``."""
    from rlcap.models.model_config import ModelConfig

    if any(t != "frozen" for t in towers) and VISION_KEY not in ModelConfig.__dataclass_fields__:
        return (f"bench_scale_vlm_gpu: --towers {','.join(towers)} needs rlcap's model.{VISION_KEY} (a policy that "
                "trains its image side), which this checkout's ModelConfig does not have; run --towers frozen")
    return None


def row_of(tower: str, side: str, settings: Settings, samples: int) -> dict:
    """One side's row: its summary, or where it failed, the line that says why (the rlcap CLI's one line, else
    the traceback's last: ``torch.OutOfMemoryError: ...``, say)."""
    try:
        return {"tower": tower, "side": side, **summary(run_side(side, settings, Path(settings.out)), samples)}
    except RuntimeError as error:
        lines = [line for line in str(error).splitlines() if line.strip() and not line.startswith(" ")]
        said = [line for line in lines if line.startswith("rlcap ") and ": error: " in line]
        why = (said or lines or ["failed"])[-1]
        return {"tower": tower, "side": side, "failed": why.replace("|", "/")[:300]}


def results_table(rows: list[dict], cuda: bool) -> list[str]:
    head = ("| tower | side | samples/s | step s | " + " | ".join(f"{p} s" for p in PHASES)
            + (" | peak GPU GB" if cuda else "") + " | peak RSS GB | mean reward |")
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        if "failed" in r:
            out.append(f"| {r['tower']} | {r['side']} | failed: {r['failed']} |" + " |" * (head.count("|") - 4))
            continue
        out.append(f"| {r['tower']} | {r['side']} | {r['samples_per_s']:.1f} | {r['step_s']:.2f} | "
                   + " | ".join(f"{r[f'{p}_s']:.2f}" for p in PHASES)
                   + (f" | {r['gpu_gb']:.2f}" if cuda else "") + f" | {r['rss_gb']:.2f} | {r['reward']:.4f} |")
    return out


def goal_lines(rows: list[dict], cuda: bool) -> list[str]:
    """A line a tower setting with both sides measured: the speed and memory goals with the figures that decide."""
    out = []
    memory = "gpu_gb" if cuda else "rss_gb"
    for tower in TOWERS:
        sides = {r["side"]: r for r in rows if r["tower"] == tower}
        if set(sides) != set(SIDES):
            continue
        if any("failed" in r for r in sides.values()):
            out.append(f"- tower {tower}: not compared: " + "; ".join(f"{s} failed" for s, r in sides.items()
                                                                        if "failed" in r) + ".")
            continue
        speed = sides["rlcap"]["samples_per_s"] / sides["trl"]["samples_per_s"]
        peak = sides["rlcap"][memory] / sides["trl"][memory]
        out.append(f"- tower {tower}: rlcap at **{speed:.2f}x** TRL's samples/s (goal at least 2x: "
                   f"{'met' if speed >= 2 else 'missed'}); its peak {'GPU memory' if cuda else 'RSS'} "
                   f"**{peak:.2f}x** TRL's (goal at most 1x: {'met' if peak <= 1 else 'missed'}).")
    return out


def section(results: dict) -> str:
    s, counts, cuda = Settings(**results["settings"]), results["counts"], bool(results["gpu"])
    where = f"on the GPU ({results['gpu']})" if cuda else "on the CPU (a check that the script runs: not the GPU figures)"
    commands = "; ".join(f"`python benchmarks/bench_scale_vlm_gpu.py {' '.join(argv)}`" for argv in results["argv"])
    return "\n".join([
        f"## GRPO at Qwen2.5-VL-3B's shape: rlcap beside TRL's GRPOTrainer, {where}", "",
        f"Commands: {commands}. Machine: {results['machine']}.", "",
        f"The policy: `{results['shape']}` (`build_policy` in the script: "
        + ("the published config's widths" if results["shape"] != "tiny" else
           "tiny widths, the published vocabulary, patch and window")
        + f", random weights in bfloat16; {counts['language'] / 1e6:,.1f}M parameters in the language model, "
        f"{counts['image_side'] / 1e6:,.1f}M in the image side), the shapes pictures at {SHAPES[results['shape']].px} "
        f"px ({counts['image_tokens']} image tokens a picture), the same folder for both sides. {s.steps} steps of "
        f"{s.images} pictures x G = {s.g} samples, {s.max_len} new tokens at most, beta {s.beta:g}, one update a "
        f"sampled batch, learning rate {s.lr:g}, weights in {s.dtype} with LoRA r {s.lora} (alpha {2 * s.lora}, "
        "float32 adapters) on the language model's layers (q, k, v, o, gate, up, down), and with tower `lora` on "
        "the vision tower's blocks too (qkv, proj, gate, up, down; rlcap's `model.train_vision=lora`); rlcap "
        + ("computes the image tokens online (no store), once a picture" if s.online else "reads a store")
        + "; TRL (no vLLM) runs the tower on every completion. "
        + ("Activation checkpointing on both sides (TRL's default; rlcap's `model.gradient_checkpointing`). "
           if s.checkpointing else "No activation checkpointing on either side. ")
        + "Random weights write random words: the rewards, and so the advantages, are 0, and every pass still "
        "runs. The "
        "split as in bench-trl (sampling, scoring, reward, backward: the rest of the step); medians over the timed "
        f"steps after the first; {s.threads} torch thread(s) a side.", "",
        *results_table(results["rows"], cuda), "",
        *goal_lines(results["rows"], cuda),
    ])


def store_of(args: argparse.Namespace, folder: Path, dataset: Path, out: Path) -> str:
    """With ``--no-online``, rlcap's store of the folder's image tokens (written once, untimed); else none."""
    if args.online:
        return ""
    store = out / f"{args.shape}.h5"
    if not store.is_file():
        subprocess.run([sys.executable, "-m", "rlcap", "features", str(dataset.parent), "--dataset", str(dataset),
                        "--encoder", f"hf:{folder}", "--out", str(store)], check=True, stdout=subprocess.DEVNULL)
    return str(store)


def base_settings(args: argparse.Namespace, folder: Path, dataset: Path, out: Path) -> Settings:
    return Settings(model=str(folder), dataset=str(dataset), store=store_of(args, folder, dataset, out),
                    out=str(out), steps=args.steps,
                    images=args.images, g=args.g, max_len=args.max_len, lr=args.lr, threads=args.threads,
                    dtype=args.dtype, lora=args.lora, online=args.online, checkpointing=args.checkpointing)


def previous(out: Path, settings: dict, shape: str) -> dict | None:
    """The results of an earlier run in ``out`` with the same settings and shape (its rows are kept)."""
    path = out / "results.json"
    if not path.is_file():
        return None
    earlier = json.loads(path.read_text())
    return earlier if earlier["settings"] == settings and earlier["shape"] == shape else None


def measure(args: argparse.Namespace, out: Path, argv: list[str], doc: Path | None) -> dict:
    """Each tower setting's two sides, the results and section written after each."""
    import torch
    import transformers
    import trl

    dataset, folder, counts = prepare(out, args.shape, (args.steps + 1) * args.images, args.seed)
    base = base_settings(args, folder, dataset, out)
    cuda = torch.cuda.is_available()
    results = previous(out, dataclasses.asdict(base), args.shape) or {
        "shape": args.shape, "settings": dataclasses.asdict(base), "rows": [], "argv": [], "counts": counts,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "machine": machine(torch=torch.__version__, transformers=transformers.__version__, trl=trl.__version__)}
    results["argv"] = [a for a in results["argv"] if a != argv] + [argv]
    for tower in args.towers:
        for side in SIDES:
            s = dataclasses.replace(base, out=str(out / tower), train_vision=tower)
            row = row_of(tower, side, s, args.images * args.g)
            shutil.rmtree(Path(s.out) / side, ignore_errors=True)  # its checkpoint (about 15 GB at 3B: the disk)
            results["rows"] = sorted([r for r in results["rows"] if (r["tower"], r["side"]) != (tower, side)] + [row],
                                     key=lambda r: (TOWERS.index(r["tower"]), SIDES.index(r["side"])))
            (out / "results.json").write_text(json.dumps(results, indent=1))
            if doc is not None:
                replace_section(SECTION, section(results), doc)
            print(json.dumps(row), flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="qwen2.5-vl-3b", help="the policy's widths")
    parser.add_argument("--towers", default="frozen,lora",
                        help="tower settings, comma-separated: frozen (LoRA on the language model only), lora "
                             "(adapters on the tower too: rlcap's model.train_vision=lora)")
    parser.add_argument("--steps", type=int, default=5, help="sampled batches a side (the first and last untimed)")
    parser.add_argument("--images", type=int, default=8, help="pictures a step")
    parser.add_argument("--g", type=int, default=8, help="samples a picture (TRL's num_generations)")
    parser.add_argument("--max-len", type=int, default=64, help="new tokens at most a sample")
    parser.add_argument("--lora", type=int, default=16, help="LoRA rank of both sides (alpha 2 x rank)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16", help="weights of both sides")
    parser.add_argument("--online", action=argparse.BooleanOptionalAction, default=True,
                        help="rlcap computes the image tokens from the pictures (--no-online: from a store "
                             "`rlcap features` writes first, untimed; the tower then frozen)")
    parser.add_argument("--checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="activation checkpointing on both sides (TRL's default; rlcap's "
                             "model.gradient_checkpointing)")
    parser.add_argument("--lr", type=float, default=1e-5, help="learning rate of both")
    parser.add_argument("--threads", type=int, default=4, help="torch threads a side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench_scale_vlm_gpu", help="working folder (the built policy is kept)")
    parser.add_argument("--doc", default=None,
                        help=f"the Markdown file the section goes to (default: {DOC.relative_to(DOC.parents[1])} on a "
                             "GPU; on the CPU only where given)")
    args = parser.parse_args(argv)
    args.towers = args.towers.split(",")
    if any(t not in TOWERS for t in args.towers):
        parser.error(f"--towers: each of {', '.join(TOWERS)}")
    if not args.online and args.towers != ["frozen"]:
        parser.error("--no-online: a store holds a frozen tower's tokens: --towers frozen")
    if args.steps < 3:
        parser.error("--steps: at least 3 (the first and the last step are not timed)")
    missing = modules_missing() or vision_key_missing(args.towers)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available() and args.shape != "tiny":
        print(f"bench_scale_vlm_gpu: --shape {args.shape} needs a GPU (on the CPU, --shape tiny checks that the script "
              "runs)", file=sys.stderr)
        return 2
    doc = Path(args.doc) if args.doc else (DOC if torch.cuda.is_available() else None)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = measure(args, out, sys.argv[1:] if argv is None else argv, doc)
    print(section(results))
    print(f"bench_scale_vlm_gpu: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 1 if any("failed" in r for r in results["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
