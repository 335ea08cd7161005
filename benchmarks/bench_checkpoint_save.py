"""How long a checkpoint save of a transformers policy (model.arch=hf) takes at base size, with and without its
``hf/`` folder (the policy as a complete transformers folder that ``from_pretrained`` loads), and what hf/ holds.

    python benchmarks/bench_checkpoint_save.py [--family git] [--size base] [--repeats 3] [--out docs/BENCHMARKS.md]

The captioner is built by ``rlcap.models.hf.build_captioner.build_captioner`` (what ``rlcap hf-captioner --size base``
writes: GIT-base's shapes, a ViT-B/16 tower and a 768-wide text decoder of 6 layers, random weights, a word
tokenizer of a few captions). The policy is ``rlcap.models.hf.captioner.HFCaptioner`` over it, its tower frozen
and kept aside. Timed, each as the median of ``--repeats`` saves into the same folder (each save replaces the
previous one, as a run's ``last/`` is replaced): ``rlcap.train.checkpoint.save_checkpoint`` of the policy with
its family's export (hf/), the same save with an export that writes nothing (no hf/), and the export alone. The
sizes of hf/'s files say where its time goes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchdoc import DOC, load_note, machine, median_seconds, replace_section

SECTION = "checkpoint-save"
CAPTIONS = ["a red circle on the left", "a blue square above a green triangle", "two small yellow circles",
            "a large green square", "a triangle below a circle"]


def _timed(fn: Any, repeats: int) -> float:
    return median_seconds(fn, repeats, warmup=0)


def measure(folder: Path, family: str, size: str, repeats: int) -> dict[str, Any]:
    from rlcap.config import to_dict
    from rlcap.data.hf_text import TokenizerVocab
    from rlcap.methods import load_run_config
    from rlcap.models.architectures import ARCHITECTURES
    from rlcap.models.hf.build_captioner import build_captioner
    from rlcap.models.hf.captioner import HFCaptioner
    from rlcap.models.hf.architecture import EXPORT, HFArchitecture
    from rlcap.train.checkpoint import own_model_path, save_checkpoint

    class NoExport(HFArchitecture):
        """The hf family, its export writing nothing: the save without hf/."""

        def export(self, module: Any, folder: Path, config: dict[str, Any], previous: Path | None) -> None:
            return None

    model = build_captioner(family, folder / "model", CAPTIONS, size=size, seed=0, tokenizer="word")
    vocab = TokenizerVocab.from_folder(model)
    policy = HFCaptioner(model, len(vocab))
    cfg = load_run_config(None, ["model.arch=hf", f"model.path={model}"])
    config = own_model_path({**to_dict(cfg), "feature_dims": {"fc": 0, "att": 0, "image_size": None}})
    manifest = {"step": 1, "epoch": 1}

    def save() -> None:
        save_checkpoint(folder / "last", {"policy": policy}, config, vocab, None, manifest)

    def first_save() -> None:  # no previous checkpoint: the tower is written
        shutil.rmtree(folder / "last", ignore_errors=True)
        save()

    first = _timed(first_save, repeats)
    with_hf = _timed(save, repeats)  # each save replaces the previous one, whose tower it links
    files = {p.name: p.stat().st_size for p in sorted((folder / "last" / EXPORT).iterdir())}
    policy_bytes = (folder / "last" / "policy.safetensors").stat().st_size
    export = _timed(lambda: ARCHITECTURES["hf"].export(policy, folder / "export", config, None), repeats)
    own = ARCHITECTURES["hf"]
    ARCHITECTURES["hf"] = NoExport()
    try:
        without = _timed(save, repeats)
    finally:
        ARCHITECTURES["hf"] = own
    parameters = sum(p.numel() for p in policy.parameters())
    return {"first": first, "with": with_hf, "without": without, "export": export, "files": files, "policy_bytes": policy_bytes,
            "parameters": parameters}


def report(got: dict[str, Any], family: str, size: str, repeats: int, load: tuple[float, float]) -> str:
    import torch
    import transformers

    mb = 1024 * 1024
    files = got["files"]
    weights = {name: size for name, size in files.items() if name.endswith(".safetensors")}
    rest = sum(size for name, size in files.items() if name not in weights)
    lines = [
        f"## Checkpoint save of a transformers policy ({family}, {size})", "",
        f"`python benchmarks/bench_checkpoint_save.py --family {family} --size {size} --repeats {repeats}`: "
        f"{machine(torch=torch.__version__, transformers=transformers.__version__)}. {load_note(load)}", "",
        "| save | seconds (median) |", "|---|---|",
        f"| `save_checkpoint` with `hf/`, the tower written (no previous checkpoint) | {got['first']:.2f} |",
        f"| `save_checkpoint` with `hf/`, the tower linked from the checkpoint it replaces | {got['with']:.2f} |",
        f"| `save_checkpoint` without `hf/` | {got['without']:.2f} |",
        f"| the export alone (`hf/`, the tower written; its files not yet fsynced) | {got['export']:.2f} |", "",
        f"The policy holds {got['parameters'] / 1e6:.1f} M parameters, its tower kept aside (`policy.safetensors`, "
        f"{got['policy_bytes'] / mb:.0f} MiB). `hf/` holds "
        + ", ".join(f"`{name}` {size / mb:.0f} MiB" for name, size in weights.items())
        + f" and {rest / 1024:.0f} KiB of config, generation config, tokenizer and processor. With the tower "
        f"linked, `hf/` makes a save {got['with'] / got['without']:.1f}x as long as one without it "
        f"({got['first'] / got['without']:.1f}x with the tower written).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="git", help="the captioner family (default git)")
    p.add_argument("--size", default="base", help="tiny, small or base (default base)")
    p.add_argument("--repeats", type=int, default=3, help="saves timed for each median (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    args = p.parse_args(argv)
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        got = measure(Path(tmp), args.family, args.size, args.repeats)
    load.append(os.getloadavg()[0])
    body = report(got, args.family, args.size, args.repeats, (load[0], load[1]))
    replace_section(SECTION, body, args.out)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
