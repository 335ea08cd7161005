"""The run's decoding settings as one frozen object (rlcap.decoding.options.Decoding): built once per run from its
``decode`` section and device, and what every decode of methods/, eval/ and train/ is given."""

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from rlcap.data.loader import CaptionData
from rlcap.data.vocab import Vocab
from rlcap.decoding import beam_search, greedy, prefix_rollouts, sample
from rlcap.decoding.options import Decoding, decode, rollouts
from rlcap.errors import ConfigError
from rlcap.models import Feats, ModelConfig, build_model
from rlcap.run_config import DecodeSettings, SequenceRunConfig
from rlcap.train.session import Progress, Session

SRC = Path(__file__).resolve().parents[1] / "src" / "rlcap"


def tiny():
    torch.manual_seed(0)
    cfg = ModelConfig(arch="updown", embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, dropout=0.0)
    feats = Feats(torch.randn(2, 6), torch.randn(2, 3, 6), torch.ones(2, 3, dtype=torch.bool))
    return build_model(cfg, 11, 6, 6).eval(), feats


def test_a_run_decoding_is_its_decode_section_resolved_for_its_device():
    section = DecodeSettings(max_len=9, temperature=0.7, beam_size=4, length_penalty=0.5, no_repeat_ngram=3)
    cpu = Decoding.of_run(section, "cpu")
    assert cpu == Decoding("beam", 9, beam_size=4, length_penalty=0.5, no_repeat_ngram=3, temperature=0.7,
                           exit_every=1, compile=False)
    cuda = Decoding.of_run(section, "cuda:0")  # (resolved by the device's type: no GPU needed)
    assert (cuda.exit_every, cuda.compile) == (0, True)
    assert Decoding.of_run(DecodeSettings(beam_size=1), "cpu").method == "greedy"  # validation's: greedy at beam 1
    assert cpu.as_sampling().method == "sample" and cpu.as_sampling().temperature == 0.7
    assert cpu.as_n_best(3) == dataclasses.replace(cpu, beam_size=3, length_penalty=0.0, no_repeat_ngram=0)
    assert cpu.eager().compile is False and cuda.eager().compile is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpu.max_len = 3


def test_bad_settings_are_one_line_naming_them():
    with pytest.raises(ConfigError, match="decoding method: 'nucleus' is not one of"):
        Decoding("nucleus", 5)
    with pytest.raises(ConfigError, match="max_len >= 1"):
        Decoding("greedy", 0)
    with pytest.raises(ConfigError, match="exit_every: expected -1"):
        Decoding.search("cpu", 3, 5, exit_every=-2)
    model, feats = tiny()
    with pytest.raises(ConfigError, match="greedy decoding gives one caption per image, asked for n=2"):
        decode(model, feats, Decoding("greedy", 5), 2)


def test_decode_gives_what_the_decoder_it_names_gives():
    model, feats = tiny()
    d = Decoding("beam", 7, beam_size=3, length_penalty=0.5, temperature=0.8, top_k=5, top_p=0.9)
    assert torch.equal(decode(model, feats, d.as_greedy()).tokens, greedy(model, feats, 7).tokens)
    assert torch.equal(decode(model, feats, d, 2).tokens,
                       beam_search(model, feats, Decoding("beam", 7, beam_size=3, length_penalty=0.5), n_best=2).tokens)
    got = decode(model, feats, d.as_sampling(), 4, generator=torch.Generator().manual_seed(1))
    want = sample(model, feats, 4, Decoding("sample", 7, temperature=0.8, top_k=5, top_p=0.9),
                  generator=torch.Generator().manual_seed(1))
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.logprobs, want.logprobs)
    caps = greedy(model, feats, 7).tokens
    got = rollouts(model, feats, caps, 2, d, generator=torch.Generator().manual_seed(2))
    want = prefix_rollouts(model, feats, caps, 2, Decoding("sample", 7, temperature=0.8, top_k=5, top_p=0.9),
                           generator=torch.Generator().manual_seed(2))
    assert torch.equal(got.tokens, want.tokens)


def test_the_session_holds_the_run_decoding():
    cfg = SequenceRunConfig()
    cfg.decode.beam_size, cfg.decode.temperature = 2, 0.5
    session = Session(cfg, CaptionData(Vocab(["<pad>", "<bos>", "<eos>", "<unk>"]), {}), {}, Progress(), Path("."))
    assert session.decoding == Decoding.of_run(cfg.decode, "cpu")


LOW_LEVEL = {"greedy", "sample", "beam_search", "prefix_rollouts", "greedy_segments", "continue_decoding"}


def low_level_imports(package: Path) -> list[tuple[str, str]]:
    """(file, name) for each low-level decoder a module of ``package`` imports by name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rlcap.decoding"):
                found += [(path.name, a.name) for a in node.names if a.name in LOW_LEVEL]
    return found


def test_methods_eval_and_train_decode_through_the_object():
    """No loop, no inference door and no engine module unpacks the settings into a decoder's keywords."""
    assert ("rows.py", "sample") in low_level_imports(SRC / "bench")  # the checker finds one (a benchmark's tool)
    assert low_level_imports(SRC / "methods") == []
    assert low_level_imports(SRC / "eval") == []
    assert low_level_imports(SRC / "train") == []
    assert "decode_options" not in (SRC / "decoding" / "stepping.py").read_text(encoding="utf-8")
