"""Tiny transformers captioners with a tokenizer trained on the tiny dataset's captions (tests/tiny.py), saved as
a downloaded captioner's folder (rlcap.models.hf.build_captioner): what `model.arch: hf` runs on in the tests."""

from __future__ import annotations

import json
from pathlib import Path

from rlcap.models.hf.build_captioner import build_captioner



def save_captioner(kind: str, folder: Path, dataset: Path, seed: int = 0) -> Path:
    """A tiny ``kind`` (vision_encoder_decoder, blip or git) whose word-level tokenizer knows ``dataset``'s words."""
    captions = [s["raw"] for image in json.loads(dataset.read_text())["images"] for s in image["sentences"]]
    return build_captioner(kind, folder, captions, size="tiny", seed=seed, tokenizer="word")


def exported_generate(best: Path, folder: Path, dataset: Path, **kwargs) -> dict[str, str]:
    """``best/hf``'s own ``generate(**kwargs)`` from the test split's pictures (under ``folder``): image id -> caption."""
    import torch
    import transformers
    from PIL import Image

    architecture = json.loads((best / "hf" / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(best / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(best / "hf")
    processor = transformers.AutoImageProcessor.from_pretrained(best / "hf")
    records = [r for r in json.loads(dataset.read_text())["images"] if r["split"] == "test"]
    pixels = processor(images=[Image.open(folder / r["filename"]).convert("RGB") for r in records],
                       return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model.generate(pixel_values=pixels, **kwargs)
    return {str(r["imgid"]): tokenizer.decode(row, skip_special_tokens=True).strip() for r, row in zip(records, out)}


def captioner_with_store(kind: str, folder: Path) -> tuple[Path, Path, Path]:
    """The tiny dataset with pictures in ``folder``, a tiny ``kind`` captioner for it and the store `rlcap features
    --encoder hf:` writes of its tower: (dataset, captioner folder, store)."""
    from rlcap.cli import main
    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset

    dataset, _ = make_tiny_dataset(folder)
    add_pictures(dataset)
    model = save_captioner(kind, folder / "captioner", dataset)
    store = folder / "hf.h5"
    assert main(["features", str(folder), "--dataset", str(dataset), "--encoder", f"hf:{model}",
                 "--out", str(store)]) == 0
    return dataset, model, store
