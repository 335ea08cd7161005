"""The qa_utility reward ([Xing26]): the reader's option probabilities against a direct transformers forward,
batching and option orders, CPU and bf16, and the reward built from a config."""

from __future__ import annotations

import pytest
import torch

from rlcap.data.qa import ABSTAIN, QASet, Question, write_qa
from rlcap.models.hf.qa_reader import QAReader
from rlcap.models.qa_scoring import ask, option_order, qa_scores
from rlcap.rewards import RewardBatch
from rlcap.rewards.build import build_reward
from rlcap.rewards.qa_utility import QAUtilityReward
from rlcap.rewards.reward_config import RewardConfig
from tests.tiny_reader import make_tiny_reader

QUESTIONS = {
    "1": [Question("What colour is the circle?", ("red", "blue", "green", "pink"), 0, "colour"),
          Question("How many shapes are there?", ("one", "two", "three", "four"), 1, "count")],
    "2": [Question("What shape is the blue object?", ("star", "square", "heart", "cross"), 3, "kind")],
}
CAPTIONS = ["a red circle and a green star", "a blue cross", "two shapes", "a big blue cross on a grey background"]


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory):
    """A random (untrained) reader saved as a transformers folder: what the reward loads."""
    texts = CAPTIONS + [" ".join([q.question, *q.options]) for qs in QUESTIONS.values() for q in qs]
    return make_tiny_reader(tmp_path_factory.mktemp("reader"), texts)


@pytest.fixture(scope="module")
def reader(reader_folder):
    return QAReader.load(reader_folder, batch_size=3)  # (batches of three: padding across prompt lengths)


def test_option_probabilities_equal_a_direct_forward(reader, reader_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(reader_folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(reader_folder)
    q = QUESTIONS["1"][0]
    prompts = [reader.render(c, q.question, q.options) for c in CAPTIONS]  # four lengths, left-padded together
    got = reader.option_probs(prompts, 4)  # (4, 4)
    sampled = reader.option_probs(prompts, 4, temperature=0.6)  # [Xing26]'s training reward's temperature
    letters = [tokenizer.encode(letter, add_special_tokens=False)[0] for letter in "ABCD"]
    for k, prompt in enumerate(prompts):
        messages = [{"role": "user", "content": prompt.split("user\n", 1)[1].split("<|im_end|>")[0]}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -1]  # one unpadded row
        direct = logits.softmax(-1)[letters]
        assert torch.allclose(got[k], direct, atol=1e-5), (k, got[k], direct)
        assert torch.allclose(sampled[k], (logits / 0.6).softmax(-1)[letters], atol=1e-5)
    assert len(set(letters)) == 4 and bool((got.sum(1) <= 1 + 1e-6).all())


def test_orders_rotate_so_the_right_answer_visits_every_letter():
    orders = [option_order(0, "7", 1, k, 4) for k in range(4)]
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)
    assert sorted(o.index(2) for o in orders) == [0, 1, 2, 3]  # option 2 once at each letter
    assert orders[1] == orders[0][1:] + orders[0][:1]
    assert option_order(0, "7", 1, 0, 4) == orders[0]  # fixed: the same in every call and process
    assert any(option_order(seed, "7", 1, 0, 4) != orders[0] for seed in (1, 2, 3))


def test_a_captions_reward_does_not_depend_on_its_batch(reader):
    qa = QASet({k: list(v) for k, v in QUESTIONS.items()})
    reward = QAUtilityReward(reader, qa, shuffles=4)
    ids = ["1", "2", "1", "2"]
    together = reward(CAPTIONS, RewardBatch(ids, [[]] * 4))
    alone = torch.cat([reward([c], RewardBatch([i], [[]])) for c, i in zip(CAPTIONS, ids)])
    assert torch.allclose(together, alone, atol=1e-6)
    # the mean over questions and orders, by hand from the reader's probabilities
    q = QUESTIONS["2"][0]
    by_hand = []
    for k in range(4):
        order = option_order(0, "2", 0, k, 4)
        p = reader.option_probs([reader.render(CAPTIONS[1], q.question, [q.options[j] for j in order])], 4)[0]
        by_hand.append(p[order.index(q.answer)])
    assert together[1].item() == pytest.approx(torch.stack(by_hand).mean().item(), abs=1e-6)
    # other orders (another seed) move a caption's reward no more than its orders' own spread
    other = QAUtilityReward(reader, qa, shuffles=4, seed=9)(CAPTIONS, RewardBatch(ids, [[]] * 4))
    assert abs(other[1] - together[1]) <= (max(by_hand) - min(by_hand)) + 1e-6


def test_a_caption_sampled_twice_is_read_once(reader, monkeypatch):
    qa = QASet({k: list(v) for k, v in QUESTIONS.items()})
    once = qa_scores(reader, qa, CAPTIONS[:2], ["1", "2"], 4)[0]
    read = []
    original = reader.option_probs
    monkeypatch.setattr(reader, "option_probs", lambda prompts, k, t: read.extend(prompts) or original(prompts, k, t))
    twice = qa_scores(reader, qa, [CAPTIONS[0], CAPTIONS[1], CAPTIONS[0], CAPTIONS[0]], ["1", "2", "1", "2"], 4)[0]
    assert len(read) == len(set(read)) == 2 * 4 + 4 + 4  # (caption 0 asked of image 2 is another prompt)
    assert torch.allclose(twice[:2], once, atol=1e-6) and torch.equal(twice[2], twice[0])


def test_accuracy_scores_the_likeliest_letter_and_no_questions_score_zero(reader):
    qa = QASet({k: list(v) for k, v in QUESTIONS.items()})
    values, asked = qa_scores(reader, qa, CAPTIONS[:2] + ["x"], ["1", "2", "9"], 2, "accuracy")
    assert asked.tolist() == [True, True, False] and values[2] == 0
    assert set((values[:2] * 4).round().tolist()) <= {0.0, 1.0, 2.0, 3.0, 4.0}  # 4 or 2 answers, each 0 or 1


def test_the_temperature_sharpens_the_probability_and_leaves_accuracy(reader):
    qa = QASet({k: list(v) for k, v in QUESTIONS.items()})
    args = (reader, qa, CAPTIONS, ["1", "2", "1", "2"], 4)
    at_one, default = qa_scores(*args, temperature=1.0)[0], qa_scores(*args)[0]
    assert torch.equal(at_one, default)  # 1.0 is the score every run before the setting had
    cold, hot = qa_scores(*args, temperature=1e-4)[0], qa_scores(*args, temperature=0.6)[0]
    assert not torch.allclose(hot, at_one, atol=1e-4)
    # near 0 the sampled answer is the likeliest next token: each prompt's probability tends to 0 or 1, 1 only where
    # the right letter is the likeliest token (so the likeliest letter too: no more than the accuracy)
    per_prompt = cold * torch.tensor([8.0, 4.0, 8.0, 4.0])  # (questions x orders of each caption's image)
    assert torch.allclose(per_prompt, per_prompt.round(), atol=1e-2)
    assert bool((cold <= qa_scores(*args, score="accuracy")[0] + 1e-3).all())
    assert torch.equal(qa_scores(*args, score="accuracy", temperature=0.6)[0], qa_scores(*args, score="accuracy")[0])
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            qa_scores(*args, temperature=bad)
        with pytest.raises(Exception, match="reward.qa_temperature"):
            RewardConfig(weights={"qa_utility": 1.0}, qa_temperature=bad)


def test_the_abstain_option_is_offered_last_and_counts_wrong(reader, monkeypatch):
    """[Xing26]'s reward offers "Can not answer based on the caption" after the shuffled options; a reader that takes
    it answers wrong."""
    qa = QASet({k: list(v) for k, v in QUESTIONS.items()})
    plain, offered = ask(reader, qa, CAPTIONS[:1], ["1"], 4), ask(reader, qa, CAPTIONS[:1], ["1"], 4, abstain=True)
    assert offered.right == plain.right and offered.n_options == [5] * 8  # 2 questions x 4 orders, 4 options + 1
    for with_it, without in zip(offered.prompts, plain.prompts):
        assert f"E. {ABSTAIN}" in with_it and ABSTAIN not in without
        assert with_it.replace(f"\nE. {ABSTAIN}", "") == without  # the same orders, the option appended
    # the probability of the right letter among five, from the prompts with the option
    q = QUESTIONS["2"][0]
    by_hand = []
    for k in range(4):
        order = option_order(0, "2", 0, k, 4)
        prompt = reader.render(CAPTIONS[1], q.question, [q.options[j] for j in order] + [ABSTAIN])
        by_hand.append(reader.option_probs([prompt], 5)[0, order.index(q.answer)])
    got = QAUtilityReward(reader, qa, shuffles=4, abstain=True)([CAPTIONS[1]], RewardBatch(["2"], [[]]))
    assert got.item() == pytest.approx(torch.stack(by_hand).mean().item(), abs=1e-6)
    # a reader sure of the abstain letter: probability 0.1 on the right one, and no right answer
    monkeypatch.setattr(reader, "option_probs", lambda prompts, k, t: torch.tensor([[0.1, 0.1, 0.1, 0.1, 0.6]] *
                                                                                  len(prompts))[:, :k])
    rewards = {score: qa_scores(reader, qa, CAPTIONS[:1], ["1"], 4, score, abstain=True)[0].item()
               for score in ("probability", "accuracy")}
    assert rewards == pytest.approx({"probability": 0.1, "accuracy": 0.0})
    crowded = QASet({"1": [Question("Which?", tuple("abcdefghij"), 0)]})  # ten options: no letter left for it
    with pytest.raises(ValueError, match="10 options and the abstain option are more than the 10 letters"):
        ask(reader, crowded, CAPTIONS[:1], ["1"], 1, abstain=True)


def test_bf16_reads_close_to_fp32(reader_folder):
    fp32 = QAReader.load(reader_folder)
    bf16 = QAReader.load(reader_folder, precision="bf16")
    q = QUESTIONS["1"][0]
    prompts = [fp32.render(c, q.question, q.options) for c in CAPTIONS]
    a, b = fp32.option_probs(prompts, 4), bf16.option_probs(prompts, 4)
    assert b.dtype == torch.float32 and torch.allclose(a, b, atol=2e-2)
    assert not torch.equal(a, b)  # (the bf16 reader did compute in bf16)


def test_the_reward_built_from_a_config(reader_folder, tmp_path):
    qa_file = write_qa(tmp_path / "qa.json", QUESTIONS)
    cfg = RewardConfig(weights={"qa_utility": 1.0}, qa_shuffles=2,
                       paths={"qa_utility": str(reader_folder), "qa_file": str(qa_file)})
    with build_reward(cfg, {"1": ["a red circle"]}, device="cpu", precision="bf16") as reward:
        scores = reward(CAPTIONS[:2], RewardBatch(["1", "2"], [["r"], ["r"]]))
    assert scores.shape == (2,) and bool(((scores > 0) & (scores < 1)).all())
    # reward.qa_temperature and reward.qa_abstain reach the reward: its scores are qa_scores' with them
    cfg = RewardConfig(weights={"qa_utility": 1.0}, qa_shuffles=2, qa_temperature=0.6, qa_abstain=True,
                       paths={"qa_utility": str(reader_folder), "qa_file": str(qa_file)})
    with build_reward(cfg, {"1": ["a red circle"]}, device="cpu") as reward:
        sampled = reward(CAPTIONS[:2], RewardBatch(["1", "2"], [["r"], ["r"]]))
    fp32 = QAReader.load(reader_folder)
    expected = qa_scores(fp32, QASet({k: list(v) for k, v in QUESTIONS.items()}), CAPTIONS[:2], ["1", "2"], 2,
                         temperature=0.6, abstain=True)[0]
    assert torch.allclose(sampled, expected, atol=1e-6)


@pytest.mark.parametrize("run, setting, expected", [("fp32", "bf16", torch.bfloat16), ("bf16", "run", torch.bfloat16),
                                                    ("bf16", "fp32", torch.float32), ("fp32", "run", torch.float32)])
def test_the_readers_precision_apart_from_the_runs(reader_folder, tmp_path, run, setting, expected):
    # reward.qa_precision: the frozen reader's weights and forward passes in its own precision ("run": the run's);
    # its scores are those of a reader loaded in that precision
    qa_file = write_qa(tmp_path / "qa.json", QUESTIONS)
    cfg = RewardConfig(weights={"qa_utility": 1.0}, qa_shuffles=2, qa_precision=setting,
                       paths={"qa_utility": str(reader_folder), "qa_file": str(qa_file)})
    with build_reward(cfg, {"1": ["a red circle"]}, device="cpu", precision=run) as reward:
        qa_reward = reward.rewards["qa_utility"]
        assert next(qa_reward.reader.model.parameters()).dtype == expected
        got = reward(CAPTIONS[:2], RewardBatch(["1", "2"], [["r"], ["r"]]))
    alone = QAReader.load(reader_folder, precision={torch.bfloat16: "bf16", torch.float32: "fp32"}[expected])
    want = qa_scores(alone, QASet({k: list(v) for k, v in QUESTIONS.items()}), CAPTIONS[:2], ["1", "2"], 2)[0]
    assert torch.equal(got, want.float().cpu())


def test_a_bad_reader_precision_is_one_clear_error():
    with pytest.raises(Exception, match="reward.qa_precision: 'bf32' is not one of"):
        RewardConfig(weights={"qa_utility": 1.0}, qa_precision="bf32")
