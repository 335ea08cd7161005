"""The model card of an exported transformers folder (a checkpoint's ``hf/``): ``README.md`` with the metadata
header the Hugging Face Hub reads (``base_model``, ``library_name``, ``pipeline_tag``, ``tags``), how the policy
was trained (method, reward, the settings that matter, the data and its size) and the scores of the checkpoint's
last ``rlcap eval`` when there is one.

Every family that exports a transformers folder calls :func:`write_card` after writing it (``HFFamily.export``);
``rlcap eval`` calls :func:`add_scores`, which writes the card again with the scores it has just written to
``scores.json``. Nothing here imports torch: the card is read from the run config, the checkpoint's manifest and
the folder's own files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from rlcap.errors import DataError
from rlcap.files import write_text

CARD = "README.md"
EXPORT = "hf"  # the folder of a checkpoint its transformers families export (models/hf_family.py's EXPORT)
# a folder the Hub's cache holds: .../models--ORG--NAME/snapshots/REVISION
_HUB_CACHE = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/?$")
# settings a reader of the card needs to repeat the run: (section, key)
_SETTINGS = (("model", "train"), ("model", "lora_rank"), ("model", "lora_alpha"), ("optim", "name"), ("optim", "lr"),
             ("xe", "epochs"), ("xe", "batch_size"), ("rl", "epochs"), ("rl", "batch_size"), ("rl", "n_samples"),
             ("rl", "sample_method"), ("scst", "baseline"), ("data", "max_len"), ("data", "max_train_images"),
             ("decode", "beam_size"), ("decode", "max_len"), ("precision", None), ("seed", None))


@runtime_checkable
class FromFolder(Protocol):
    """A policy loaded from a transformers folder (``folder``: where), whose export's ``base_model`` it names."""

    folder: Path


def base_model_of(source: str | Path) -> str:
    """What a folder a policy was loaded from is, for ``base_model``: the base its own rlcap card names (a run
    started from an earlier run's ``hf/``), the Hub id of a folder in the Hub's cache (``models--ORG--NAME``),
    the ``_name_or_path`` its config records when that is a Hub id, else the folder's name."""
    source = Path(source)
    header = read_header(source / CARD)
    if header.get("base_model") and "rlcap" in header.get("tags", []):
        return str(header["base_model"])
    cached = _HUB_CACHE.search(source.as_posix())
    if cached:
        return f"{cached['org']}/{cached['name']}"
    try:
        recorded = json.loads((source / "config.json").read_text(encoding="utf-8")).get("_name_or_path", "")
    except (OSError, ValueError):
        recorded = ""
    if isinstance(recorded, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", recorded) and not Path(recorded).exists():
        return recorded
    return source.name


def pipeline_tag(folder: Path) -> str:
    """``image-text-to-text`` for a folder whose processor or tokenizer brings a chat template (a vision-language
    model, prompted with text), else ``image-to-text`` (a captioner)."""
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return "image-text-to-text"
    for name in ("processor_config.json", "tokenizer_config.json"):
        try:
            if "chat_template" in json.loads((folder / name).read_text(encoding="utf-8")):
                return "image-text-to-text"
        except (OSError, ValueError):
            continue
    return "image-to-text"


def read_header(path: Path) -> dict[str, Any]:
    """The YAML header of a card (``{}`` when there is no card or it has no header)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not match:
        return {}
    try:
        header = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return header if isinstance(header, dict) else {}


def write_card(folder: Path, config: dict[str, Any], base_model: str, scores: dict[str, Any] | None = None) -> Path:
    """Write ``folder/README.md``: the card of the policy exported there, trained by the run ``config`` (a
    checkpoint's config.json) from ``base_model``; ``scores``: an ``rlcap eval``'s scores.json, or None (not
    evaluated yet)."""
    folder = Path(folder)
    method = str(config.get("algorithm", "?"))
    header = {"base_model": base_model, "library_name": "transformers", "pipeline_tag": pipeline_tag(folder),
              "tags": ["rlcap", method, "image-captioning", *(["reinforcement-learning"] if method != "xe" else [])]}
    lines = ["---", yaml.safe_dump(header, sort_keys=False).rstrip(), "---", "",
             f"# {base_model}, tuned by rlcap ({method})", "",
             f"A captioner fine-tuned from `{base_model}` with rlcap's `{method}` method "
             f"(`rlcap train`, algorithm: {method}). It is a transformers folder: `from_pretrained` loads it and "
             "its `generate()` decodes as the run's evaluation did.", "",
             "## Training", "", *_training_table(config), "", "## Scores", "", *_scores_lines(scores)]
    path = folder / CARD
    write_text(path, "\n".join(lines) + "\n")
    return path


def _training_table(config: dict[str, Any]) -> list[str]:
    data = config.get("data", {})
    sizes = config.get("data_size", {})
    size = ", ".join(f"{n} {split}" for split, n in sizes.items()) or "not recorded"
    rows = [("method", f"`{config.get('algorithm', '?')}`"), ("reward", _reward(config)),
            ("data", f"`{Path(str(data.get('dataset', '?'))).name}` ({size} images)")]
    for section, key in _SETTINGS:
        value = config.get(section) if key is None else config.get(section, {}).get(key)
        unused = (key in ("lora_rank", "lora_alpha") and config.get("model", {}).get("train") != "lora"
                  or (key == "max_train_images" and value == 0))  # (0: every training image)
        if value is not None and value != "" and not unused:
            rows.append((section if key is None else f"{section}.{key}", f"`{value}`"))
    return ["| setting | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]


def _reward(config: dict[str, Any]) -> str:
    """The run's reward as its weights (``cider_d`` 1.0), or none (XE: the captions' likelihood)."""
    if config.get("algorithm") == "xe":
        return "none (cross-entropy on the reference captions)"
    weights = config.get("reward", {}).get("weights", {})
    return " + ".join(f"{w:g} x `{name}`" for name, w in weights.items()) or "none"


def _scores_lines(scores: dict[str, Any] | None) -> list[str]:
    if not scores:
        return ["No `rlcap eval` has scored this checkpoint yet; `rlcap eval CHECKPOINT` adds its scores here."]
    evaluated = scores.get("evaluated", {})
    lines = [f"`rlcap eval` on the `{evaluated.get('split', '?')}` split of "
             f"`{Path(str(evaluated.get('data', {}).get('dataset', '?'))).name}`:", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {value:.4f} |" if isinstance(value, (int, float)) else f"| {name} | {value} |"
              for name, value in scores.get("model", {}).items()]
    return lines


def add_scores(checkpoint: str | Path, scores: dict[str, Any]) -> Path | None:
    """Write the card of ``checkpoint``'s exported folder again with ``scores`` (what ``rlcap eval`` has just
    written to scores.json); None when the checkpoint exports no transformers folder (rlcap's own captioners)."""
    checkpoint = Path(checkpoint)
    folder = checkpoint / EXPORT
    if not (folder / "config.json").is_file():
        return None
    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{checkpoint}: cannot read its config.json for the model card ({exc})") from None
    base = read_header(folder / CARD).get("base_model") or folder.name
    return write_card(folder, config, str(base), scores)
