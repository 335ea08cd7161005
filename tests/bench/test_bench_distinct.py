"""[Chaffin24]'s methods through `rlcap bench`: both retrievers trained once, the method from XE with the
training retriever, and Table 1's columns (retrieval by both judges, quality, Self-BLEU)."""

import json
import sys
from pathlib import Path

import pytest

from rlcap.bench.registry import BENCHMARKS, Benchmark
from rlcap.cli import main
from tests.tiny import make_tiny_dataset, tiny_overrides
from tests.bench.test_bench_registry import _recipe


@pytest.mark.slow
def test_tf_and_wtf_rl_through_the_bench(tmp_path, monkeypatch):
    configs = tmp_path / "configs"
    configs.mkdir()
    tiny = [o for o in tiny_overrides("unused", "unused", "unused") if o.split("=")[0] not in
            ("data.dataset", "data.features", "out_dir")]
    _recipe(configs / "tiny_xe.yaml", [*tiny, "algorithm=xe"])
    retriever = ["algorithm=embedding", "embedding.loss=infonce", "embedding.epochs=1", "embedding.batch_size=8",
                 "embedding.model.word_dim=8", "embedding.model.hidden_dim=8", "embedding.model.joint_dim=8",
                 "data.min_count=1", "track.to=[]", "threads=1"]
    _recipe(configs / "tiny_retrieval.yaml", [*retriever, "data.train_captions=even"])
    _recipe(configs / "tiny_judge.yaml", [*retriever, "data.train_captions=odd", "seed=7"])
    _recipe(configs / "tiny_wtf_rl.yaml", [*[o for o in tiny if not o.startswith(("model.", "xe."))], "algorithm=wtf_rl",
                                           "rl.epochs=1", "rl.batch_size=8", "data.seq_per_img=1", "decode.beam_size=2",
                                           "wtf_rl.discriminator_pretrain_epochs=1", "wtf_rl.discriminator_hidden=8"])
    _recipe(configs / "tiny_tf_continued.yaml", [*tiny, "algorithm=xe", "xe.epochs=1", "data.seq_per_img=1"])

    def prepare(data_dir, image_size, report):
        data_dir.mkdir(parents=True, exist_ok=True)
        return make_tiny_dataset(data_dir)

    monkeypatch.setitem(BENCHMARKS, "tiny", Benchmark(prepare, "tiny"))
    out = tmp_path / "bench"
    assert main(["bench", "--benchmark", "tiny", "--methods", "tf,wtf_rl,tf_continued", "--out", str(out), "--configs",
                 str(configs), "--data", str(tmp_path / "data")]) == 0
    config = json.loads((out / "wtf_rl" / "config.json").read_text())
    assert config["init_from"] == str(out / "xe" / "best")
    assert config["reward"]["paths"] == {"retrieval": str(out / "retrieval" / "best")}
    assert (out / "wtf_rl" / "image_bank.h5").is_file()
    judge = json.loads((out / "judge" / "config.json").read_text())
    assert judge["data"]["train_captions"] == "odd" and judge["seed"] == 7
    results = json.loads((out / "results.json").read_text())
    # [Chaffin24]'s methods are judged at the end of their budget, TF at the XE run's best
    assert results["methods"]["wtf_rl"]["checkpoint"] == str(out / "wtf_rl" / "last")
    assert results["methods"]["tf"]["checkpoint"] == str(out / "xe" / "best")
    # the control: teacher forcing on from the same XE checkpoint, judged at the end of its budget too
    assert json.loads((out / "tf_continued" / "config.json").read_text())["init_from"] == str(out / "xe" / "best")
    assert results["methods"]["tf_continued"]["checkpoint"] == str(out / "tf_continued" / "last")
    for method in ("tf", "wtf_rl", "tf_continued"):
        row = results["methods"][method]["distinct"]
        for column in ("T2I R@1", "I2T R@10", "judge T2I R@1", "judge I2T R@5", "Self-BLEU"):
            assert 0.0 <= row[column] <= 100.0
        assert row["T2I R@1"] <= row["T2I R@5"] <= row["T2I R@10"]
    table = (out / "results.md").read_text()
    assert "| method | T2I R@1 |" in table and "| wtf_rl |" in table

    # bench_distinct.py's additions: the human-caption row (the first reference of each test image, scored as a
    # method's captions are) and the reward-hacking examples (expected ranks, ties shared)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import bench_distinct
    finally:
        sys.path.pop(0)
    data = [f"data.{k}={config['data'][k]}" for k in ("dataset", "features")]
    human = bench_distinct.human_row(str(out), data)
    assert set(human) == set(results["methods"]["tf"]["distinct"])
    assert all(0.0 <= v <= 100.0 for v in human.values()) and human["T2I R@1"] <= human["T2I R@10"]
    assert bench_distinct.human_line(human).startswith("- Human captions")
    examples = bench_distinct.hacking_examples(str(out), data)
    assert len(examples) > 2 and all(row.count(" | ") == 3 for row in examples[2:])
    assert all(float(row.split(" | ")[1]) >= 1 for row in examples[2:])  # expected ranks start at 1
