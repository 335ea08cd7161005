"""benchmarks/bench_qa_reader.py (make bench-qa-reader): the agreement it reads between two readers' rewards, and the
whole script on a tiny reader, dataset and question file made here."""

import json
import sys
from pathlib import Path

import pytest
import torch

from rlcap.data.qa import Question, write_qa
from tests.tiny_reader import make_tiny_reader

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    import bench_qa_reader
finally:
    sys.path.pop(0)


def test_agreement_reads_rewards_and_leave_one_out_advantages():
    base = torch.tensor([0.2, 0.4, 0.6, 0.8, 1.0, 0.0, 0.0, 0.0, 0.0, 0.5])  # two pictures of 5 captions
    other = base.clone()
    other[0] += 0.04  # one caption's reward moved
    got = bench_qa_reader.agreement(base, other, 5)
    assert got["reward_max"] == pytest.approx(0.04) and got["reward_mean"] == pytest.approx(0.004)
    # its own advantage moves by 0.04, each other caption's of its picture by 0.04 / 4 (their baselines hold it)
    assert got["advantage_max"] == pytest.approx(0.04)
    adv = base - torch.tensor([0.7, 0.65, 0.6, 0.55, 0.5, 0.125, 0.125, 0.125, 0.125, 0.0])
    assert got["advantage_std"] == pytest.approx(adv.std().item())
    assert got["same_sign"] == 1.0
    assert bench_qa_reader.agreement(base, -base, 5)["same_sign"] < 1.0


def test_the_script_on_a_tiny_reader(tmp_path):
    captions = [f"a {c} {s}" for c in ("red", "blue") for s in ("circle", "square", "star")]
    images = [{"imgid": k, "split": "train", "sentences": [{"raw": c} for c in captions[k:k + 5]]} for k in range(2)]
    dataset = tmp_path / "dataset_shapes.json"
    dataset.write_text(json.dumps({"images": [*images, {"imgid": 9, "split": "test", "sentences": []}]}))
    questions = {str(k): [Question("What colour is the circle?", ("red", "blue", "green", "pink"), k, "colour")]
                 for k in range(2)}
    qa = write_qa(tmp_path / "qa.json", questions)
    reader = make_tiny_reader(tmp_path / "reader", [*captions, "What colour is the circle? red blue green pink"])
    out = tmp_path / "BENCHMARKS.md"
    assert bench_qa_reader.main(["--reader", str(reader), "--qa", str(qa), "--dataset", str(dataset), "--images", "2",
                                 "--repeats", "1", "--threads", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert "<!-- qa-reader-precision:start -->" in text
    # 10 captions, 1 question of 4 options under 4 orders: 40 distinct prompts (the captions differ)
    assert "10 captions (each of 2 training pictures' first 5 references), 40 distinct prompts" in text
    assert "| fp32 |" in text and "| bf16 |" in text and "with the same sign for" in text
    with pytest.raises(SystemExit, match="no reader there"):
        bench_qa_reader.main(["--reader", str(tmp_path / "none"), "--qa", str(qa), "--dataset", str(dataset)])
