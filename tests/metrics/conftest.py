from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def coco5k(shared_dir: Path) -> dict:
    """human_agreement_5k.json with pycocoevalcap's expected corpus and per-image scores."""
    base = shared_dir / "data" / "coco"
    items = json.loads((base / "human_agreement_5k.json").read_text())
    return {
        "refs": {str(x["image_id"]): x["references"] for x in items},
        "preds": {str(x["image_id"]): [x["candidate"]] for x in items},
        "expected": json.loads((base / "pycocoevalcap_expected_5k.json").read_text())["scores"],
        "per_image": json.loads((base / "pycocoevalcap_per_image_5k.json").read_text()),
    }
