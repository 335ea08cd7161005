"""The shapes QA reader's training pieces (rlcap.models.hf.build_reader): its tokenizer, the lookup drill's
share and the answer's loss, against hand-computed values and a direct forward of each row alone."""

import pytest
import torch

from rlcap.models.hf.build_reader import _loss, build_reader_model, lookup_share, reader_tokenizer

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
