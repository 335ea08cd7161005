"""The shapes QA reader's training pieces (rlcap.models.hf.build_reader): its tokenizer, the lookup drill's
share and the answer's loss, against hand-computed values and a direct forward of each row alone."""

import math
import random

import pytest
import torch

from rlcap.data.qa import ABSTAIN, QASet, Question
from rlcap.errors import ConfigError
from rlcap.models.hf.build_reader import (
    JOIN_MOST, _chance, _example, _loss, build_reader_model, join, join_references, lookup_share, reader_tokenizer,
    train_reader)
from rlcap.models.hf.qa_reader import QAReader

TEXTS = ["a red circle above a blue star.", "What colour is the circle? red blue green pink"]


def test_the_tokenizer_drops_punctuation_so_a_letter_stands_right_before_its_option():
    tok = reader_tokenizer(TEXTS)
    ids = tok.encode("Caption: a red circle.\nA. red\nB. blue", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids) == ["Caption", "a", "red", "circle", "A", "red", "B", "blue"]


def test_the_lookup_drill_is_every_example_for_forty_percent_of_the_steps_then_falls_to_a_quarter_by_sixty():
    assert lookup_share(0, 100) == 1.0 and lookup_share(40, 100) == 1.0
    assert lookup_share(50, 100) == pytest.approx(0.625)  # half way down: 1 - 0.75 / 2
    assert lookup_share(60, 100) == pytest.approx(0.25) and lookup_share(99, 100) == pytest.approx(0.25)


def test_the_answer_loss_reads_the_letter_after_each_row_of_a_left_padded_batch():
    tok = reader_tokenizer(TEXTS)
    torch.manual_seed(0)
    model = build_reader_model(len(tok), "small", seed=0).eval()
    prompts = [tok.encode("What colour is the circle A red B blue", add_special_tokens=False),
               tok.encode("a red circle What colour is the circle A blue B red C green", add_special_tokens=False)]
    answers = [tok.encode("A red", add_special_tokens=False), tok.encode("C green", add_special_tokens=False)]
    loss, letter = _loss(model, prompts, answers, tok.pad_token_id)
    letters, totals = [], []
    for p, a in zip(prompts, answers):  # each row alone, unpadded
        row = torch.tensor([p + a])
        logp = model(input_ids=row).logits[0, :-1].float().log_softmax(-1)  # (T-1, V)
        terms = [-logp[len(p) - 1 + j, a[j]] for j in range(len(a))]  # the letter, then the option's word
        letters.append(terms[0])
        totals.append(sum(terms))
    assert letter.item() == pytest.approx(torch.stack(letters).mean().item(), abs=1e-5)
    assert loss.item() == pytest.approx(torch.stack(totals).mean().item(), abs=1e-5)


REFS = ["a red circle above a blue star.", "A blue star below a red circle", "two shapes: a circle and a star",
        "one green star alone."]


def test_joined_references_are_two_to_three_distinct_ones_each_ended_by_a_full_stop():
    assert join(["a red circle.", "A blue star"]) == "a red circle. A blue star."
    rng = random.Random(0)
    seen = set()
    for _ in range(200):
        joined = join_references(rng, REFS)
        parts = [part.strip() + "." for part in joined.split(".")[:-1]]
        assert joined.endswith(".") and 2 <= len(parts) <= JOIN_MOST
        assert len(set(parts)) == len(parts) and set(parts) <= {r.rstrip(".") + "." for r in REFS}
        seen.add(len(parts))
    assert seen == {2, 3}
    assert join_references(random.Random(0), REFS[:2]) in {"a red circle above a blue star. A blue star below a red "
                                                            "circle.", "A blue star below a red circle. a red circle "
                                                            "above a blue star."}


def _reader():
    tok = reader_tokenizer([*REFS, "What colour is the circle? red blue green pink"])
    return QAReader(build_reader_model(len(tok), "small", seed=0), tok)


QA = QASet({"1": [Question("What colour is the circle?", ("red", "blue", "green", "pink"), 0)]})


def test_an_example_reads_joined_references_at_their_share_and_one_reference_otherwise():
    reader, captions = _reader(), {"1": REFS}

    def named(prompt: str) -> int:  # how many of the references the prompt's caption holds
        return sum(r.rstrip(".") in prompt for r in REFS)

    assert all(named(_example(random.Random(k), captions, QA, ["1"], reader, 0.0, 1.0)[0]) >= 2 for k in range(20))
    assert all(named(_example(random.Random(k), captions, QA, ["1"], reader, 0.0, 0.0)[0]) == 1 for k in range(20))
    # the drill (lookup 1) reads the right option alone, whatever the share
    assert named(_example(random.Random(0), captions, QA, ["1"], reader, 1.0, 1.0)[0]) == 0
    # joined 0 draws what a reader before the option drew: no draw for the share
    a, b = random.Random(3), random.Random(3)
    _example(a, captions, QA, ["1"], reader, 0.0, 0.0)
    b.choice(["1"]), b.choice(QA.of("1")), b.sample(range(4), 4), b.random(), b.choice(REFS)
    assert a.random() == b.random()
    # a picture with one reference reads it alone, whatever the share
    assert named(_example(random.Random(0), {"1": REFS[3:]}, QA, ["1"], reader, 0.0, 1.0)[0]) == 1


def test_a_share_outside_zero_to_one_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="joined: 1.5 is not a share between 0 and 1"):
        train_reader(tmp_path / "r", {"1": REFS}, QA, steps=1, joined=1.5)


def test_an_abstain_example_reads_a_negative_and_answers_the_abstain_option_offered_last():
    reader, captions = _reader(), {"1": REFS}
    asked = []

    def negative(rng, image_id, q):
        asked.append((image_id, q.question))
        return "a lone brown heart."

    prompt, right, text = _example(random.Random(0), captions, QA, ["1"], reader, 0.0, 0.0, 1.0, negative)
    assert asked == [("1", "What colour is the circle?")]  # the negative of the drawn image and question
    options = [line.split(" ", 1)[1] for line in prompt.splitlines() if line[:2] in {"A.", "B.", "C.", "D.", "E."}]
    assert len(options) == 5 and options[-1] == ABSTAIN and right == 4 and text == ABSTAIN
    assert "a lone brown heart" in prompt
    # with abstain > 0 every prompt offers the option, and a positive's right letter is its own option's
    for k in range(20):
        prompt, right, text = _example(random.Random(k), captions, QA, ["1"], reader, 0.0, 0.5, 0.5, negative)
        options = [line.split(" ", 1)[1] for line in prompt.splitlines() if line[:2] in {"A.", "B.", "C.", "D.", "E."}]
        assert options[-1] == ABSTAIN and options[right] == text and (text == ABSTAIN) == ("brown heart" in prompt)
    # the drill reads the right option alone, never a negative
    assert _example(random.Random(0), captions, QA, ["1"], reader, 1.0, 0.0, 1.0, negative)[2] == "red"


def test_abstaining_needs_what_writes_the_negatives(tmp_path):
    with pytest.raises(ConfigError, match="abstain: a reader learns to abstain"):
        train_reader(tmp_path / "r", {"1": REFS}, QA, steps=1, abstain=0.5)
    with pytest.raises(ConfigError, match="abstain: 2 is not a share between 0 and 1"):
        train_reader(tmp_path / "r", {"1": REFS}, QA, steps=1, abstain=2, negative=lambda *a: "")


def test_the_logged_chance_is_the_mean_log_of_the_letters_offered_one_more_with_the_abstain_option():
    qa = QASet({"1": [Question("How many?", ("one", "two", "three", "four"), 0)],
                "2": [Question("Which?", ("red", "blue"), 1)]})
    assert _chance(qa, ["1", "2"], abstains=False) == pytest.approx((math.log(4) + math.log(2)) / 2)
    assert _chance(qa, ["1"], abstains=True) == pytest.approx(math.log(5))


def test_a_reader_that_abstains_trains_twice_as_long_unless_told():
    from rlcap.models.hf.build_reader import ABSTAIN_STEPS, STEPS, default_steps

    assert (default_steps(0.0), default_steps(0.25), STEPS, ABSTAIN_STEPS) == (5000, 10000, 5000, 10000)
