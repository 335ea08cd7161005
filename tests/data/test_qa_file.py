"""QA files: rlcap's JSON round trip, and CapRL's format read from a file written as theirs."""

from __future__ import annotations

import json

import pytest

from rlcap.data.qa import Question, load_qa, write_qa
from rlcap.errors import DataError

# a prompt as CapRL's evaluation input holds one: Qwen's chat, the picture's placeholder, the question, the options
PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
          "<|vision_start|><|image_pad|><|vision_end|>Which colour is the largest bar?\nA. red\nB. blue\n"
          "C. green\nD. grey\nAnswer with the option's letter.<|im_end|>\n<|im_start|>assistant\n")


def test_rlcap_questions_round_trip(tmp_path):
    questions = {"3": [Question("How many shapes are there?", ("one", "two", "three", "four"), 2, "count")]}
    qa = load_qa(write_qa(tmp_path / "qa.json", questions))
    assert qa.questions == questions and len(qa) == 1 and qa.of("4") == []


def test_caprl_samples_are_read_as_they_are(tmp_path):
    samples = [
        {"image": [{"role": "user", "content": [{"type": "image", "image": "/data/charts/0042.png"}]}],
         "prompt": PROMPT, "answer": "B"},
        {"image": "/data/charts/0042.png", "prompt": PROMPT.replace("A. red", "(A) red"), "answer": "(C)"},
        {"image_id": "x9", "image": "whatever.jpg", "prompt": PROMPT, "answer": "grey"},
        {"image": "/data/charts/7.png", "prompt": PROMPT.split("A. red")[0] + "<|im_end|>", "answer": "12"},  # open
    ]
    path = tmp_path / "caprl.json"
    path.write_text(json.dumps(samples))
    qa = load_qa(path)
    first, second = qa.of("0042")
    assert first == Question("Which colour is the largest bar?", ("red", "blue", "green", "grey"), 1)
    assert second.answer == 2 and second.options[0] == "red"
    assert qa.of("x9")[0].answer == 3 and qa.skipped == 1 and qa.of("7") == []
    lines = tmp_path / "caprl.jsonl"  # JSON lines too
    lines.write_text("\n".join(json.dumps(s) for s in samples[:2]))
    assert len(load_qa(lines)) == 2


def test_a_file_of_neither_format_is_one_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"images": {}}))
    with pytest.raises(DataError, match="rlcap's QA JSON .* or CapRL's"):
        load_qa(path)
    path.write_text(json.dumps({"format": "rlcap-qa", "images": {"1": [{"question": "q", "options": ["a"],
                                                                        "answer": 0}]}}))
    with pytest.raises(DataError, match="2 to 10 options"):
        load_qa(path)
