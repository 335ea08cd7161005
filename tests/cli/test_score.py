"""`rlcap score` run in-process through rlcap.cli.main."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlcap.cli import main


@pytest.fixture
def files(tmp_path):
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps({"annotations": [
        {"image_id": 1, "caption": "A dog on a mat."}, {"image_id": 1, "caption": "A brown dog on a mat."},
        {"image_id": 2, "caption": "A cat on a sofa."}, {"image_id": 2, "caption": "A grey cat sleeping."},
    ]}))  # fmt: skip
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({"1": ["a dog on a mat", "a dog"], "2": ["a cat on a sofa", "a cat sleeping"]}))
    return refs, preds


def test_score_writes_corpus_and_per_image(files, tmp_path, capsys):
    refs, preds = files
    out = tmp_path / "scores.json"
    metrics = "Bleu_1,Bleu_2,Bleu_3,Bleu_4,ROUGE_L,CIDEr,Div-1,Div-2,mBLEU-4,Self-BLEU,Vocab,Novelty"
    code = main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", metrics,
                 "--train-refs", str(refs), "--out", str(out)])  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    assert "CIDEr" in table and "mBLEU-4" in table
    report = json.loads(out.read_text())
    assert set(report["corpus"]) == set(metrics.split(","))
    assert set(report["per_image"]) == {"1", "2"}
    assert {"Bleu_4", "CIDEr", "Div-1", "mBLEU-4"} <= set(report["per_image"]["1"])
    # "a dog on a mat" and "a cat on a sofa" repeat training captions once tokenized: 2 of 4 new
    assert report["corpus"]["Novelty"] == 0.5


def test_score_with_similarity_matrix(files, tmp_path):
    refs, preds = files
    sim = tmp_path / "sim.npz"
    np.savez(sim, similarity=np.eye(2), caption_image=np.array([0, 1]))
    out = tmp_path / "scores.json"
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--similarity", str(sim), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["corpus"]["t2i_R@1"] == 100.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"1": ["a dog"', "not valid JSON"),
        (b'{"1": ["caf\xe9"]}', "not UTF-8"),
        (b'{"9": ["a dog"]}', "image '9' of the predictions has no references"),
    ],
)
def test_bad_preds_give_one_line_error(files, tmp_path, capsys, content, message):
    refs, _ = files
    preds = tmp_path / "bad.json"
    preds.write_bytes(content)
    assert main(["score", "--refs", str(refs), "--preds", str(preds)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_official_spice_without_corenlp_says_how_to_supply_it(files, capsys, monkeypatch):
    monkeypatch.setenv("RLCAP_CORENLP_DIR", str(files[0].parent))  # (the last release's variable: read by no one)
    refs, preds = files
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "SPICE",
                 "--spice-impl", "official-jar"]) == 2
    err = capsys.readouterr().err
    assert "pass --corenlp-dir FOLDER" in err and "not found" not in err and "RLCAP_CORENLP_DIR" not in err


def test_spice_in_python_needs_no_java(files, capsys):
    refs, preds = files
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "SPICE"]) == 0
    assert "spice_impl: python" in capsys.readouterr().out


def test_unknown_metric(files, capsys):
    refs, preds = files
    assert main(["score", "--refs", str(refs), "--preds", str(preds), "--metrics", "BLEU"]) == 2
    assert "choose from" in capsys.readouterr().err
