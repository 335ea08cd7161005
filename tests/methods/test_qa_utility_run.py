"""An SCST run learning from the qa_utility reward ([Xing26]) on the tiny task: killed and resumed, it logs the
uninterrupted run's losses step for step; and `rlcap eval --reader --qa` adds QA-acc to its scores."""

from __future__ import annotations

import json

from rlcap import api
from rlcap.data.qa import Question, write_qa
from tests.tiny import WORDS, tiny_overrides
from tests.tiny_reader import make_tiny_reader
from tests.train.killing import assert_resume_is_exact

COLOURS = ("red", "blue", "green", "pink")


def _questions(n_images: int) -> dict[str, list[Question]]:
    """The tiny task's colour (image i: COLOURS[i % 3]), asked of every image."""
    return {str(i): [Question("What colour is the shape?", COLOURS, i % 3, "colour")] for i in range(n_images)}


def test_a_killed_qa_utility_run_resumes_with_identical_losses(tiny_xe, tmp_path):
    dataset, feats, init = tiny_xe(3)
    reader = make_tiny_reader(tmp_path / "reader", [" ".join(WORDS), "what colour is the shape pink"])
    qa = write_qa(tmp_path / "qa.json", _questions(36))
    overrides = [*tiny_overrides(dataset, feats, tmp_path / "unused", **{
        "algorithm": "scst", "init_from": init, "rl.epochs": 3, "rl.batch_size": 8, "rl.n_samples": 3,
        "decode.max_len": 6, "optim.lr": 0.001, "save_every": 2}),
        "reward.weights={qa_utility: 1.0, cider_d: 0.5}", f"reward.paths={{qa_utility: {reader}, qa_file: {qa}}}",
        "reward.qa_shuffles=2"]
    assert_resume_is_exact(overrides, tmp_path / "reference", tmp_path / "killed", 4, 9)
    scores = api.evaluate(tmp_path / "reference" / "last", split="test", reader=reader, qa=qa,
                          out_dir=tmp_path / "eval")
    per_image = json.loads((tmp_path / "eval" / "per_image.json").read_text())
    assert 0 <= scores["model"]["QA-acc"] <= 1 and len(per_image) == 6
    assert all(v["QA-acc"] in (0.0, 0.25, 0.5, 0.75, 1.0) for v in per_image.values())  # 1 question, 4 orders
