"""Per-rank peak memory of FSDP2 against DDP at 2 processes (CPU, gloo): XE and GRPO steps of a policy built offline
with the widths of a published config (by default Qwen/Qwen2.5-VL-3B-Instruct's language model, 2048 wide, its
151,936-word embedding tied to the output layer, cut to 2 decoder layers: 465M parameters; its tower 1280 wide, cut
to 1 layer), random weights, a tokenizer trained on the tiny set's captions.

    python benchmarks/fsdp_peak_memory.py [--layers 2] [--hidden 2048] [--steps 3] [--precision fp32] [--online]
        [--out DIR]

(``--online``: no store, the image tokens computed from the tiny set's pictures at every step.)

Each run is ``torchrun --nproc-per-node 2 -m rlcap train`` (``distributed.strategy`` ddp, then fsdp2; XE from the
folder, GRPO from the folder with rl.kl_coef 0.04, so that its reference is held too); the peak of each rank is its
resident set's high-water mark (``VmHWM`` of /proc/PID/status, read until the rank ends: the whole process's,
the interpreter and libraries' 0.7-0.8 GB included, and the moments before sharding, when each rank holds the
policy (and GRPO's reference copy) whole, and rank 0's saves, when it gathers the weights whole). It prints one
JSON line a run and the markdown rows of docs/BENCHMARKS.md. Run it alone on the machine (about 2 x 16 bytes a
parameter for DDP's two ranks: 16 GB at the default size).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# the names of the image side's weights (Qwen2.5-VL's tower; SmolVLM's tower and connector): a policy reading a store
# holds the language model only, so these are not counted
IMAGE_SIDE = ("visual", "vision_model", "connector")


def build_policy(folder: Path, layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int,
                 vocab: int, vision: int, captions: list[str]) -> Path:
    """A Qwen2.5-VL folder of the given widths (random weights), its processor and tokenizer the tiny builder's."""
    import transformers as t

    from bench_scale_vlm_gpu import pad_tokenizer

    from rlcap.models.hf.build_vlm import build_vlm

    build_vlm("qwen2_5_vl", folder, captions)
    pad_tokenizer(folder / "tokenizer.json", vocab)
    config = json.loads((folder / "config.json").read_text())
    half = hidden // heads // 2
    config["text_config"].update(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                                 num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                                 tie_word_embeddings=True, layer_types=["full_attention"] * layers)
    config["text_config"]["rope_parameters"]["mrope_section"] = [half // 4, 3 * half // 8,
                                                                 half - half // 4 - 3 * half // 8]
    config["vision_config"].update(hidden_size=vision, intermediate_size=vision * 8 // 3, num_heads=16, depth=1,
                                   out_hidden_size=hidden, fullatt_block_indexes=[0])
    config["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(config))
    model = t.Qwen2_5_VLForConditionalGeneration(t.Qwen2_5_VLConfig.from_pretrained(folder))
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    model.save_pretrained(folder)
    return folder


def peak_run(argv: list[str], env: dict[str, str], timeline: Path | None = None) -> tuple[int, list[int]]:
    """Run torchrun's ``argv``; its exit status and each rank's peak resident memory in bytes. ``timeline``: a
    JSON-lines file of every reading (seconds since the start, each rank's resident memory and peak so far)."""
    launcher = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, int] = {}
    start = time.time()
    lines = timeline.open("w") if timeline is not None else None
    while launcher.poll() is None:
        children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
        reading: dict[str, Any] = {"t": round(time.time() - start, 2), "unix": round(time.time(), 2)}
        for pid in map(int, children):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            kb = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
                  if line.startswith(("VmHWM:", "VmRSS:"))}
            if "VmHWM" not in kb:  # (a rank that has ended: a zombie until torchrun reaps it)
                continue
            rank = _rank(pid)
            if rank < 0:  # (its environment unreadable: a process ending)
                continue
            peaks[rank] = max(peaks.get(rank, 0), kb["VmHWM"] * 1024)
            reading[f"rank{rank}"] = [kb.get("VmRSS", 0) // 1024, kb["VmHWM"] // 1024]  # MiB
        if lines is not None:
            lines.write(json.dumps(reading) + "\n")
        time.sleep(0.2)
    if lines is not None:
        lines.close()
    if launcher.returncode:
        sys.stderr.write(launcher.stderr.read()[-3000:])
    return launcher.returncode, [peaks[rank] for rank in sorted(peaks)]


def _rank(pid: int) -> int:
    """The torchrun rank of process ``pid`` (its ``RANK`` environment variable; -1 where it cannot be read)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return -1
    return next((int(v[5:]) for v in environ if v.startswith(b"RANK=")), -1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=11008)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--vision", type=int, default=1280)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--methods", default="XE,GRPO", help="the runs measured: XE, GRPO or both")
    parser.add_argument("--smolvlm", choices=("smolvlm-256m", "smolvlm-500m"), default=None,
                        help="instead of the Qwen2.5-VL slice: a SmolVLM at that model's published widths "
                             "(benchmarks/smolvlm_shapes.py), its first --smolvlm-layers decoder layers (0: all)")
    parser.add_argument("--smolvlm-layers", type=int, default=0)
    parser.add_argument("--checkpointing", action="store_true",
                        help="model.gradient_checkpointing=true in every run (what a user sets at these sizes: the "
                             "activations, which neither strategy shards, kept to a layer's inputs)")
    parser.add_argument("--precision", default="fp32", help="the runs' precision: fp32 or bf16 (FSDP2's mixed "
                                                             "precision: it gathers bf16 weights)")
    parser.add_argument("--host-memory", default="auto",
                        help="host_memory of both strategies' runs, or several comma-separated, each measured "
                             "(default auto: release under FSDP2, keep under DDP)")
    parser.add_argument("--decode-weights", default="whole",
                        help="the FSDP2 runs' distributed.decode_weights: whole (gathered while a decode lasts) or "
                             "sharded (each forward call gathers one layer at a time)")
    parser.add_argument("--strategies", default="ddp,fsdp2", help="the strategies run (default both; a ratio is "
                                                                  "printed only when both are)")
    parser.add_argument("--online", action="store_true",
                        help="no store: the runs compute the image tokens from the pictures (data.images), the "
                             "policy keeping aside the online encoder's image side")
    parser.add_argument("--out", default=None, help="work folder, kept (default: a temporary one, deleted at the end)")
    args = parser.parse_args(argv)
    work = Path(args.out or tempfile.mkdtemp(prefix="fsdp_peak_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return measure(args, work)
    finally:
        if args.out is None:  # (the runs' checkpoints: about 18 GB at the default size)
            shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> int:
    """Build the policy and its store in ``work``, run each method under each strategy, print the rows."""
    from rlcap.cli import main as rlcap

    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset

    dataset, _ = make_tiny_dataset(work)
    add_pictures(dataset)
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    if args.smolvlm:
        from smolvlm_shapes import build_smolvlm

        folder = work / "policy"
        build_smolvlm(folder, captions, args.smolvlm, args.smolvlm_layers)
    else:
        folder = build_policy(work / "policy", args.layers, args.hidden, args.intermediate, args.heads,
                              args.kv_heads, args.vocab, args.vision, captions)
    store = work / "tokens.h5"
    if not args.online and rlcap(["features", str(work), "--dataset", str(dataset), "--encoder", f"hf:{folder}", "--out", str(store)]):
        return 1
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        params = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys() if not any(
            side in k for side in IMAGE_SIDE))
    data = ["data.features=", f"data.images={work}"] if args.online else [f"data.features={store}"]
    common = [f"data.dataset={dataset}", *data, "data.min_count=1", "data.seq_per_img=2",
              "decode.max_len=6", "val.max_images=2", "val.batch_size=2", "track.to=[]", "threads=1",
              f"max_steps={args.steps}", "log_every=1", f"precision={args.precision}", "model.arch=hf",
              f"model.path={folder}"]
    runs = {"XE": ("shapes_xe", ["xe.batch_size=4", "xe.epochs=1"]),
            "GRPO": ("shapes_grpo", [f"init_from={folder}", "rl.batch_size=4", "rl.n_samples=2", "rl.epochs=1",
                                     "rl.kl_coef=0.04"])}
    # what the policy's training does (a GRPO run takes the rest of the model from init_from)
    training = ["model.gradient_checkpointing=true"] if args.checkpointing else []
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    rows = []
    for method, (recipe, extra) in ((m, runs[m]) for m in args.methods.split(",")):
        for host_memory in args.host_memory.split(","):  # (a run setting, not the model's: GRPO takes it too)
            peaks = {}
            for strategy in args.strategies.split(","):
                out = work / f"{method}-{host_memory}-{strategy}"
                items = [o for o in common if method == "XE" or not o.startswith("model.")] + training
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                       "rlcap", "train", str(REPO / "configs" / f"{recipe}.yaml"), *items, *extra, f"out_dir={out}",
                       f"distributed.strategy={strategy}", f"host_memory={host_memory}"]
                if strategy == "fsdp2":
                    cmd.append(f"distributed.decode_weights={args.decode_weights}")
                code, ranks = peak_run(cmd, env, work / f"{out.name}.rss.jsonl")
                if code:
                    return code
                peaks[strategy] = ranks  # (rank 0, which saves the whole weights, first)
                print(json.dumps({"method": method, "host_memory": host_memory, "strategy": strategy,
                                  "parameters": params, "peak_bytes_per_rank": ranks}), flush=True)
            gib = {k: [b / 2**30 for b in v] for k, v in peaks.items()}
            if len(gib) < 2:
                continue
            rows.append(f"| {method} | {host_memory} | {params / 1e6:.0f}M | {gib['ddp'][0]:.2f} / {gib['ddp'][1]:.2f} "
                        f"GiB | {gib['fsdp2'][0]:.2f} / {gib['fsdp2'][1]:.2f} GiB | "
                        f"{gib['fsdp2'][0] / gib['ddp'][0]:.2f}x / {gib['fsdp2'][1] / gib['ddp'][1]:.2f}x |")
    print("| steps | host_memory | policy parameters (language model) | DDP peak, rank 0 / rank 1 | FSDP2 peak, rank 0 "
          "/ rank 1 | FSDP2 / DDP, rank 0 / rank 1 |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))  # (the tiny set's builders live in tests/)
    raise SystemExit(main())
