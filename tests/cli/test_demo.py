"""`rlcap demo`, the main job, end to end in-process on a small shapes set and tiny models."""

import json
from pathlib import Path

from rlcap.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = ["model.embed_dim=16", "model.hidden_dim=16", "model.att_hidden_dim=16", "xe.batch_size=10",
        "rl.batch_size=10", "decode.max_len=8", "data.min_count=1", "track.to=[]", "threads=1"]


def test_demo_end_to_end(tmp_path, capsys):
    out, data = tmp_path / "run", tmp_path / "shapes"
    code = main(["demo", "--out", str(out), "--data", str(data), "--configs", str(CONFIGS), "--image-size", "64",
                 "--n-train", "30", "--n-val", "10", "--n-test", "10", *TINY])
    assert code == 0
    printed = capsys.readouterr().out
    assert "xe" in printed and "scst" in printed and "nearest_neighbour" in printed
    scores = json.loads((out / "scores.json").read_text())
    assert set(scores) == {"model", "stages", "references"}
    for row in (scores["model"], scores["stages"]["xe"], scores["references"]["nearest_neighbour"]):
        assert {"Bleu_1", "Bleu_4", "ROUGE_L", "CIDEr"} <= set(row)
    for stage in ("xe", "scst"):
        assert (out / stage / "best" / "policy.safetensors").is_file()
        assert (out / stage / "log.jsonl").is_file()
        preds = json.loads((out / stage / "eval_test" / "predictions.json").read_text())
        assert len(preds) == 10
    assert (data / "feats_64.h5").is_file() and (data / "dataset_shapes.json").is_file()

    # a second demo into the same folder replaces its two runs and nothing else there
    (out / "notes.txt").write_text("mine")
    first_log = (out / "xe" / "log.jsonl").read_text()
    assert main(["demo", "--out", str(out), "--data", str(data), "--configs", str(CONFIGS), "--image-size", "64",
                 "--n-train", "30", "--n-val", "10", "--n-test", "10", *TINY]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert not list(out.glob("*/.replaced-*")) and (out / "scores.json").is_file()
    records = [json.loads(line) for line in (out / "xe" / "log.jsonl").read_text().splitlines()]
    assert (out / "xe" / "log.jsonl").read_text() != first_log and records[0]["step"] <= 1  # a new run's log
