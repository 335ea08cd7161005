"""`rlcap score`: an image twice in COCO results, --out naming a folder, a Karpathy file as --refs, a captions file
of rlcap bench as --preds."""

from __future__ import annotations

import json

import pytest

from rlcap.cli import main


@pytest.fixture
def refs(tmp_path):
    path = tmp_path / "refs.json"
    path.write_text(json.dumps({"1": ["a dog on a mat", "a brown dog"], "2": ["a cat on a sofa", "a grey cat"]}))
    return path


def _preds(tmp_path, records):
    path = tmp_path / "preds.json"
    path.write_text(json.dumps(records))
    return path


def test_image_twice_in_coco_results_is_one_line(refs, tmp_path, capsys):
    preds = _preds(tmp_path, [{"image_id": 1, "caption": "a dog"}, {"image_id": 2, "caption": "a cat"},
                              {"image_id": 1, "caption": "a dog on a mat"}])
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap score: error: {preds}: image '1' appears twice (results[0] and [2]); COCO results hold one "
        "caption per image (for several, use {image_id: [captions]})\n")


def test_a_bench_captions_file_as_preds(refs, tmp_path, capsys):
    """rlcap bench writes captions/NAME.json as {"captions": {id: caption}, "per_image": ...}: scored as it is, the
    same as the captions alone."""
    captions = {"1": "a brown dog on a mat", "2": "a cat"}
    bench = _preds(tmp_path, {"captions": captions, "per_image": {"1": {}, "2": {}}, "ranks": {}})
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: [v] for k, v in captions.items()}))
    outputs = []
    for preds in (bench, plain):
        assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr,Bleu_1"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "CIDEr" in outputs[0]
    # an image literally named "captions" is still an image of a plain mapping
    from rlcap.metrics.io import read_preds

    odd = _preds(tmp_path, {"captions": ["a dog"], "1": ["a cat"]})
    assert read_preds(odd) == {"captions": ["a dog"], "1": ["a cat"]}


def test_out_naming_a_folder_writes_scores_json_inside(refs, tmp_path, capsys):
    preds = _preds(tmp_path, [{"image_id": 1, "caption": "a dog"}, {"image_id": 2, "caption": "a cat"}])
    folder = tmp_path / "results"
    folder.mkdir()
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr", "--out", str(folder)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {folder / 'scores.json'}"
    assert set(json.loads((folder / "scores.json").read_text())["per_image"]) == {"1", "2"}


def test_out_that_cannot_be_written_is_one_line(refs, tmp_path, capsys):
    preds = _preds(tmp_path, [{"image_id": 1, "caption": "a dog"}])
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr",
                 "--out", str(blocker / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err == f"rlcap score: error: cannot write {blocker / 's.json'}: {blocker} is a file, not a folder\n"


def test_karpathy_file_as_refs(tmp_path, capsys):
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"dataset": "coco", "images": [
        {"cocoid": 391895, "split": "test", "filename": "a.jpg",
         "sentences": [{"raw": "A man riding a bike.", "tokens": []}, {"raw": "A cyclist on a road."}]},
        {"cocoid": 522418, "split": "train", "filename": "b.jpg", "sentences": [{"raw": "A woman cutting cake."}]},
    ]}))
    preds = _preds(tmp_path, [{"image_id": 391895, "caption": "a man riding a bike"}])
    out = tmp_path / "s.json"
    assert main(["score", "--refs", str(karpathy), "--preds", str(preds), "--metrics", "Bleu_1",
                 "--out", str(out)]) == 0
    assert json.loads(out.read_text())["corpus"]["Bleu_1"] == pytest.approx(1.0)


def test_unusable_karpathy_file_is_one_line(tmp_path, capsys):
    karpathy = tmp_path / "dataset.json"
    karpathy.write_text(json.dumps({"images": [{"filename": "a.jpg", "sentences": []}]}))
    preds = _preds(tmp_path, [{"image_id": 1, "caption": "a dog"}])
    assert main(["score", "--refs", str(karpathy), "--preds", str(preds), "--metrics", "CIDEr"]) == 2
    assert capsys.readouterr().err == (
        f"rlcap score: error: {karpathy}: images[0] needs one of cocoid, id, imgid and a 'sentences' list "
        "(a Karpathy split file)\n")
