"""How fast `rlcap features --encoder hf:DIR` encodes pictures for a vision-language policy, one picture a pass of
the image side (as it did before) and the pictures of one size in one pass (issue 66 item 1), on the CPU.

    python benchmarks/bench_vlm_features.py [--pictures 32] [--size small] [--families smolvlm,qwen2_vl,gemma3,internvl]

Each family is built at ``--size`` with random weights (`rlcap hf-captioner --family F --size S`); its encoder
(`rlcap.encoders.hf_vlm.HFVLMEncoder`) reads the same ``--pictures`` generated 640x480 JPEGs (one size: COCO's
most common), once a picture a pass (`image_tokens`, the loop `features_with_counts` ran before) and once through
`features_with_counts` (the pictures of one size in one pass). Reported: pictures/s each way (the median of 3
timings), and the largest difference between the two ways' tokens. Time it alone: it is a speed.

Writes its section of docs/BENCHMARKS.md between the bench-vlm-features markers and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from bench_features import write_jpegs
from benchdoc import DOC, machine, median_seconds, replace_section

from rlcap.encoders.hf_vlm import image_tokens, load_vlm_encoder
from rlcap.models.hf.build_vlm import build_vlm

CAPTIONS = ["a red circle on a blue square", "two green triangles", "a small yellow star beside a circle"]


def measure(family: str, size: str, pictures: list, folder: Path) -> dict:
    encoder = load_vlm_encoder(build_vlm(family, folder / family, CAPTIONS, size=size))
    prepared = torch.from_numpy(encoder.prepare(pictures))

    def alone() -> list[torch.Tensor]:
        with torch.inference_mode():
            return [image_tokens(encoder.model, encoder.processor, p).float() for p in pictures]

    def batched() -> tuple:
        return encoder.features_with_counts(prepared)

    one, together = median_seconds(alone, 3), median_seconds(batched, 3)
    tokens, (_, att, counts) = alone(), batched()
    diff = max(float((att[k, : len(t)] - t).abs().max()) for k, t in enumerate(tokens))
    params = sum(p.numel() for p in encoder.model.parameters())
    return {"family": family, "parameters": params, "tokens a picture": int(counts[0]),
            "one a pass (pictures/s)": round(len(pictures) / one, 2),
            "one size a pass (pictures/s)": round(len(pictures) / together, 2),
            "speed-up": round(one / together, 2), "largest difference": f"{diff:.1g}"}


def main(argv: list[str] | None = None) -> int:
    import transformers
    from PIL import Image

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pictures", type=int, default=32, help="640x480 JPEGs encoded each way (default 32)")
    p.add_argument("--size", default="small", help="the families' size (default small)")
    p.add_argument("--families", default="smolvlm,qwen2_vl,gemma3,internvl")
    p.add_argument("--out", type=Path, default=DOC, help="the benchmarks document to update")
    args = p.parse_args(argv)
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pictures = [Image.open(path).convert("RGB") for path in write_jpegs(folder / "jpegs", args.pictures).values()]
        for family in args.families.split(","):
            rows.append(measure(family, args.size, pictures, folder))
            print(json.dumps(rows[-1]), flush=True)
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(str(row[k]) for k in head) + " |" for row in rows]
    replace_section("bench-vlm-features", f"""## Image tokens for a vision-language policy: one picture a pass against one size a pass (`make bench-vlm-features`)

`python benchmarks/bench_vlm_features.py --pictures {args.pictures} --size {args.size} --families {args.families}`
on {machine(torch=torch.__version__, transformers=transformers.__version__)}, {torch.get_num_threads()} torch threads.

{args.pictures} generated 640x480 JPEGs (one size) through each family's encoder (`rlcap features --encoder hf:DIR`),
built at size `{args.size}` with random weights: one picture a pass of the image side, as `rlcap features` encoded
them before, and the pictures of one size in one pass, as it does now (the median of 3 timings each). The tokens
of the two ways are the same to the largest difference shown (float32; `tests/encoders/test_hf_vlm_batched.py`
checks every family to 1e-5).

{chr(10).join(lines)}
""", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
