"""Decoding without host synchronisations, with pre-drawn randomness, and as compiled steps (decoding/stepping.py).

* ``exit_every=0``: greedy, sampling and beam search read nothing on the host, on FC, UpDown and the transformer;
  their captions are those of ``exit_every=1`` with all-PAD columns up to ``max_len``.
* ``compile=True``: the same words, log-probabilities and gradients as the eager steps from the same seed
  (dropout on: inductor's ``fallback_random`` draws the masks in eager's order), compiled as one graph.
"""

from __future__ import annotations

import logging

import pytest
import torch

import rlcap.host_sync
from rlcap.data.vocab import BOS, PAD
from rlcap.decoding import (Decoding, DecodeResult, beam_search, continue_decoding, greedy, prefix_rollouts,
                            resolve_compile, resolve_exit_every, sample)
from rlcap.decoding import stepping
from rlcap.errors import ConfigError
from rlcap.host_sync import count_host_syncs
from rlcap.models import Feats, ModelConfig, build_model, expand_memory
from rlcap.methods import load_run_config

ARCHS = ("fc", "updown", "transformer")


def tiny(arch: str, dropout: float = 0.2):
    torch.manual_seed(0)
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, num_heads=2,
                      ff_dim=8, max_len=8, dropout=dropout)
    feats = Feats(torch.randn(2, 6), torch.randn(2, 3, 6), torch.ones(2, 3, dtype=torch.bool))
    return build_model(cfg, 11, 6, 6), feats


@pytest.fixture
def every_read(monkeypatch):
    """count_host_syncs, also seeing the reads made in inference mode (greedy and beam search run there),
    where ``bool(t)`` and ``t.item()`` reach the dispatcher as ``is_nonzero`` and ``item``."""
    monkeypatch.setattr(rlcap.host_sync, "_READS_VALUE", rlcap.host_sync._READS_VALUE | {"aten.is_nonzero",
                                                                                         "aten.item"})


def decoders(model, feats, exit_every):
    gen = torch.Generator().manual_seed(1)
    return {"greedy": lambda: greedy(model, feats, 6, exit_every=exit_every),
            "sample": lambda: sample(model, feats, 3, Decoding("sample", 6, exit_every=exit_every), generator=gen),
            "beam": lambda: beam_search(model, feats, Decoding("beam", 6, beam_size=3, exit_every=exit_every),
                                        n_best=2)}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("training", [False, True])
def test_decoding_without_exit_checks_reads_nothing_on_the_host(arch, training, every_read):
    model, feats = tiny(arch)
    model.train(training)  # training: sampling with autograd (the transformer's decode-then-score too)
    for name, decode in decoders(model, feats, exit_every=0).items():
        with count_host_syncs() as syncs:
            decode()
        assert syncs.total == 0, f"{arch} {name}: {syncs}"
    with count_host_syncs() as syncs:
        greedy(model, feats, 6, exit_every=1)
    assert syncs.total > 0  # the counter sees the check it is meant to remove


def assert_same_but_padding(short: DecodeResult, full: DecodeResult, width: int) -> None:
    t = short.tokens.size(1)
    assert full.tokens.size(1) == width >= t
    assert torch.equal(full.tokens[:, :t], short.tokens) and bool((full.tokens[:, t:] == PAD).all())
    assert not full.mask[:, t:].any() and full.logprobs[:, t:].abs().sum() == 0 and full.entropy[:, t:].abs().sum() == 0
    torch.testing.assert_close(full.logprobs[:, :t], short.logprobs)
    torch.testing.assert_close(full.entropy[:, :t], short.entropy)
    torch.testing.assert_close(full.scores, short.scores)


@pytest.mark.parametrize("arch", ARCHS)
def test_never_checking_gives_the_same_captions_padded_to_max_len(arch):
    model, feats = tiny(arch)
    model.eval()
    for name, decode in decoders(model, feats, exit_every=1).items():
        short = decode()
        for every in (0, 4):
            full = decoders(model, feats, exit_every=every)[name]()
            width = 6 if every == 0 else min(6, -(-short.tokens.size(1) // every) * every)
            assert_same_but_padding(short, full, width)


def test_rollouts_and_continuations_take_exit_every():
    model, feats = tiny("fc")
    model.eval()
    caps = greedy(model, feats, 4).tokens
    a = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 6, exit_every=1),
                        generator=torch.Generator().manual_seed(0))
    b = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 6, exit_every=0),
                        generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.tokens, b.tokens[:, :a.tokens.size(1)]) and bool((b.tokens[:, a.tokens.size(1):] == PAD).all())
    memory = expand_memory(model, model.encode(feats), 2)
    word = torch.full((4,), BOS)
    c, d = (continue_decoding(model, memory, model.init_state(memory), word, Decoding("sample", 6, exit_every=every),
                              generator=torch.Generator().manual_seed(2)) for every in (1, 0))
    assert d.tokens.size(1) == 6 and torch.equal(c.tokens, d.tokens[:, :c.tokens.size(1)])


def test_sampling_reads_pre_drawn_numbers_from_the_generator():
    """All of a decode's uniform numbers come from the generator before the first step: max_len per row."""
    model, feats = tiny("fc")
    model.eval()
    gen = torch.Generator().manual_seed(5)
    sample(model, feats, 3, Decoding("sample", 6), generator=gen)
    expected = torch.Generator().manual_seed(5)
    torch.rand(6, 6, dtype=torch.float64, generator=expected)
    assert torch.equal(torch.rand(3, generator=gen), torch.rand(3, generator=expected))


def test_exit_every_and_compile_settings():
    assert resolve_exit_every(None, "cpu") == resolve_exit_every(-1, "cpu") == 1
    assert resolve_exit_every(-1, "cuda") == 0 and resolve_exit_every(3, "cuda") == 3
    assert resolve_compile("auto", "cpu") is False and resolve_compile("auto", "cuda:0") is True
    assert resolve_compile(True, "cpu") is True and resolve_compile(False, "cuda") is False
    with pytest.raises(ConfigError, match="exit_every"):
        resolve_exit_every(-2, "cpu")
    with pytest.raises(ConfigError, match="compile"):
        resolve_compile("yes", "cpu")



def test_a_cpu_decode_runs_as_on_a_gpu_through_the_code_not_the_environment(monkeypatch):
    """No run setting chooses either (auto is right on every device), and no environment variable: the variables
    of the last release are read by no one; a test replaces what auto means, a caller passes the setting."""
    monkeypatch.setenv("RLCAP_DECODE_EXIT_EVERY", "0")
    monkeypatch.setenv("RLCAP_DECODE_COMPILE", "true")
    assert resolve_exit_every(None, "cpu") == 1 and resolve_compile("auto", "cpu") is False
    monkeypatch.setattr(stepping, "auto_exit_every", lambda device: 0)
    assert resolve_exit_every(None, "cpu") == resolve_exit_every(-1, "cpu") == 0 and resolve_exit_every(2, "cpu") == 2
    assert Decoding.search("cpu", 3, 5).exit_every == 0
    with pytest.raises(ConfigError, match="decode.compile was removed: .* the Python decoders' compile=True"):
        load_run_config(None, ["decode.compile=true"])


# --- compiled steps ------------------------------------------------------------------------------


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_compiles_like_eager(arch: str, caplog) -> None:
    """Greedy and beam search in eval mode, sampling with autograd in training mode (dropout on): compiled
    and eager from the same seed give the same words, log-probabilities and gradients of their sum."""
    model, feats = tiny(arch)
    runs = []
    with caplog.at_level(logging.WARNING, logger="rlcap.decoding.stepping"):
        for compile in (False, True):
            model.eval()
            with_greedy = greedy(model, feats, 6, compile=compile)
            with_beam = beam_search(model, feats, Decoding("beam", 6, beam_size=3, compile=compile), n_best=2)
            model.train()
            model.zero_grad(set_to_none=True)
            torch.manual_seed(7)  # dropout's masks
            sampled = sample(model, feats, 3, Decoding("sample", 6, compile=compile),
                             generator=torch.Generator().manual_seed(3))
            (sampled.logprobs.sum() + sampled.entropy.sum()).backward()
            runs.append((with_greedy, with_beam, sampled, grads(model)))
    assert not caplog.records, "the step did not compile as one graph: " + caplog.text
    assert stepping._COMPILED[model] is not stepping._EAGER
    model.eval()
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    greedy(model, feats, 6, compile=True)
    beam_search(model, feats, Decoding("beam", 6, beam_size=3, compile=True), n_best=2)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # compiled once, kept with the model
    eager, compiled = runs
    for a, b in zip(eager[:3], compiled[:3]):
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
        torch.testing.assert_close(b.logprobs, a.logprobs, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b.entropy, a.entropy, atol=1e-5, rtol=1e-5)
    assert eager[3].keys() == compiled[3].keys() and eager[3]
    for name, grad in eager[3].items():
        torch.testing.assert_close(compiled[3][name], grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("arch", ["fc", "updown"])
def test_compiled_steps_decode_as_the_eager_ones(arch, caplog):
    assert_compiles_like_eager(arch, caplog)


@pytest.mark.slow
def test_compiled_transformer_steps_decode_as_the_eager_ones(caplog):
    """The key/value cache grows a position a step: the length is a symbol of the compiled graph."""
    assert_compiles_like_eager("transformer", caplog)


class ReadsOnTheHost(torch.nn.Module):
    """A step with a Python branch on a tensor's value: dynamo cannot make one graph of it."""

    vocab_size = 6

    def encode(self, feats):
        return (feats.fc,)

    def init_state(self, memory):
        return (memory[0].new_zeros(memory[0].size(0), 1),)

    def step(self, memory, state, tokens):
        logits = memory[0].sum(1, keepdim=True) * torch.arange(6.0) + state[0]
        if bool(tokens.sum() > 2):
            logits = logits.flip(1)
        return logits.log_softmax(-1), (state[0] + 1,)


def test_a_step_that_cannot_compile_decodes_eagerly_and_says_so_once(caplog):
    model = ReadsOnTheHost()
    feats = Feats(torch.randn(2, 3), torch.randn(2, 1, 3), torch.ones(2, 1, dtype=torch.bool))
    eager = greedy(model, feats, 4)
    with caplog.at_level(logging.WARNING, logger="rlcap.decoding.stepping"):
        first, second = greedy(model, feats, 4, compile=True), sample(model, feats, 2,
                                                                      Decoding("sample", 4, compile=True))
    assert torch.equal(first.tokens, eager.tokens) and second.tokens.shape[0] == 4
    assert len(caplog.records) == 1 and "decodes eagerly" in caplog.text and "ReadsOnTheHost" in caplog.text
