"""The model card of an exported transformers folder (a checkpoint's ``hf/``): ``README.md`` with the metadata
header the Hugging Face Hub reads (``base_model``, ``library_name``, ``pipeline_tag``, ``tags``), how its
``generate()`` decodes, the prompt a prompted policy was trained with (also in the folder's ``prompt.json``,
:data:`PROMPT`), how the policy was trained (method, reward, the method's own section, the settings that matter,
the data and its size) and the scores of the last ``rlcap eval`` that decoded as ``generate()`` does.

Every family that exports a transformers folder calls :func:`write_card` after writing it (``HFArchitecture.export``);
``rlcap eval`` calls :func:`add_scores`, which writes the card again with the scores it has just written to
``scores.json`` when it decoded with the checkpoint's own settings (:func:`own_decoding`: its beam, lengths,
length penalty, n-gram blocking and precision) and leaves the card as it was otherwise: a card shows the numbers
a user of its ``generate()`` gets, never those of an exploratory evaluation (``--beam-size 1 --max-len 2``).
Nothing here imports torch: the card is read from the run config, the checkpoint's manifest and the folder's own
files."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from rlcap.errors import DataError
from rlcap.files import write_text

log = logging.getLogger(__name__)

CARD = "README.md"
PROMPT = "prompt.json"  # {"prompt": the text the processor reads with each picture, "usage": how to pass it}
EXPORT = "hf"  # the folder of a checkpoint its transformers families export (models/hf/architecture.py's EXPORT)
# a folder the Hub's cache holds: .../models--ORG--NAME/snapshots/REVISION
_HUB_CACHE = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/?$")
# settings a reader of the card needs to repeat the run, besides the method's own section: (section, key)
_SETTINGS = (("model", "train"), ("model", "lora_rank"), ("model", "lora_alpha"), ("model", "dtype"),
             ("model", "prompt"), ("optim", "name"), ("optim", "lr"), ("rl", "epochs"), ("rl", "batch_size"),
             ("rl", "n_samples"), ("rl", "sample_method"), ("rl", "kl_coef"), ("data", "max_len"),
             ("data", "max_train_images"), ("decode", "beam_size"), ("decode", "max_len"),
             ("decode", "length_penalty"), ("decode", "no_repeat_ngram"), ("precision", None), ("seed", None))
# what decides an evaluation's captions (rlcap eval's --beam-size, --max-len, --length-penalty, --no-repeat-ngram,
# --precision); the last two only in a beam search (rlcap's greedy decoding reads neither)
DECODING = ("beam_size", "max_len", "length_penalty", "no_repeat_ngram", "precision")
_BEAM_ONLY = ("length_penalty", "no_repeat_ngram")
_USAGE = "inputs = processor(text=[prompt], images=[picture], return_tensors='pt'); model.generate(**inputs)"


@runtime_checkable
class FromFolder(Protocol):
    """A policy loaded from a transformers folder (``folder``: where), whose export's ``base_model`` it names."""

    folder: Path


@runtime_checkable
class Prompted(Protocol):
    """A policy that reads a text before each picture (a vision-language model's chat turn or task prefix,
    Florence-2's task token): ``prompt``, the text its processor reads with the picture, which its export records."""

    prompt: str


def base_model_of(source: str | Path) -> str:
    """What a folder a policy was loaded from is, for ``base_model``: the base its own rlcap card names (a run
    started from an earlier run's ``hf/``), the Hub id of a folder in the Hub's cache (``models--ORG--NAME``),
    the ``_name_or_path`` its config records when that is a Hub id, else the folder itself, by its absolute path
    (its name alone reads as a model type where the folder is named after one: ``qwen2_vl``)."""
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
    return str(source.expanduser().resolve())


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


def own_decoding(config: dict[str, Any]) -> dict[str, Any]:
    """The decoding of the checkpoint whose run ``config`` this is (its ``decode`` section and ``precision``):
    what its exported generation config holds, what ``rlcap eval`` does without options, :data:`DECODING`'s keys."""
    decode = config.get("decode", {})
    return {**{key: decode.get(key) for key in DECODING[:-1]}, "precision": config.get("precision", "fp32")}


def same_decoding(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two decodings (:data:`DECODING`'s keys) write the same captions: greedy ones (beam 1) read no
    length penalty and block no n-gram."""
    greedy = one.get("beam_size") == other.get("beam_size") == 1
    return all(one.get(key) == other.get(key) for key in DECODING if not (greedy and key in _BEAM_ONLY))


def describe_decoding(decoding: dict[str, Any]) -> str:
    """``beam search of 3, at most 16 tokens, length penalty 0, no n-gram blocking, forward passes in fp32``."""
    beam = decoding.get("beam_size")
    parts = ["greedy" if beam == 1 else f"beam search of {beam}", f"at most {decoding.get('max_len')} tokens"]
    if beam != 1:
        penalty, blocked = decoding.get("length_penalty"), decoding.get("no_repeat_ngram")
        parts += [f"length penalty {penalty:g}" if isinstance(penalty, (int, float)) else f"length penalty {penalty}",
                  f"no repeated {blocked}-gram" if blocked else "no n-gram blocking"]
    if decoding.get("precision"):
        parts.append(f"forward passes in {decoding['precision']}")
    return ", ".join(parts)


def write_card(folder: Path, config: dict[str, Any], base_model: str, scores: dict[str, Any] | None = None,
               prompt: str | None = None) -> Path:
    """Write ``folder/README.md``: the card of the policy exported there, trained by the run ``config`` (a
    checkpoint's config.json) from ``base_model``; ``scores``: an ``rlcap eval``'s scores.json that decoded with
    the checkpoint's own settings, or None (not evaluated yet); ``prompt``: the text a prompted policy reads
    before each picture (:class:`Prompted`), also written to ``folder/prompt.json`` (None: it reads none)."""
    folder = Path(folder)
    method = str(config.get("algorithm", "?"))
    header = {"base_model": base_model, "library_name": "transformers", "pipeline_tag": pipeline_tag(folder),
              "tags": ["rlcap", method, "image-captioning", *(["reinforcement-learning"] if method != "xe" else [])]}
    own = own_decoding(config)
    title = Path(base_model).name if Path(base_model).is_absolute() else base_model
    lines = ["---", yaml.safe_dump(header, sort_keys=False).rstrip(), "---", "",
             f"# {title}, tuned by rlcap ({method})", "",
             f"A captioner fine-tuned from `{base_model}` with rlcap's `{method}` method "
             f"(`rlcap train`, algorithm: {method}). It is a transformers folder: `from_pretrained` loads it, and "
             "its `generate()` without decoding arguments decodes as its generation config says, the run's `decode` "
             f"section: {describe_decoding({**own, 'precision': None})} (rlcap's forward passes in "
             f"{own['precision']}). The scores below were decoded so.", "",
             *_prompt_lines(prompt), "## Training", "", *_training_table(config), "", "## Scores", "",
             *_scores_lines(scores)]
    _write_prompt(folder, prompt)
    path = folder / CARD
    write_text(path, "\n".join(lines) + "\n")
    return path


def _prompt_lines(prompt: str | None) -> list[str]:
    if prompt is None:
        return []
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", prompt)), default=0))
    return ["## Prompt", "",
            "It was trained with this text before each picture, the text its processor reads with the picture (a "
            f"chat template's turn, its image tokens included), also in `{PROMPT}`: `generate()` writes the "
            "captions scored here with it, and other captions with another prompt.", "",
            f"{fence}text", prompt, fence, "", f"`{_USAGE}`", ""]


def _write_prompt(folder: Path, prompt: str | None) -> None:
    path = folder / PROMPT
    if prompt is not None:
        write_text(path, json.dumps({"prompt": prompt, "usage": _USAGE}, indent=2, ensure_ascii=False) + "\n")
    elif path.is_file():  # (a prompt file the folder's processor files brought along, of another policy)
        path.unlink()


def read_prompt(folder: Path) -> str | None:
    """The prompt ``folder/prompt.json`` records (None: no such file, the policy reads no prompt)."""
    try:
        prompt = json.loads((Path(folder) / PROMPT).read_text(encoding="utf-8")).get("prompt")
    except OSError:
        return None
    except ValueError as exc:
        raise DataError(f"{Path(folder) / PROMPT}: not valid JSON ({exc})") from None
    return prompt if isinstance(prompt, str) else None


def _cell(value: Any) -> str:
    """A value in a table's cell: between backticks, its pipes escaped and its lines joined."""
    return "`" + str(value).replace("|", "\\|").replace("\n", " ") + "`"


def _training_table(config: dict[str, Any]) -> list[str]:
    data = config.get("data", {})
    sizes = config.get("data_size", {})
    size = ", ".join(f"{n} {split}" for split, n in sizes.items()) or "not recorded"
    method = config.get("algorithm", "?")
    rows = [("method", f"`{method}`"), ("reward", _reward(config)),
            ("data", f"`{Path(str(data.get('dataset', '?'))).name}` ({size} images)")]
    section = config.get(method)  # the method's own section (its name: scst, grpo, xe, ...), every key of it
    if isinstance(section, dict):
        rows += [(f"{method}.{key}", _cell(value)) for key, value in section.items()]
    model = config.get("model", {})
    for part, key in _SETTINGS:
        value = config.get(part) if key is None else config.get(part, {}).get(key)
        unused = (key in ("lora_rank", "lora_alpha") and model.get("train") != "lora"
                  or (key == "max_train_images" and value == 0)  # (0: every training image)
                  or (key == "dtype" and value == "float32"))  # (the default: as loaded)
        if value is not None and value != "" and not unused:
            rows.append((part if key is None else f"{part}.{key}", _cell(value)))
    return ["| setting | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)]


def _reward(config: dict[str, Any]) -> str:
    """The run's reward as its weights (``cider_d`` 1.0), or none (XE: the captions' likelihood)."""
    if config.get("algorithm") == "xe":
        return "none (cross-entropy on the reference captions)"
    weights = config.get("reward", {}).get("weights", {})
    return " + ".join(f"{w:g} x `{name}`" for name, w in weights.items()) or "none"


def _scores_lines(scores: dict[str, Any] | None) -> list[str]:
    if not scores:
        return ["No `rlcap eval` with the checkpoint's own decoding has scored this checkpoint yet; `rlcap eval "
                "CHECKPOINT` adds its scores here (one with other decoding options leaves this card as it is)."]
    evaluated = scores.get("evaluated", {})
    lines = [f"`rlcap eval` on the `{evaluated.get('split', '?')}` split of "
             f"`{Path(str(evaluated.get('data', {}).get('dataset', '?'))).name}`, decoded as `generate()` decodes "
             f"({describe_decoding(evaluated.get('decoding', {}))}):", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {name} | {value:.4f} |" if isinstance(value, (int, float)) else f"| {name} | {value} |"
              for name, value in scores.get("model", {}).items()]
    return lines


def add_scores(checkpoint: str | Path, scores: dict[str, Any]) -> Path | None:
    """Write the card of ``checkpoint``'s exported folder again with ``scores`` (what ``rlcap eval`` has just
    written to scores.json) when they were decoded with the checkpoint's own settings (``scores["evaluated"]
    ["decoding"]``, :func:`same_decoding` as :func:`own_decoding`); None when they were not (the card keeps the
    scores it shows, with a line saying so) or the checkpoint exports no transformers folder (rlcap's own
    captioners)."""
    checkpoint = Path(checkpoint)
    folder = checkpoint / EXPORT
    if not (folder / "config.json").is_file():
        return None
    try:
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{checkpoint}: cannot read its config.json for the model card ({exc})") from None
    own, used = own_decoding(config), scores.get("evaluated", {}).get("decoding", {})
    if not same_decoding(own, used):
        log.info("%s keeps its scores: they are those of the checkpoint's own decoding (%s), which its generate() "
                 "does, and this evaluation decoded otherwise (%s)", folder / CARD, describe_decoding(own),
                 describe_decoding(used))
        return None
    base = read_header(folder / CARD).get("base_model") or str(folder.resolve())
    return write_card(folder, config, str(base), scores, read_prompt(folder))
