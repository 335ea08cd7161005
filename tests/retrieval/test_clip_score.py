"""CLIP-S and RefCLIP-S ([Hessel21]) against a direct computation with transformers' CLIPModel on a tiny CLIP:
per caption and per corpus, the prefix and the weight; through `rlcap score --clip` and `rlcap eval --clip`."""

import json

import numpy as np
import pytest
import torch

from rlcap.cli import main
from rlcap.eval.clip_score import load_clip, score_with_clip
from rlcap.metrics.clip_score import CLIP_S_PREFIX, CLIP_S_WEIGHT, clip_s, refclip_s, with_prefix
from tests.cli.in_process import run_cli
from tests.retrieval.test_clip import make_tiny_clip, picture

transformers = pytest.importorskip("transformers")

CAPTIONS = {"a": "a red circle", "b": "blue squares", "c": "zebra", "d": "green star", "e": "two dogs"}
REFS = {"a": ["a circle that is red", "red round shape"], "b": ["two squares"], "c": ["a striped horse", "zebra"],
        "d": ["a star"], "e": ["dogs", "a dog and a dog"]}


def tiny_clip(folder):
    """The tiny CLIP with its image projection negated: a random CLIP gives these captions and pictures mostly
    negative cosines, which CLIP-S clips to 0; negated, most are positive and one is clipped."""
    make_tiny_clip(folder)
    model = transformers.CLIPModel.from_pretrained(folder)
    with torch.no_grad():
        model.visual_projection.weight.neg_()
    model.save_pretrained(folder)
    return folder


def _direct(folder, captions, refs, images):
    """CLIP-S and RefCLIP-S written out from CLIPModel's own embeddings, as [Hessel21]'s code computes them."""
    model = transformers.CLIPModel.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    processor = transformers.AutoImageProcessor.from_pretrained(folder)

    def text(strings):
        enc = tokenizer(["A photo depicts " + s for s in strings], padding=True, return_tensors="pt")
        with torch.no_grad():
            out = model.get_text_features(**enc)
        out = out if isinstance(out, torch.Tensor) else out.pooler_output
        return out / out.norm(dim=-1, keepdim=True)

    pixels = processor(images=images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        out = model.get_image_features(pixel_values=pixels)
    out = out if isinstance(out, torch.Tensor) else out.pooler_output
    image = out / out.norm(dim=-1, keepdim=True)
    cand = text(captions)
    per_clip = 2.5 * torch.clamp((cand * image).sum(-1), min=0)
    best = torch.stack([torch.clamp((text(r) @ cand[k]).max(), min=0) for k, r in enumerate(refs)])
    per_ref = 2 * per_clip * best / (per_clip + best)
    return per_clip.double().numpy(), per_ref.double().numpy()


def test_clip_s_and_refclip_s_equal_a_direct_computation(tmp_path):
    tiny_clip(tmp_path / "clip")
    images = {i: picture(k) for k, i in enumerate(CAPTIONS)}
    corpus, per_image = score_with_clip(load_clip(tmp_path / "clip"), CAPTIONS, images, REFS)
    per_clip, per_ref = _direct(tmp_path / "clip", list(CAPTIONS.values()), list(REFS.values()), list(images.values()))
    for k, i in enumerate(CAPTIONS):
        assert per_image[i]["CLIP-S"] == pytest.approx(per_clip[k], abs=1e-6)
        assert per_image[i]["RefCLIP-S"] == pytest.approx(per_ref[k], abs=1e-6)
    assert corpus["CLIP-S"] == pytest.approx(per_clip.mean(), abs=1e-6)
    assert corpus["RefCLIP-S"] == pytest.approx(per_ref.mean(), abs=1e-6)
    # the captions score differently, and one cosine is clipped: the checks can fail
    assert (per_clip == 0).sum() == 1 and len(set(np.round(per_clip, 6))) == len(CAPTIONS)
    # the weight scales CLIP-S; without references there is no RefCLIP-S
    half, _ = score_with_clip(load_clip(tmp_path / "clip"), CAPTIONS, images, None, weight=1.25)
    assert half == {"CLIP-S": pytest.approx(corpus["CLIP-S"] / 2, abs=1e-9)}


def test_the_prefix_and_the_formulas():
    assert CLIP_S_PREFIX == "A photo depicts" and CLIP_S_WEIGHT == 2.5
    assert with_prefix("a dog") == "A photo depicts a dog" and with_prefix("x", "P ") == "P x"
    np.testing.assert_allclose(clip_s(np.array([0.2, -0.1, 0.4])), [0.5, 0.0, 1.0])
    # H-mean(0.5, 0.5) = 0.5; H-mean(1.0, 0.25) = 2 * 0.25 / 1.25 = 0.4; a negative reference cosine counts 0
    np.testing.assert_allclose(refclip_s(np.array([0.5, 1.0, 0.6, 0.0]), np.array([0.5, 0.25, -0.3, 0.0])),
                               [0.5, 0.4, 0.0, 0.0])


def test_the_prefix_is_what_clip_reads(tmp_path):
    """Scoring "c" is scoring "A photo depicts c" with the prefix read by CLIP: the score changes without it."""
    tiny_clip(tmp_path / "clip")
    clip = load_clip(tmp_path / "clip")
    image = picture(0)
    ours = score_with_clip(clip, {"x": "red circle"}, {"x": image})[1]["x"]["CLIP-S"]
    text = clip.embed_captions(["A photo depicts red circle", "red circle"])
    pixels = clip.embed_images([image])[0]
    with_p, without = (float(text[k] @ pixels) for k in (0, 1))  # the cosines, before CLIP-S clips them
    assert ours == pytest.approx(2.5 * max(with_p, 0), abs=1e-6) and with_p != pytest.approx(without, abs=1e-4)


def test_rlcap_score_with_clip(tmp_path, capsys):
    tiny_clip(tmp_path / "clip")
    (tmp_path / "images").mkdir()
    for k, i in enumerate(CAPTIONS):
        picture(k).save(tmp_path / "images" / f"{i}.png")
    (tmp_path / "refs.json").write_text(json.dumps(REFS))
    (tmp_path / "preds.json").write_text(json.dumps([{"image_id": i, "caption": c} for i, c in CAPTIONS.items()]))
    assert main(["score", "--refs", str(tmp_path / "refs.json"), "--preds", str(tmp_path / "preds.json"),
                 "--metrics", "CIDEr", "--clip", str(tmp_path / "clip"), "--images", str(tmp_path / "images"),
                 "--out", str(tmp_path / "scores.json")]) == 0
    out = json.loads((tmp_path / "scores.json").read_text())
    images = {i: picture(k) for k, i in enumerate(CAPTIONS)}
    corpus, per_image = score_with_clip(load_clip(tmp_path / "clip"), CAPTIONS, images, REFS)
    assert out["corpus"]["CLIP-S"] == pytest.approx(corpus["CLIP-S"], abs=1e-6)
    assert out["corpus"]["RefCLIP-S"] == pytest.approx(corpus["RefCLIP-S"], abs=1e-6)
    assert out["per_image"]["b"]["CLIP-S"] == pytest.approx(per_image["b"]["CLIP-S"], abs=1e-6)
    assert "CLIP-S" in capsys.readouterr().out
    (tmp_path / "images" / "c.png").unlink()
    rc, _, err = run_cli(capsys, "score", "--refs", str(tmp_path / "refs.json"), "--preds",
                         str(tmp_path / "preds.json"), "--metrics", "CIDEr", "--clip", str(tmp_path / "clip"),
                         "--images", str(tmp_path / "images"))
    said = [line for line in err.splitlines() if "error" in line.lower()]
    assert rc == 2 and len(said) == 1 and "image 'c': no picture" in said[0], err


def test_rlcap_eval_with_clip_and_the_report(tmp_path, capsys):
    """`rlcap eval --clip`: CLIP-S and RefCLIP-S of the checkpoint's captions of the test pictures, in scores.json
    and per_image.json; the report's table and gallery show them."""
    from PIL import Image

    from tests.report.conftest import add_pictures
    from tests.tiny import tiny_xe_run

    dataset, _, best = tiny_xe_run(tmp_path)
    add_pictures(dataset)
    tiny_clip(tmp_path / "clip")
    assert main(["eval", str(best), "--beam-size", "1", "--clip", str(tmp_path / "clip"),
                 "--out", str(tmp_path / "ev")]) == 0
    scores = json.loads((tmp_path / "ev" / "scores.json").read_text())["model"]
    per_image = json.loads((tmp_path / "ev" / "per_image.json").read_text())
    predictions = json.loads((tmp_path / "ev" / "predictions.json").read_text())
    captions = {str(p["image_id"]): p["caption"] for p in predictions}
    items = {str(i["imgid"]): i for i in json.loads(dataset.read_text())["images"] if i["split"] == "test"}
    pictures = {i: Image.open(dataset.parent / item["filename"]) for i, item in items.items()}
    refs = {i: [s["raw"] for s in item["sentences"]] for i, item in items.items()}
    corpus, expected = score_with_clip(load_clip(tmp_path / "clip"), captions, pictures, refs)
    assert scores["CLIP-S"] == pytest.approx(corpus["CLIP-S"], abs=1e-6)
    assert scores["RefCLIP-S"] == pytest.approx(corpus["RefCLIP-S"], abs=1e-6)
    assert all(per_image[i]["CLIP-S"] == pytest.approx(expected[i]["CLIP-S"], abs=1e-6) for i in captions)
    rc, _, err = run_cli(capsys, "eval", str(best), "--clip", str(best), "--out", str(tmp_path / "ev2"))
    said = [line for line in err.splitlines() if "error" in line.lower()]  # a folder without a CLIP: one line
    assert rc == 2 and len(said) == 1 and "CLIP-S reads a CLIP folder" in said[0], err
    assert not (tmp_path / "ev2" / "predictions.json").exists()
    assert main(["report", str(tmp_path / "ev"), "--dataset", str(dataset)]) == 0
    page = (tmp_path / "ev" / "report.html").read_text()
    first = next(iter(expected.values()))["CLIP-S"]
    assert ">CLIP-S<" in page and ">RefCLIP-S<" in page and f"CLIP-S {first:.2f}" in page


def test_rlcap_bench_with_clip(tmp_path):
    """`rlcap bench --clip`: each method's beam captions get CLIP-S and RefCLIP-S, in results.json and results.md."""
    from PIL import Image

    from rlcap.bench.methods import run_benchmark
    from tests.report.conftest import add_pictures
    from tests.tiny import make_tiny_dataset, tiny_overrides

    dataset, feats = make_tiny_dataset(tmp_path)
    add_pictures(dataset)
    tiny_clip(tmp_path / "clip")
    tiny = [o for o in tiny_overrides(dataset, feats, tmp_path / "unused") if not o.startswith("out_dir=")]
    results = run_benchmark("shapes", ["xe"], tmp_path / "bench", configs="configs",
                            xe_overrides=[*tiny, "xe.epochs=1"], prepared=(dataset, feats), clip=tmp_path / "clip")
    captions = json.loads((tmp_path / "bench" / "captions" / "xe.json").read_text())
    items = {str(i["imgid"]): i for i in json.loads(dataset.read_text())["images"] if i["split"] == "test"}
    corpus, per_image = score_with_clip(load_clip(tmp_path / "clip"), captions["captions"],
                                        {i: Image.open(dataset.parent / item["filename"]) for i, item in items.items()},
                                        {i: [s["raw"] for s in item["sentences"]] for i, item in items.items()})
    assert results["methods"]["xe"]["beam"]["CLIP-S"] == pytest.approx(corpus["CLIP-S"], abs=1e-6)
    assert results["methods"]["xe"]["beam"]["RefCLIP-S"] == pytest.approx(corpus["RefCLIP-S"], abs=1e-6)
    assert all(captions["per_image"][i]["CLIP-S"] == pytest.approx(per_image[i]["CLIP-S"], abs=1e-6) for i in items)
    assert "beam CLIP-S | beam RefCLIP-S" in (tmp_path / "bench" / "results.md").read_text()
