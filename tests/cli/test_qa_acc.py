"""QA-acc in `rlcap score` and `rlcap eval`, and `rlcap data reader`, run in-process."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlcap.data.qa import Question, load_qa, write_qa
from rlcap.eval.qa_accuracy import abstained, qa_accuracy, reader_card
from rlcap.models.hf.qa_reader import QAReader
from tests.cli.in_process import run_cli
from tests.tiny_reader import make_tiny_reader

QUESTIONS = {"1": [Question("What animal is on the mat?", ("dog", "cat", "bird", "fish"), 0)],
             "2": [Question("Where is the cat?", ("mat", "sofa", "bed", "floor"), 1),
                   Question("What colour is the cat?", ("grey", "brown", "black", "white"), 0)]}


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qa")
    reader = make_tiny_reader(folder / "reader", ["a dog on a mat", "a cat on a sofa", "grey brown black white"
                                                  " dog cat bird fish mat sofa bed floor animal colour where"])
    return reader, write_qa(folder / "qa.json", QUESTIONS)


def test_score_adds_qa_acc_per_caption_and_corpus(judge, tmp_path, capsys):
    reader, qa = judge
    refs, preds, out = tmp_path / "refs.json", tmp_path / "preds.json", tmp_path / "scores.json"
    refs.write_text(json.dumps({"1": ["a dog on a mat"], "2": ["a cat on a sofa"], "3": ["a bird"]}))
    preds.write_text(json.dumps({"1": ["a dog"], "2": ["a grey cat on a sofa"], "3": ["a bird"]}))
    rc, table, _ = run_cli(capsys, "score", "--refs", str(refs), "--preds", str(preds), "--metrics", "CIDEr",
                           "--reader", str(reader), "--qa", str(qa), "--out", str(out))
    assert rc == 0 and "QA-acc" in table
    scores = json.loads(out.read_text())
    expected, per_image = qa_accuracy(QAReader.load(reader), load_qa(qa), {"1": "a dog", "2": "a grey cat on a sofa"})
    assert scores["corpus"]["QA-acc"] == pytest.approx(expected["QA-acc"], abs=1e-9)
    assert scores["per_image"]["1"]["QA-acc"] == pytest.approx(per_image["1"]["QA-acc"], abs=1e-9)
    assert "QA-acc" not in scores["per_image"]["3"]  # no questions about image 3: not scored
    assert expected["QA-acc"] == pytest.approx((per_image["1"]["QA-acc"] + per_image["2"]["QA-acc"]) / 2)
    assert all(v["QA-acc"] * 8 == round(v["QA-acc"] * 8) for v in per_image.values())  # 4 orders x 1 or 2 questions


def test_the_card_of_a_reader_that_abstains_exactly_on_empty_captions(judge, monkeypatch):
    reader = QAReader.load(judge[0])
    qa = load_qa(judge[1])

    def option_probs(prompts, k, temperature=1.0):  # the abstain letter (last) likeliest iff the caption is empty
        rows = [[0.9 if (j == k - 1) == ("Caption: \n" in p) else 0.1 / (k - 1) for j in range(k)] for p in prompts]
        return torch.tensor(rows)

    monkeypatch.setattr(reader, "option_probs", option_probs)
    assert abstained(reader, qa, {"1": "", "2": ""}) == 1.0 and abstained(reader, qa, {"1": "a dog"}) == 0.0
    assert abstained(reader, qa, {"1": "", "2": "a cat"}) == pytest.approx(1 / 3)  # 4 of 12 prompts: image 1's
    assert math.isnan(abstained(reader, qa, {"3": ""}))  # no questions about image 3
    # each question's own negative: image 2's second question has an empty one, its first does not
    card = reader_card(reader, qa, {"1": ["a dog"], "2": ["a cat"]}, negatives={"1": [""], "2": ["a mat", ""]})
    assert card["abstain"]["abstains_from_negative"] == pytest.approx(2 / 3)
    assert card["abstain"]["abstains_from_empty"] == 1.0 and card["abstain"]["abstains_from_reference"] == 0.0
    assert card["abstain"]["from_empty"] == 0.0  # abstaining is a wrong answer
    assert "abstain" not in reader_card(reader, qa, {"1": ["a dog"]})


def test_reader_without_questions_is_one_line(judge, tmp_path, capsys):
    reader, _ = judge
    rc, _, err = run_cli(capsys, "score", "--refs", str(tmp_path / "r.json"), "--preds", str(tmp_path / "p.json"),
                         "--reader", str(reader))
    assert rc != 0 and "--reader DIR and --qa FILE go together" in err and len(err.strip().splitlines()) == 1


def test_data_reader_trains_and_says_how_it_reads(tmp_path, capsys):
    rc, _, _ = run_cli(capsys, "data", "shapes", "--out", str(tmp_path / "shapes"), "--n-train", "16", "--n-val", "0",
                       "--n-test", "6", "--workers", "1", "--image-size", "32")
    assert rc == 0 and len(load_qa(tmp_path / "shapes" / "questions.json").of("16")) >= 2
    main, every = (load_qa(tmp_path / "shapes" / name) for name in ("questions.json", "questions_every.json"))
    asked = {s: {i: {(q.question, q.options[q.answer]) for q in qs.of(i)} for i in qs.questions} for s, qs in
             (("main", main), ("every", every))}
    assert all(asked["main"][i] <= asked["every"][i] for i in asked["main"])  # every: main's and the others' objects
    both = load_qa(tmp_path / "shapes" / "questions_main_every.json")  # main's questions, then every's
    assert all(list(both.of(i)) == [*main.of(i), *every.of(i)] for i in main.questions)
    once = load_qa(tmp_path / "shapes" / "questions_pair_every.json")  # the same with the count asked once
    assert all(list(once.of(i)) == [*(q for q in main.of(i) if q.kind != "count"), *every.of(i)]
               for i in main.questions)
    rc, out, _ = run_cli(capsys, "data", "reader", "--dataset", str(tmp_path / "shapes"), "--out",
                         str(tmp_path / "reader"), "--steps", "2", "--batch-size", "4")
    card = json.loads((tmp_path / "reader" / "reader_card.json").read_text())
    assert rc == 0 and card["test"]["images"] == 6 and card["test"]["chance"] == pytest.approx(0.25)
    assert card["qa"] == "questions.json"  # which questions it trained on (make bench-rewards checks it)
    assert card["joined"] == 0.5  # the default share of joined references, written down (make bench-rewards checks it)
    assert 0 <= card["test"]["from_reference"] <= 1 and 0 <= card["test"]["from_empty"] <= 1
    by_kind = card["test"]["by_kind"]  # every image has a count question; the shapes kinds only
    assert by_kind["count"]["questions"] == 6 and set(by_kind) <= {"colour", "kind", "count", "position", "relation"}
    assert sum(k["questions"] for k in by_kind.values()) == card["test"]["questions"]
    assert QAReader.load(tmp_path / "reader").tokenizer.chat_template is not None
    rc, _, err = run_cli(capsys, "data", "reader", "--dataset", str(tmp_path / "shapes"), "--out",
                         str(tmp_path / "single"), "--steps", "1", "--batch-size", "2", "--joined", "0")
    assert rc == 0 and json.loads((tmp_path / "single" / "reader_card.json").read_text())["joined"] == 0.0
    rc, _, _ = run_cli(capsys, "data", "reader", "--dataset", str(tmp_path / "shapes"), "--out",
                       str(tmp_path / "abstains"), "--steps", "2", "--batch-size", "4", "--abstain", "0.5")
    card = json.loads((tmp_path / "abstains" / "reader_card.json").read_text())
    assert rc == 0 and card["abstain"] == 0.5 and json.loads((tmp_path / "reader" / "reader_card.json").read_text())[
        "abstain"] == 0.0
    assert set(card["test"]["abstain"]) == {"from_reference", "from_empty", "abstains_from_reference",
                                            "abstains_from_empty", "abstains_from_negative"}
    assert all(0 <= v <= 1 for v in card["test"]["abstain"].values())
    plain = json.loads((tmp_path / "shapes" / "dataset_shapes.json").read_text())
    for image in plain["images"]:
        del image["scene"]
    (tmp_path / "plain.json").write_text(json.dumps(plain))
    rc, _, err = run_cli(capsys, "data", "reader", "--dataset", str(tmp_path / "plain.json"), "--qa",
                         str(tmp_path / "shapes" / "questions.json"), "--out", str(tmp_path / "y"), "--abstain", "0.5")
    assert rc != 0 and "--abstain writes its negatives from each image's scene" in err
    rc, _, err = run_cli(capsys, "data", "reader", "--dataset", str(tmp_path / "shapes"), "--out",
                         str(tmp_path / "x"), "--joined", "1.5")
    assert rc == 2 and "argument --joined: expected a number in [0, 1], got 1.5" in err


def test_data_reader_trains_a_reader_that_abstains_twice_as_long_by_default(tmp_path, capsys, monkeypatch):
    import rlcap.models.hf.build_reader as build_reader

    rc, _, _ = run_cli(capsys, "data", "shapes", "--out", str(tmp_path / "shapes"), "--n-train", "8", "--n-val", "0",
                       "--n-test", "3", "--workers", "1", "--image-size", "32")
    trained = []

    def train_reader(folder, captions, qa, size, seed, steps, *_, **__):  # a random reader, its steps recorded
        trained.append(steps)
        return make_tiny_reader(folder, [c for cs in captions.values() for c in cs] + [
            " ".join([q.question, *q.options]) for i in captions for q in qa.of(i)])

    monkeypatch.setattr(build_reader, "train_reader", train_reader)
    runs = {"plain": (), "abstains": ("--abstain", "0.25"), "told": ("--abstain", "0.25", "--steps", "7")}
    for name, extra in runs.items():
        rc, _, _ = run_cli(capsys, "data", "reader", "--dataset", str(tmp_path / "shapes"), "--out",
                           str(tmp_path / name), *extra)
        assert rc == 0
    assert trained == [build_reader.STEPS, build_reader.ABSTAIN_STEPS, 7] == [5000, 10000, 7]
    assert json.loads((tmp_path / "abstains" / "reader_card.json").read_text())["steps"] == 10000
