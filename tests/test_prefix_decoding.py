"""Decoding from a prefix, Monte-Carlo prefix rollouts and per-step hidden states, checked against
simple step-by-step reference loops (one row at a time) and exhaustive search."""

import math

import pytest
import torch
import torch.nn.functional as F

from rlcap.data.vocab import BOS, EOS, PAD
from rlcap.decoding import (Decoding, DecodeResult, beam_search, continue_decoding, entropy, greedy,
                            prefix_rollouts, sample)
from rlcap.models import Feats, ModelConfig, build_model, expand_memory
from rlcap.models.architectures import archs
from tests.test_decoding import A, B_, PrefixModel, TableModel, brute_force, captions, feats_for

ARCHS = archs()  # every registered family

V = 13
NEG = float("-inf")


_HF: dict[str, str] = {}


def _tiny_hf_captioner() -> str:
    """A tiny VisionEncoderDecoder (ViT 6 wide + GPT-2) whose 12 tokens are rlcap's 13 ids (PAD, BOS, EOS at
    0-2, no UNK), saved once for the session: the `hf` policy decodes from prefixes as rlcap's own models do."""
    if "folder" not in _HF:
        import tempfile

        import transformers as t

        torch.manual_seed(0)
        config = t.VisionEncoderDecoderConfig.from_encoder_decoder_configs(
            t.ViTConfig(hidden_size=6, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2, image_size=32,
                        patch_size=8),
            t.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=V - 1, n_positions=16, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0))
        config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = 1, 0, 2
        _HF["folder"] = tempfile.mkdtemp(prefix="rlcap-tiny-hf-")
        t.utils.logging.disable_progress_bar()
        t.VisionEncoderDecoderModel(config).save_pretrained(_HF["folder"])
        from rlcap.models.hf.build_captioner import train_tokenizer  # (a captioner folder holds its tokenizer: 4 + 8 words)

        train_tokenizer([" ".join(f"w{i}" for i in range(V - 5))], kind="word").save_pretrained(_HF["folder"])
    return _HF["folder"]


def build(arch: str, images: int = 3) -> tuple[torch.nn.Module, Feats]:
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, num_heads=2, ff_dim=8,
                      max_len=10, dropout=0.2, path=_tiny_hf_captioner() if arch == "hf" else "")
    gen = torch.Generator().manual_seed(1)
    mask = torch.ones(images, 3, dtype=torch.bool)
    mask[-1, 2] = False
    feats = Feats(torch.randn(images, 6, generator=gen), torch.randn(images, 3, 6, generator=gen), mask)
    return build_model(cfg, V, 6, 6).eval(), feats


def policy(logprobs: torch.Tensor) -> torch.Tensor:
    """What decoding chooses from: the model's softmax without PAD and BOS. (..., V) -> (..., V)."""
    return logprobs.index_fill(-1, torch.tensor([PAD, BOS]), NEG).log_softmax(-1)


@torch.no_grad()
def reference_greedy(model, feats: Feats, n: int, max_len: int, prefix: list[list[int]], hidden: bool = False):
    """One row at a time: force the row's prefix word by word, then take the most likely word.

    Returns per row (words, logprobs of the chosen words (0 for forced ones), hidden states)."""
    rows = []
    for r, forced in enumerate(prefix):
        i = r // n
        one = feats.select(torch.tensor([i]))
        memory = model.encode(one)
        state, word, words, lps, hs = model.init_state(memory), BOS, [], [], []
        for p in range(max_len):
            logprobs, state = model.step(memory, state, torch.tensor([word]))
            lp = policy(logprobs)[0]
            word = forced[p] if p < len(forced) else int(lp.argmax())
            words.append(word)
            lps.append(0.0 if p < len(forced) else float(lp[word]))
            hs.append(model.hidden(state)[0] if hidden else None)
            if word == EOS:
                break
        rows.append((words, lps, hs))
    return rows


def padded(rows: list[list[int]], width: int | None = None) -> torch.Tensor:
    width = max(len(r) for r in rows) if width is None else width
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.long)


def teacher_forced(model, feats: Feats, tokens: torch.Tensor, n: int):
    """Policy log-probabilities (R, T, V) and hidden states (R, T, H) of given captions, step by step."""
    memory = expand_memory(model, model.encode(feats), n)
    state, word, lps, hs = model.init_state(memory), torch.full((tokens.size(0),), BOS), [], []
    for p in range(tokens.size(1)):
        logprobs, state = model.step(memory, state, word)
        lps.append(policy(logprobs))
        hs.append(model.hidden(state) if hasattr(model, "hidden") else torch.zeros(len(word), 1))
        word = tokens[:, p]
    return torch.stack(lps, 1), torch.stack(hs, 1)


def needs_hidden(model) -> None:
    assert hasattr(model, "hidden"), f"{type(model).__name__} does not implement hidden(state) (models/base.py)"


# --- the empty prefix changes nothing -----------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_empty_prefix_decodes_exactly_as_without_one(arch):
    model, feats = build(arch)
    empty = torch.zeros(3, 0, dtype=torch.long)
    beam = Decoding("beam", 7, beam_size=3, length_penalty=0.5)
    for a, b in [(greedy(model, feats, 7), greedy(model, feats, 7, prefix=empty)),
                 (beam_search(model, feats, beam, n_best=2), beam_search(model, feats, beam, n_best=2, prefix=empty)),
                 (sample(model, feats, 2, Decoding("sample", 7), generator=torch.Generator().manual_seed(4)),
                  sample(model, feats, 2, Decoding("sample", 7), generator=torch.Generator().manual_seed(4),
                         prefix=torch.zeros(6, 0, dtype=torch.long)))]:
        assert all(torch.equal(x, y) for x, y in zip(a[:5], b[:5])) and a.hidden is None and b.hidden is None


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_without_prefix_matches_the_reference_loop(arch):
    model, feats = build(arch)
    result = greedy(model, feats, 7)
    for row, (words, lps, _) in zip(range(3), reference_greedy(model, feats, 1, 7, [[]] * 3)):
        assert captions(result)[row] == tuple(words)
        torch.testing.assert_close(result.logprobs[row, : len(lps)], torch.tensor(lps), atol=1e-5, rtol=1e-5)


# --- greedy and sampling from a prefix ----------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_from_its_own_prefix_gives_the_same_caption(arch):
    model, feats = build(arch)
    full = greedy(model, feats, 7)
    for t in range(1, full.tokens.size(1) + 1):
        again = greedy(model, feats, 7, prefix=full.tokens[:, :t])
        assert torch.equal(again.tokens, full.tokens)
        torch.testing.assert_close(again.logprobs[:, t:], full.logprobs[:, t:])
        assert again.logprobs[:, :t].abs().sum() == 0 and again.entropy[:, :t].abs().sum() == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_after_arbitrary_prefixes_matches_the_reference_loop(arch):
    model, feats = build(arch, images=4)
    prefixes = [[5, 7, 5], [], [9, EOS, 4], [11]]  # lengths differ; row 2 has ended (the 4 is ignored)
    result = greedy(model, feats, 6, prefix=padded(prefixes), return_hidden=hasattr(model, "hidden"))
    expected = reference_greedy(model, feats, 1, 6, prefixes, hidden=hasattr(model, "hidden"))
    for row, (words, lps, hs) in enumerate(expected):
        assert captions(result)[row] == tuple(words)
        torch.testing.assert_close(result.logprobs[row, : len(lps)], torch.tensor(lps), atol=1e-5, rtol=1e-5)
        if result.hidden is not None:
            torch.testing.assert_close(result.hidden[row, : len(hs)], torch.stack(hs), atol=1e-5, rtol=1e-5)
            assert result.hidden[row, len(hs) :].abs().sum() == 0  # 0 at pads
    assert captions(result)[2] == (9, EOS)
    assert torch.equal(result.mask, result.tokens != PAD)


@pytest.mark.parametrize("arch", ARCHS)
def test_samples_from_a_prefix_start_with_it_and_score_only_their_continuation(arch):
    model, feats = build(arch)
    prefix = padded([[4, 5], [6], [], [7, 8, 9], [EOS], [10]])  # (B*n, P), n = 2
    result = sample(model, feats, 2, Decoding("sample", 6), prefix=prefix, generator=torch.Generator().manual_seed(0))
    forced = prefix != PAD
    assert torch.equal(result.tokens[:, : prefix.size(1)][forced], prefix[forced])
    assert captions(result)[4] == (EOS,)
    lps, _ = teacher_forced(model, feats, result.tokens, 2)
    chosen = lps.gather(2, result.tokens[:, :, None]).squeeze(2)  # (R, T)
    generated = result.mask & ~F.pad(forced, (0, result.tokens.size(1) - prefix.size(1)))
    torch.testing.assert_close(result.logprobs, torch.where(generated, chosen, 0.0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.entropy, torch.where(generated, entropy(lps.flatten(0, 1)).view(6, -1), 0.0),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.scores, result.logprobs.sum(1))


def test_cold_sampling_from_a_prefix_is_greedy_from_it():
    model, feats = build("updown")
    prefix = padded([[4, 5], [6], [7, 8, 9]])
    expected = greedy(model, feats, 7, prefix=prefix).tokens
    got = sample(model, feats, 1, Decoding("sample", 7, temperature=1e-5), prefix=prefix,
                 generator=torch.Generator().manual_seed(0))
    assert torch.equal(got.tokens, expected)


def test_a_prefix_of_max_len_words_is_the_whole_caption():
    result = greedy(TableModel(), feats_for([0.0]), 3, prefix=torch.tensor([[B_, B_, A]]))
    assert result.tokens.tolist() == [[B_, B_, A]] and result.logprobs.tolist() == [[0.0, 0.0, 0.0]]


def test_table_model_prefix_by_hand():
    # after b: EOS .9 -> greedy ends; the forced words cost nothing, EOS costs log .9
    result = greedy(TableModel(), feats_for([0.0]), 5, prefix=torch.tensor([[A, B_]]))
    assert result.tokens.tolist() == [[A, B_, EOS]]
    torch.testing.assert_close(result.logprobs, torch.tensor([[0.0, 0.0, math.log(0.9)]]))
    torch.testing.assert_close(result.scores, torch.tensor([math.log(0.9)]))


@pytest.mark.parametrize("bad, match", [
    (torch.tensor([[BOS, 4]]), "BOS"), (torch.tensor([[PAD, 4]]), "right"), (torch.tensor([[4] * 6]), "max_len"),
    (torch.tensor([[4], [4]]), "rows"), (torch.tensor([[4.0]]), "long"), (torch.tensor([[V]]), "word ids")])
def test_bad_prefixes_are_rejected(bad, match):
    model, feats = build("fc", images=1)
    with pytest.raises(ValueError, match=match):
        greedy(model, feats, 5, prefix=bad)


# --- beam search from a prefix ------------------------------------------------------------------


def test_exhaustive_beam_from_a_prefix_equals_brute_force_over_its_continuations():
    model, key, max_len, n_best = PrefixModel(), 0.3, 4, 5
    prefix = [4, 3]
    result = beam_search(model, feats_for([key]), Decoding("beam", max_len, beam_size=4**3), n_best=n_best,
                         prefix=torch.tensor([prefix]))
    # brute force scores whole captions; a continuation's score is that minus the prefix's log-probability
    expected = [(s, q) for s, q in brute_force(model, key, max_len) if q[:2] == tuple(prefix)]
    memory = model.encode(feats_for([key]))
    state, prefix_lp = model.init_state(memory), 0.0
    for prev, w in zip([BOS] + prefix[:-1], prefix):
        logprobs, state = model.step(memory, state, torch.tensor([prev]))
        prefix_lp += float(policy(logprobs)[0, w])
    expected = sorted(((s - prefix_lp, q) for s, q in expected), reverse=True)[:n_best]
    assert captions(result) == [q for _, q in expected]
    torch.testing.assert_close(result.scores, torch.tensor([s for s, _ in expected]), atol=1e-6, rtol=1e-6,
                               check_dtype=False)
    assert result.logprobs[:, :2].abs().sum() == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_beam_of_one_from_a_prefix_is_greedy_from_it(arch):
    model, feats = build(arch)
    prefix = padded([[4, 5], [6], [7, 8, 9]])
    assert torch.equal(beam_search(model, feats, Decoding("beam", 7, beam_size=1), prefix=prefix).tokens,
                       greedy(model, feats, 7, prefix=prefix).tokens)


def test_beam_prefixes_of_different_lengths_are_batched_consistently():
    model, keys = PrefixModel(), [0.3, 1.7, 2.2]
    prefixes = [[4], [5, 3, 4], []]
    together = beam_search(model, feats_for(keys), Decoding("beam", 6, beam_size=3), n_best=2, prefix=padded(prefixes))
    for i, key in enumerate(keys):
        alone = beam_search(model, feats_for([key]), Decoding("beam", 6, beam_size=3), n_best=2,
                            prefix=torch.tensor([prefixes[i]], dtype=torch.long).view(1, -1))
        t = alone.tokens.size(1)
        assert torch.equal(together.tokens[2 * i : 2 * i + 2, :t], alone.tokens)
        torch.testing.assert_close(together.scores[2 * i : 2 * i + 2], alone.scores)


def test_a_finished_prefix_fills_every_n_best_row_with_itself():
    result = beam_search(PrefixModel(), feats_for([0.3, 1.7]), Decoding("beam", 5, beam_size=3), n_best=3,
                         prefix=padded([[4, EOS], []]))
    assert captions(result)[:3] == [(4, EOS)] * 3 and result.scores[:3].tolist() == [0.0] * 3
    assert result.scores[3:].isfinite().all()


# --- continuing from a state --------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_continue_decoding_from_the_state_after_a_prefix_is_greedy_from_the_prefix(arch):
    model, feats = build(arch)
    prefix = torch.tensor([[4, 5], [6, 7], [8, 9]])
    with torch.no_grad():
        memory = expand_memory(model, model.encode(feats), 1)
        state = model.init_state(memory)
        for word in (torch.full((3,), BOS), prefix[:, 0]):  # read BOS and all prefix words but the last
            _, state = model.step(memory, state, word)
        rest = continue_decoding(model, memory, state, prefix[:, 1], Decoding("greedy", 5))
    full = greedy(model, feats, 7, prefix=prefix)
    assert torch.equal(rest.tokens, full.tokens[:, 2:])
    torch.testing.assert_close(rest.logprobs, full.logprobs[:, 2:])


# --- hidden states ------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_hidden_states_are_what_the_logits_come_from(arch):
    model, feats = build(arch)
    needs_hidden(model)
    for result in (greedy(model, feats, 6, return_hidden=True),
                   beam_search(model, feats, Decoding("beam", 6, beam_size=3), n_best=2, return_hidden=True)):
        n = result.tokens.size(0) // 3
        _, hidden = teacher_forced(model, feats, result.tokens, n)  # (R, T, H)
        torch.testing.assert_close(result.hidden, hidden * result.mask[:, :, None], atol=1e-5, rtol=1e-5)
        assert result.hidden.shape[:2] == result.tokens.shape
    assert not result.hidden.requires_grad


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_hidden_states_carry_gradient(arch):
    model, feats = build(arch)
    needs_hidden(model)
    model.train()
    result = sample(model, feats, 2, Decoding("sample", 5), generator=torch.Generator().manual_seed(0),
                    return_hidden=True)
    assert result.hidden.requires_grad
    result.hidden.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_results_without_hidden_stay_five_fields_compatible():
    result = DecodeResult(*(torch.zeros(1, 1) for _ in range(5)))
    assert result.hidden is None and len(result) == 6
    model, feats = build("fc")
    assert beam_search(model, feats, Decoding("beam", 4, beam_size=3)).hidden is None
    assert greedy(model, feats, 4, return_hidden=True).hidden.shape[2] == 8


# --- Monte-Carlo rollouts -----------------------------------------------------------------------


def rollout_prefixes(tokens: torch.Tensor, k: int) -> torch.Tensor:
    """(B, T) -> (B*T*K, T): the prefix of each rollout row in (b, t, k) order, PAD-padded, cut at EOS."""
    b, t_max = tokens.shape
    rows = tokens.repeat_interleave(t_max * k, 0)  # (R, T)
    t = torch.arange(1, t_max + 1).repeat_interleave(k).repeat(b)  # (R,)
    return torch.where(torch.arange(t_max) < t[:, None], rows, PAD)


@pytest.mark.parametrize("arch", ARCHS)
def test_rollouts_are_ordered_b_t_k_and_start_with_their_prefix(arch):
    model, feats = build(arch)
    caps = padded([[4, 5, EOS], [6, 7, 8, 9], [10, EOS]], 4)  # (B, T=4)
    result = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 6), generator=torch.Generator().manual_seed(0))
    assert result.tokens.size(0) == 3 * 4 * 2
    prefixes = rollout_prefixes(caps, 2)
    starts = prefixes != PAD
    assert torch.equal(result.tokens[:, :4][starts], prefixes[starts])
    grid = result.tokens.view(3, 4, 2, -1)
    assert grid[0, 2, 0].tolist()[:4] == [4, 5, EOS, PAD] and torch.equal(grid[0, 2], grid[0, 3])  # ended
    assert grid[2, 1:, :, 2:].eq(PAD).all()  # caption 2 ended at t = 2: prefixes 2..4 are the caption itself
    assert torch.equal(result.mask, result.tokens != PAD)
    assert result.logprobs[starts.nonzero(as_tuple=True)].abs().sum() == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_cold_rollouts_are_greedy_from_every_prefix(arch):
    model, feats = build(arch)
    caps = sample(model, feats, 1, Decoding("sample", 5), generator=torch.Generator().manual_seed(2)).tokens  # (B, T)
    hidden = hasattr(model, "hidden")
    result = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 7, temperature=1e-6),
                             generator=torch.Generator().manual_seed(0), return_hidden=hidden)
    expected = greedy(model, feats.expand(caps.size(1) * 2), 7, prefix=rollout_prefixes(caps, 2), return_hidden=hidden)
    width = max(result.tokens.size(1), expected.tokens.size(1))
    for got, want in zip(result, expected):
        if got is not None and got.dim() > 1:
            pad = (0, 0, 0, width - got.size(1)) if got.dim() == 3 else (0, width - got.size(1))
            wpad = (0, 0, 0, width - want.size(1)) if want.dim() == 3 else (0, width - want.size(1))
            torch.testing.assert_close(F.pad(got, pad), F.pad(want, wpad), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_rollout_logprobs_are_the_models_own(arch):
    model, feats = build(arch)
    caps = padded([[4, 5, EOS], [6, 7, 8], [9]], 3)
    result = prefix_rollouts(model, feats, caps, 3, Decoding("sample", 6), generator=torch.Generator().manual_seed(1))
    lps, _ = teacher_forced(model, feats, result.tokens, 9)  # every image has T*K = 9 rows
    chosen = lps.gather(2, result.tokens[:, :, None]).squeeze(2)  # (R, W)
    prefix = F.pad(rollout_prefixes(caps, 3) != PAD, (0, result.tokens.size(1) - 3))
    generated = result.mask & ~prefix
    torch.testing.assert_close(result.logprobs, torch.where(generated, chosen, 0.0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.scores, result.logprobs.sum(1))


def test_rollouts_are_reproducible_with_a_generator():
    model, feats = build("updown")
    caps = padded([[4, 5, 6], [7, EOS], [8, 9, 10]], 3)
    a, b = (prefix_rollouts(model, feats, caps, 4, Decoding("sample", 6), generator=torch.Generator().manual_seed(3))
            for _ in range(2))
    assert torch.equal(a.tokens, b.tokens)
    c = prefix_rollouts(model, feats, caps, 4, Decoding("sample", 6), generator=torch.Generator().manual_seed(4))
    assert not torch.equal(a.tokens, c.tokens)


def test_rollout_next_words_follow_the_models_distribution():
    """TableModel: the word after a prefix depends on its last word only (after a: EOS .3, a .4, b .3;
    after b: EOS .9, a .05, b .05), so K rollouts of prefixes ending in a and b are counted by hand."""
    k = 20_000
    result = prefix_rollouts(TableModel(), feats_for([0.0]), torch.tensor([[A, B_]]), k, Decoding("sample", 3),
                             generator=torch.Generator().manual_seed(0))
    after = result.tokens.view(2, k, -1)
    for t, expected in ((1, {EOS: 0.3, A: 0.4, B_: 0.3}), (2, {EOS: 0.9, A: 0.05, B_: 0.05})):
        words = after[t - 1, :, t]
        for word, p in expected.items():
            freq = float((words == word).double().mean())
            assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / k), (t, word, freq)
        # the logprob of each drawn word is its table probability
        want = torch.tensor([math.log(expected[int(w)]) for w in words[:50]])
        torch.testing.assert_close(result.logprobs.view(2, k, -1)[t - 1, :50, t], want)


def test_rollouts_of_finished_or_full_prefixes_need_no_decoding():
    result = prefix_rollouts(TableModel(), feats_for([0.0]), torch.tensor([[A, EOS]]), 2, Decoding("sample", 2))
    assert result.tokens.tolist() == [[A, EOS], [A, EOS], [A, EOS], [A, EOS]]  # t=1: max_len - 1 = 1 word left
    result = prefix_rollouts(TableModel(), feats_for([0.0]), torch.tensor([[A, A]]), 2, Decoding("sample", 2))
    assert result.tokens[2:].tolist() == [[A, A], [A, A]] and result.logprobs[2:].abs().sum() == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_rollout_hidden_states_cover_prefix_and_continuation(arch):
    model, feats = build(arch)
    needs_hidden(model)
    caps = padded([[4, 5, EOS], [6, 7, 8], [9]], 3)
    result = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 6), generator=torch.Generator().manual_seed(1),
                             return_hidden=True)
    _, hidden = teacher_forced(model, feats, result.tokens, 6)
    torch.testing.assert_close(result.hidden, hidden * result.mask[:, :, None], atol=1e-5, rtol=1e-5)


def test_rollouts_follow_the_callers_autograd_mode():
    model, feats = build("fc")
    model.train()
    caps = padded([[4, 5], [6, 7], [8, EOS]], 2)
    result = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 4), generator=torch.Generator().manual_seed(0),
                             return_hidden=True)
    assert result.logprobs.requires_grad and result.hidden.requires_grad
    (result.logprobs.sum() + result.hidden.sum()).backward()
    assert model.logit.weight.grad.abs().sum() > 0
    with torch.no_grad():
        assert not prefix_rollouts(model, feats, caps, 2, Decoding("sample", 4)).logprobs.requires_grad


def test_beam_search_stops_when_a_finished_prefix_is_all_there_is():
    result = beam_search(PrefixModel(), feats_for([0.3]), Decoding("beam", 8, beam_size=3), n_best=2,
                         prefix=torch.tensor([[4, EOS]]))
    assert result.tokens.tolist() == [[4, EOS], [4, EOS]]
