"""rlcap.models.hf.build_vlm: each vision-language family built tiny offline reloads as a downloaded one does
(``AutoModelForImageTextToText``, ``AutoProcessor`` or, for Qwen2-VL's without torchvision, its tokenizer and image
processor) and ``generate()`` runs on a picture and the family's prompt."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
import transformers as t  # noqa: E402
from PIL import Image  # noqa: E402

from rlcap.errors import ConfigError  # noqa: E402
from rlcap.models.hf.build_vlm import VLM_FAMILIES, build_vlm  # noqa: E402

CAPTIONS = ["a red circle above a blue square", "two green triangles", "a small yellow square left of a circle"]
QWEN = ("qwen2_vl", "qwen2_5_vl")  # their processors hold a video processor: transformers needs torchvision for it
# transformers builds these processors only with torchvision (a video processor; Pixtral's module imports its
# torchvision image processor's): rlcap's load_processor makes them of their parts without it
OF_PARTS = ("qwen3_vl", "glm4v", "internvl", "llava_onevision", "mistral3")
PROMPTS = {"florence2": "<CAPTION>", "paligemma": "<image>caption en"}  # the others: their chat template's
# the image token where the tokenizer names none (the released idefics2-8b's neither: its processor adds it)
IMAGE_TOKENS = {"idefics2": "<image>"}
USER_TURN = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this image."}]}]


def _picture() -> Image.Image:
    return Image.new("RGB", (40, 32), (200, 30, 30))  # not square: Qwen2-VL's grid and SmolVLM's tiles follow it


def _inputs(folder: Path, family: str) -> tuple[dict, t.PreTrainedTokenizerBase, str]:
    """The model's inputs for one picture and the family's prompt, as its processor makes them, its tokenizer and
    image token; Qwen2-VL's by hand where torchvision is missing: the image pad repeated once per merged patch of
    the picture's grid."""
    if family in QWEN:
        tok, pixels = t.AutoTokenizer.from_pretrained(folder), t.AutoImageProcessor.from_pretrained(folder)
        prompt = tok.apply_chat_template(USER_TURN, add_generation_prompt=True, tokenize=False)
        image = pixels(images=[_picture()], return_tensors="pt")
        n = int(image["image_grid_thw"][0].prod()) // pixels.merge_size ** 2
        text = tok([prompt.replace("<|image_pad|>", "<|image_pad|>" * n)], return_tensors="pt")
        return {**text, **image}, tok, tok.image_token
    if family in OF_PARTS:
        from rlcap.encoders.hf_vlm import load_processor

        processor = load_processor(folder)
    else:
        processor = t.AutoProcessor.from_pretrained(folder)
    prompt = PROMPTS.get(family) or processor.apply_chat_template(USER_TURN, add_generation_prompt=True)
    inputs = processor(images=[_picture()], text=[prompt], return_tensors="pt")
    return dict(inputs), processor.tokenizer, processor.image_token


@pytest.mark.parametrize("family", VLM_FAMILIES)
def test_family_builds_reloads_and_generates(tmp_path: Path, family: str) -> None:
    folder = build_vlm(family, tmp_path / family, CAPTIONS, size="tiny", seed=0)
    model = t.AutoModelForImageTextToText.from_pretrained(folder).eval()
    n_params = sum(p.numel() for p in model.parameters())
    assert 20_000 < n_params < 1_000_000, n_params
    inputs, tok, image_token = _inputs(folder, family)
    image_id = model.config.image_token_id
    # config and tokenizer agree on the image token (the tokenizer's own name for it where it has one: Gemma 3's
    # processor names its placeholder <start_of_image>, which it expands into the tokenizer's <image_soft_token>s)
    assert image_id == tok.convert_tokens_to_ids(IMAGE_TOKENS.get(family) or getattr(tok, "image_token", None)
                                                 or image_token)
    if "input_ids" in inputs and family != "florence2":
        assert (inputs["input_ids"] == image_id).any()  # the processor put the picture's tokens in the prompt
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    new = out[:, -5:] if not model.config.is_encoder_decoder else out
    assert new.shape[0] == 1 and new.shape[1] >= 5
    assert int(new.max()) < len(tok)  # every generated id is one of the tokenizer's


def test_words_of_the_captions_are_whole_tokens(tmp_path: Path) -> None:
    folder = build_vlm("smolvlm", tmp_path / "m", CAPTIONS)
    tok = t.AutoTokenizer.from_pretrained(folder)
    ids = tok("a red circle above a blue square", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == "a red circle above a blue square".split()
    assert tok.chat_template is not None and "<image>" in tok.chat_template


def test_seed_decides_the_weights(tmp_path: Path) -> None:
    weights = [t.AutoModelForImageTextToText.from_pretrained(build_vlm("llava", tmp_path / str(i), CAPTIONS, seed=s))
               .state_dict() for i, s in enumerate((0, 0, 1))]
    name = "lm_head.weight"
    assert torch.equal(weights[0][name], weights[1][name])
    assert not torch.equal(weights[0][name], weights[2][name])


@pytest.mark.parametrize("family", QWEN + OF_PARTS)
def test_processor_loads_with_torchvision_as_without(tmp_path: Path, family: str) -> None:
    pytest.importorskip("torchvision")
    folder = build_vlm(family, tmp_path / family, CAPTIONS)
    processor = t.AutoProcessor.from_pretrained(folder)
    prompt = processor.apply_chat_template(USER_TURN, add_generation_prompt=True)
    inputs = processor(images=[_picture()], text=[prompt], return_tensors="pt")
    expected, _, _ = _inputs(folder, family)
    assert torch.equal(inputs["input_ids"], expected["input_ids"])


def test_small_is_a_benchmark_size(tmp_path: Path) -> None:
    folder = build_vlm("qwen2_vl", tmp_path / "small", CAPTIONS, size="small")
    n_params = sum(p.numel() for p in t.AutoModelForImageTextToText.from_pretrained(folder).parameters())
    assert 10_000_000 < n_params < 30_000_000, n_params


@pytest.mark.parametrize(("args", "item"), [(("gpt4",), "--family"), (("llava", "base"), "--size")])
def test_bad_family_or_size_names_the_option(tmp_path: Path, args: tuple[str, ...], item: str) -> None:
    family, *size = args
    with pytest.raises(ConfigError, match=item):
        build_vlm(family, tmp_path / "m", CAPTIONS, *size)


def test_cli_builds_a_vlm_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`rlcap hf-captioner --family smolvlm`: a SmolVLM folder whose tokenizer learnt the dataset's training
    captions; `--size base` is refused in one line naming the option."""
    from rlcap.cli import main
    from tests.tiny import make_tiny_dataset

    dataset, _ = make_tiny_dataset(tmp_path)
    out = tmp_path / "vlm"
    assert main(["hf-captioner", str(out), "--dataset", str(dataset), "--family", "smolvlm", "--size", "tiny",
                 "--tokenizer", "word"]) == 0
    tok = t.AutoProcessor.from_pretrained(out).tokenizer
    words = {w for image in json.loads(dataset.read_text())["images"] if image["split"] == "train"
             for s in image["sentences"] for w in re.findall(r"\w+|[^\w\s]", s["raw"].lower())}
    assert words <= set(tok.get_vocab())
    capsys.readouterr()
    assert main(["hf-captioner", str(tmp_path / "b"), "--dataset", str(dataset), "--family", "qwen2_vl",
                 "--size", "base"]) == 2
    assert "--size" in capsys.readouterr().err


def test_shapes_vlm_benchmark_prepares_the_pictures_the_model_and_its_store(tmp_path, monkeypatch):
    """`rlcap bench --benchmark shapes-vlm`'s data: the shapes pictures, a small SmolVLM built offline in its data
    folder (the benchmark's policy) and the store of its image tokens (a few pictures here)."""
    import dataclasses

    import h5py

    from rlcap.bench import registry
    from rlcap.data.synthetic import shapes

    few = dataclasses.replace(shapes.ShapesConfig(), n_train=4, n_val=2, n_test=2, workers=1)
    monkeypatch.setattr(shapes, "ShapesConfig", lambda: few)
    benchmark = registry.BENCHMARKS["shapes-vlm"]
    dataset, store = benchmark.prepare(tmp_path, 0, lambda line: None)
    folder = tmp_path / benchmark.policy
    assert dataset.is_file() and type(t.AutoModelForImageTextToText.from_pretrained(folder)).__name__ == \
        "Idefics3ForConditionalGeneration"
    with h5py.File(store) as h5:
        assert len(h5["att"]) == 8
