"""Greedy, sampling and beam search against tiny deterministic models with known answers."""

import itertools
import math

import pytest
import torch
from torch import nn

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding import Decoding, DecodeResult, beam_search, draw, entropy, filter_logits, greedy, sample
from rlcap.decoding.beam import repeated_ngrams
from rlcap.models import Feats, ModelConfig, build_model

A, B_ = 3, 4  # the two words of the table model
NEG = float("-inf")


def feats_for(keys: list[float]) -> Feats:
    """Fake features whose fc[:, 0] is the image key the fake models read."""
    n = len(keys)
    fc = torch.tensor(keys)[:, None].repeat(1, 2)
    return Feats(fc, torch.zeros(n, 1, 2), torch.ones(n, 1, dtype=torch.bool))


class TableModel(nn.Module):
    """Next-word probabilities depend on the previous word only (vocab PAD BOS EOS a b):

    after BOS: EOS .1, a .5, b .4;  after a: EOS .3, a .4, b .3;  after b: EOS .9, a .05, b .05.
    """

    vocab_size = 5
    TABLE = {BOS: [0, 0, 0.1, 0.5, 0.4], A: [0, 0, 0.3, 0.4, 0.3], B_: [0, 0, 0.9, 0.05, 0.05]}

    def encode(self, feats):
        return (feats.fc[:, 0],)

    def init_state(self, memory):
        return (torch.zeros_like(memory[0]),)

    def step(self, memory, state, tokens):
        rows = [self.TABLE.get(int(t), [0, 0, 1, 0, 0]) for t in tokens]  # PAD (ended rows): anything
        return torch.tensor(rows).log(), state


class PrefixModel(nn.Module):
    """Finite log-probabilities that depend on the image key and on the whole prefix, so a beam
    reordered wrongly is caught. Vocabulary: PAD BOS EOS and words 3..V-1."""

    vocab_size = 6

    def encode(self, feats):
        return (feats.fc[:, 0],)

    def init_state(self, memory):
        return (torch.zeros_like(memory[0]),)

    def step(self, memory, state, tokens):
        h = torch.remainder(state[0] * 7.3 + tokens.double() * 1.7 + 0.9, 1000.0)  # (R,) prefix hash
        logits = torch.sin(memory[0][:, None] * 3.1 + h[:, None] * 0.37 + torch.arange(self.vocab_size) * 1.3) * 3
        return logits.log_softmax(-1), (h,)


def brute_force(model, key: float, max_len: int, length_penalty: float = 0.0) -> list[tuple[float, tuple[int, ...]]]:
    """Every caption (words other than PAD/BOS, cut at EOS, at most max_len) with its score, best first.

    Scores are log-probabilities under the model's softmax renormalised without PAD and BOS."""
    words = [w for w in range(model.vocab_size) if w not in (PAD, BOS)]
    found = {}
    for length in range(1, max_len + 1):
        for seq in itertools.product(words, repeat=length):
            if EOS in seq[:-1] or (length < max_len and seq[-1] != EOS):
                continue
            memory = model.encode(feats_for([key]))
            state, prev, total = model.init_state(memory), BOS, 0.0
            for w in seq:
                logprobs, state = model.step(memory, state, torch.tensor([prev]))
                policy = logprobs.index_fill(1, torch.tensor([PAD, BOS]), NEG).log_softmax(-1)  # what decoding uses
                total += float(policy[0, w])
                prev = w
            found[seq] = total / len(seq) ** length_penalty
    return sorted(((s, q) for q, s in found.items()), reverse=True)


def captions(result: DecodeResult) -> list[tuple[int, ...]]:
    return [tuple(int(t) for t in row[m]) for row, m in zip(result.tokens, result.mask)]


# --- hand-computed cases ------------------------------------------------------------------------


def test_greedy_takes_the_likeliest_word_each_step():
    result = greedy(TableModel(), feats_for([0.0]), max_len=2)
    assert captions(result) == [(A, A)]  # .5 then .4; no EOS within max_len
    torch.testing.assert_close(result.logprobs, torch.tensor([[math.log(0.5), math.log(0.4)]]))
    torch.testing.assert_close(result.scores, torch.tensor([math.log(0.2)]))
    h_bos = -sum(p * math.log(p) for p in (0.1, 0.5, 0.4))
    h_a = -sum(p * math.log(p) for p in (0.3, 0.4, 0.3))
    torch.testing.assert_close(result.entropy, torch.tensor([[h_bos, h_a]]))


def test_beam_search_finds_what_greedy_misses():
    # beams after step 1: a (.5), b (.4); step 2: b EOS .36 > a a .2 > a EOS = a b .15
    result = beam_search(TableModel(), feats_for([0.0]), Decoding("beam", 2, beam_size=2), n_best=2)
    assert captions(result) == [(B_, EOS), (A, A)]
    torch.testing.assert_close(result.scores, torch.tensor([math.log(0.36), math.log(0.2)]))
    torch.testing.assert_close(result.logprobs[0], torch.tensor([math.log(0.4), math.log(0.9)]))


def test_captions_are_cut_at_eos_and_padded():
    result = beam_search(TableModel(), feats_for([0.0, 1.0]), Decoding("beam", 4, beam_size=2), n_best=2)
    assert result.tokens.shape == (4, 4)
    first = result.tokens[0].tolist()
    assert first[:2] == [B_, EOS] and first[2:] == [PAD, PAD]
    assert result.mask[0].tolist() == [True, True, False, False]
    assert result.logprobs[0, 2:].tolist() == [0.0, 0.0] and result.entropy[0, 2:].tolist() == [0.0, 0.0]
    assert torch.equal(result.mask, result.tokens != PAD)


def test_decoding_stops_when_every_caption_has_ended():
    class EndsAfterOneWord(TableModel):
        TABLE = {BOS: [0, 0, 0.1, 0.5, 0.4], A: [0, 0, 1, 0, 0], B_: [0, 0, 1, 0, 0]}

    result = greedy(EndsAfterOneWord(), feats_for([0.0]), max_len=10)
    assert result.tokens.tolist() == [[A, EOS]]


# --- beam search == exhaustive search -----------------------------------------------------------


@pytest.mark.parametrize("length_penalty", [0.0, 0.7])
def test_exhaustive_beam_equals_brute_force(length_penalty):
    model, keys, max_len, n_best = PrefixModel(), [0.3, 1.7], 3, 6
    words = model.vocab_size - 2
    result = beam_search(model, feats_for(keys),
                         Decoding("beam", max_len, beam_size=words**max_len, length_penalty=length_penalty),
                         n_best=n_best)
    assert result.tokens.shape[0] == len(keys) * n_best
    for i, key in enumerate(keys):
        expected = brute_force(model, key, max_len, length_penalty)[:n_best]
        rows = slice(i * n_best, (i + 1) * n_best)
        assert captions(result)[rows] == [seq for _, seq in expected]
        torch.testing.assert_close(result.scores[rows], torch.tensor([s for s, _ in expected]), atol=1e-9, rtol=1e-6,
                                   check_dtype=False)
        torch.testing.assert_close(result.logprobs[rows].sum(1), torch.tensor([s for s, _ in expected]) *
                                   result.mask[rows].sum(1) ** length_penalty, atol=1e-6, rtol=1e-6, check_dtype=False)


def holds_repeat(seq: tuple[int, ...], n: int) -> bool:
    grams = [seq[i:i + n] for i in range(len(seq) - n + 1)]
    return len(set(grams)) < len(grams)


@pytest.mark.parametrize("n", [1, 2])
def test_exhaustive_beam_without_repeated_ngrams_equals_brute_force_among_captions_without_them(n):
    model, keys, max_len, n_best = PrefixModel(), [0.3, 0.9], 4, 10
    words = model.vocab_size - 2
    result = beam_search(model, feats_for(keys), Decoding("beam", max_len, beam_size=words**max_len, no_repeat_ngram=n),
                         n_best=n_best)
    changed = False
    for i, key in enumerate(keys):
        every = brute_force(model, key, max_len)
        expected = [(s, q) for s, q in every if not holds_repeat(q, n)][:n_best]
        changed |= expected != every[:n_best]
        rows = slice(i * n_best, (i + 1) * n_best)
        assert captions(result)[rows] == [seq for _, seq in expected]
        torch.testing.assert_close(result.scores[rows], torch.tensor([s for s, _ in expected]), atol=1e-9, rtol=1e-6,
                                   check_dtype=False)
    assert changed  # the ban changes the answer for this model


def test_repeated_ngrams_by_hand():
    tokens = torch.tensor([[5, 6, 7, 5, 6], [3, 4, 3, 4, 9]])
    assert repeated_ngrams(tokens, 3, 10).nonzero().tolist() == [[0, 7]]  # "5 6" was followed by 7
    assert repeated_ngrams(tokens, 2, 10).nonzero().tolist() == [[0, 7]]  # "6" by 7; "9" never ended a bigram
    assert repeated_ngrams(tokens, 1, 10).nonzero().tolist() == [[0, 5], [0, 6], [0, 7], [1, 3], [1, 4], [1, 9]]
    assert not repeated_ngrams(tokens[:, :2], 3, 10).any()  # no trigram held yet


def test_small_beam_is_batched_consistently():
    """Decoding images together gives the same captions as decoding each alone."""
    model, keys = PrefixModel(), [0.3, 1.7, 2.2]
    together = beam_search(model, feats_for(keys), Decoding("beam", 5, beam_size=3), n_best=2)
    for i, key in enumerate(keys):
        alone = beam_search(model, feats_for([key]), Decoding("beam", 5, beam_size=3), n_best=2)
        t = alone.tokens.size(1)
        assert torch.equal(together.tokens[2 * i : 2 * i + 2, :t], alone.tokens)
        torch.testing.assert_close(together.scores[2 * i : 2 * i + 2], alone.scores)
    assert (together.scores.view(3, 2)[:, 0] >= together.scores.view(3, 2)[:, 1]).all()


def test_beam_of_one_is_greedy():
    model, feats = PrefixModel(), feats_for([0.3, 1.7])
    g, b = greedy(model, feats, 6), beam_search(model, feats, Decoding("beam", 6, beam_size=1))
    assert torch.equal(g.tokens, b.tokens)
    torch.testing.assert_close(g.scores, b.scores)


# --- sampling -----------------------------------------------------------------------------------


class PreferredWordModel(PrefixModel):
    """Image with key i says word 3 + i, then EOS, almost surely."""

    def step(self, memory, state, tokens):
        logits = torch.zeros(tokens.size(0), self.vocab_size)
        first = tokens == BOS
        logits[first, 3 + memory[0][first].long()] = 50.0
        logits[~first, EOS] = 50.0
        return logits.log_softmax(-1), state


def test_samples_of_one_image_are_adjacent():
    result = sample(PreferredWordModel(), feats_for([0.0, 1.0, 2.0]), 4, Decoding("sample", 5),
                    generator=torch.Generator().manual_seed(0))
    assert result.tokens.tolist() == [[3 + i, EOS] for i in range(3) for _ in range(4)]


def test_top_k_one_and_tiny_top_p_and_cold_temperature_are_greedy():
    model, feats = PrefixModel(), feats_for([0.3, 1.7, 2.2])
    expected = greedy(model, feats, 6).tokens
    gen = torch.Generator().manual_seed(0)
    for kwargs in ({"top_k": 1}, {"top_p": 1e-6}, {"temperature": 1e-4}):
        assert torch.equal(sample(model, feats, 1, Decoding("sample", 6, **kwargs), generator=gen).tokens, expected)


def test_sampling_is_reproducible_with_a_generator():
    model, feats = PrefixModel(), feats_for([0.3, 1.7])
    a = sample(model, feats, 5, Decoding("sample", 6), generator=torch.Generator().manual_seed(3))
    b = sample(model, feats, 5, Decoding("sample", 6), generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)


def test_draw_matches_the_probabilities_and_never_draws_a_zero():
    probs = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3, 0.0]).expand(200_000, -1)
    words = draw(probs, torch.Generator().manual_seed(0))
    freq = torch.bincount(words, minlength=6).double() / words.numel()
    assert freq[[0, 2, 5]].tolist() == [0.0, 0.0, 0.0]
    se = (probs[0].double() * (1 - probs[0].double()) / words.numel()).sqrt()  # binomial standard errors
    assert ((freq - probs[0].double()).abs() <= 5 * se + 1e-12).all(), freq
    # unnormalised rows are drawn in proportion, like torch.multinomial
    words = draw(torch.tensor([[2.0, 6.0]]).expand(100_000, -1), torch.Generator().manual_seed(1))
    assert abs(words.double().mean().item() - 0.75) < 5 * (0.75 * 0.25 / 100_000) ** 0.5


@pytest.mark.parametrize("uniform,expected", [(0.0, 4), (1.0 - 2.0 ** -53, 1)])
def test_draw_at_the_ends_of_the_uniform_range_stays_on_words_with_probability(monkeypatch, uniform, expected):
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0]])
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.full((1, 1), uniform, dtype=torch.float64))
    assert draw(probs).tolist() == [expected]


def test_filter_logits_by_hand():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert filter_logits(logits, top_k=2).tolist() == [[NEG, NEG, 3.0, 4.0]]
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    assert filter_logits(probs.log(), top_p=0.5).isfinite().tolist() == [[False, False, True, True]]
    assert filter_logits(probs.log(), top_p=0.35).isfinite().tolist() == [[False, False, False, True]]
    assert filter_logits(probs.log(), top_p=0.75).isfinite().tolist() == [[False, True, True, True]]
    # top-p applies to the renormalised top-k: .4/.9 + .3/.9 = .78 >= .75
    assert filter_logits(probs.log(), top_k=3, top_p=0.75).isfinite().tolist() == [[False, False, True, True]]


def test_entropy_by_hand():
    logprobs = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]).log()
    torch.testing.assert_close(entropy(logprobs), torch.tensor([math.log(2), 0.0]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_entropy_is_fp32_and_finite_under_autocast(dtype):
    """Under a bf16 or fp16 run (autocast), banned words (-inf) still count 0 * log 0 = 0, in fp32:
    a low-precision product reduction would turn fp32's clamp value into -inf, and 0 * -inf into NaN."""
    logprobs = torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]).log()
    with torch.autocast("cpu", dtype=dtype):
        got = entropy(logprobs)
        low = entropy(logprobs.to(dtype))
    assert got.dtype == low.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor([math.log(2), 0.0]))
    torch.testing.assert_close(low, torch.tensor([math.log(2), 0.0]), rtol=2e-3, atol=0.0)  # log 0.5 rounded


def tiny_captioner(arch: str = "fc"):
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, num_heads=2,
                      ff_dim=8, max_len=8, dropout=0.2)
    feats = Feats(torch.randn(2, 6), torch.randn(2, 3, 6), torch.ones(2, 3, dtype=torch.bool))
    return build_model(cfg, 11, 6, 6), feats


def test_sample_logprobs_carry_gradients():
    model, feats = tiny_captioner()
    model.train()
    result = sample(model, feats, 3, Decoding("sample", 5), generator=torch.Generator().manual_seed(0))
    assert result.logprobs.requires_grad and result.entropy.requires_grad
    (result.logprobs.sum() + result.entropy.sum()).backward()
    assert model.logit.weight.grad is not None and model.logit.weight.grad.abs().sum() > 0


class BiasModel(nn.Module):
    """Next-word logits are one learnable vector: PAD .2, BOS .2, EOS .1, a .3, b .2 at the start."""

    vocab_size = 5

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.tensor([0.2, 0.2, 0.1, 0.3, 0.2]).log())

    def encode(self, feats):
        return (feats.fc[:, 0],)

    def init_state(self, memory):
        return (torch.zeros_like(memory[0]),)

    def step(self, memory, state, tokens):
        return self.bias.log_softmax(-1).expand(tokens.size(0), -1), state


def test_sample_logprobs_are_renormalised_without_pad_and_bos():
    model = BiasModel()
    result = sample(model, feats_for([0.0] * 50), 4, Decoding("sample", 1), generator=torch.Generator().manual_seed(0))
    expected = {EOS: math.log(0.1 / 0.6), A: math.log(0.3 / 0.6), B_: math.log(0.2 / 0.6)}
    words = result.tokens[:, 0].tolist()
    assert set(words) == set(expected), "only EOS, a and b can be drawn"
    torch.testing.assert_close(result.logprobs[:, 0], torch.tensor([expected[w] for w in words]))
    h = -sum(p / 0.6 * math.log(p / 0.6) for p in (0.1, 0.3, 0.2))
    torch.testing.assert_close(result.entropy[:, 0], torch.full((200,), h))


def test_policy_gradient_never_moves_probability_onto_pad_or_bos():
    """REINFORCE with a negative advantage (a sample below the greedy baseline) pushes the sampled words
    down; with log-probabilities of the full softmax that mass would go to PAD and BOS, which are
    never sampled and so never pushed back: the collapse this guards against (docs/RL.md)."""
    model = BiasModel()
    result = sample(model, feats_for([0.0] * 50), 4, Decoding("sample", 1), generator=torch.Generator().manual_seed(1))
    (result.logprobs.sum()).backward()  # = -loss for advantage -1 on every sample
    grad = model.bias.grad  # the full softmax would give PAD and BOS -0.2 per sample each: -40 here
    assert abs(float(grad[PAD])) < 1e-4 and abs(float(grad[BOS])) < 1e-4
    assert grad[[EOS, A, B_]].abs().sum() > 1.0


@pytest.mark.parametrize("arch", ["fc", "updown", "transformer"])
def test_sample_logprobs_are_the_models_own(arch):
    model, feats = tiny_captioner(arch)
    model.eval()
    result = sample(model, feats, 3, Decoding("sample", 6, temperature=0.7, top_k=5),
                    generator=torch.Generator().manual_seed(0))
    inputs = torch.cat([torch.full((6, 1), BOS), result.tokens[:, :-1]], 1)  # (6, T)
    logits = model(feats, inputs, seq_per_img=3)  # (6, T, V)
    logprobs = logits.index_fill(2, torch.tensor([PAD, BOS]), NEG).log_softmax(-1)  # the policy: no PAD, BOS
    chosen = torch.where(result.mask, logprobs.gather(2, result.tokens[:, :, None]).squeeze(2), 0.0)
    torch.testing.assert_close(result.logprobs, chosen, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.entropy, entropy(logprobs.flatten(0, 1)).view(6, -1) * result.mask,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["fc", "updown", "transformer"])
def test_greedy_and_beam_outputs_can_feed_autograd(arch):
    model, feats = tiny_captioner(arch)
    for result in (greedy(model, feats, 5), beam_search(model, feats, Decoding("beam", 5, beam_size=3), n_best=2)):
        n = result.tokens.size(0) // 2
        assert result.tokens.shape[1] <= 5 and result.mask.dtype == torch.bool
        inputs = torch.cat([torch.full((2 * n, 1), BOS), result.tokens], 1)
        model(feats, inputs, seq_per_img=n).sum().backward()  # no inference-tensor error
