"""No environment variable changes what the product does, and decoding's functions take a ``Decoding``.

The environment src/ reads is torchrun's launch settings (and thread counts, should a line read one), each line
with its reason beside it; a test reaches what it needs through the code (an argument, or replacing a module's
function), never through a variable the product reads. A decoding function takes the run's settings as one
:class:`rlcap.decoding.Decoding`, not unpacked into ten or more parameters."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from rlcap.data.feats import Feats
from rlcap.data.vocab import BOS, EOS, SPECIALS, Vocab
from rlcap.decoding import Decoding, beam_search, continue_decoding, prefix_rollouts, sample, stepping
from rlcap.errors import ConfigError
from rlcap.models import build_model
from rlcap.models.base import expand_memory
from rlcap.models.model_config import ModelConfig
from rlcap.train import checkpoint

SRC = Path(__file__).resolve().parents[1] / "src" / "rlcap"
LAUNCH_SETTINGS = {"RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",  # torchrun's
                   "OMP_NUM_THREADS", "MKL_NUM_THREADS"}  # thread counts
MOST_PARAMETERS = 9


def tiny():
    """An FC captioner of 11 words and two images' features (as tests/test_decode_syncs.py builds them)."""
    torch.manual_seed(0)
    cfg = ModelConfig(arch="fc", embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, num_heads=2,
                      ff_dim=8, max_len=8, dropout=0.0)
    feats = Feats(torch.randn(2, 6), torch.randn(2, 3, 6), torch.ones(2, 3, dtype=torch.bool))
    return build_model(cfg, 11, 6, 6).eval(), feats


def environment_reads(path: Path) -> list[int]:
    """The lines of ``path`` that touch the environment: ``os.environ``, ``os.getenv`` or ``os.putenv``, or
    ``environ`` / ``getenv`` imported from os."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    from_os = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "os"
               for a in n.names if a.name in ("environ", "getenv", "putenv")}
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.add(node.lineno)
        elif isinstance(node, ast.Name) and node.id in from_os:
            lines.add(node.lineno)
    return sorted(lines)


def test_src_reads_only_launch_settings_from_the_environment_each_with_its_reason():
    found, wrong = 0, []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8").splitlines()
        for number in environment_reads(path):
            line = text[number - 1]
            code, _, comment = line.partition("  #")
            names = set(re.findall(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']""", code))
            found += 1
            if not names or not names <= LAUNCH_SETTINGS or not comment.strip():
                wrong.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not wrong, "environment read that is not a launch setting with its reason:\n" + "\n".join(wrong)
    assert found >= 5  # torchrun's settings are read (the search finds what it looks for)


def test_the_search_finds_every_way_of_reading_the_environment(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('import os\nfrom os import environ as env, getenv\n\na = os.environ.get("X")\nb = env["Y"]\n'
                    'c = getenv("Z")\nd = os.getenv("W")\ne = "os.environ in a string"\n')
    assert environment_reads(path) == [4, 5, 6, 7]


def test_the_last_releases_variables_change_nothing(monkeypatch, tmp_path):
    """RLCAP_DECODE_EXIT_EVERY / RLCAP_DECODE_COMPILE forced decoding's device choices, RLCAP_TEST_SLOW_SAVE paused
    every save: set, they are read by no one (the tests reach the same through stepping.auto_exit_every, the
    decoders' arguments and checkpoint._set_aside)."""
    for name, value in (("RLCAP_DECODE_EXIT_EVERY", "0"), ("RLCAP_DECODE_COMPILE", "true"),
                        ("RLCAP_TEST_SLOW_SAVE", "30")):
        monkeypatch.setenv(name, value)
    run = Decoding.search("cpu", 3, 5)
    assert (run.exit_every, run.compile) == (1, False)
    import time

    for _ in range(2):  # the second save sets the first aside: both pauses of the last release
        start = time.monotonic()
        checkpoint.save_checkpoint(tmp_path / "last", {"value": torch.nn.Linear(2, 2)}, {"model": {"arch": "fc"}},
                                   Vocab([*SPECIALS, "a"]), None, {"step": 1})
        assert time.monotonic() - start < 10 and checkpoint.is_complete(tmp_path / "last")


def test_a_test_makes_a_cpu_decode_skip_its_end_checks_through_the_code(monkeypatch):
    model, feats = tiny()
    with torch.no_grad():
        model.logit.bias[EOS] += 3.0  # captions that end early: the checks have steps to skip
    checked = sample(model, feats, 2, Decoding.on("cpu", "sample", 12), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(stepping, "auto_exit_every", lambda device: 0)  # what auto means on CUDA
    unchecked = sample(model, feats, 2, Decoding.on("cpu", "sample", 12), generator=torch.Generator().manual_seed(0))
    assert unchecked.tokens.size(1) == 12 and checked.tokens.size(1) < 12
    assert torch.equal(unchecked.tokens[:, :checked.tokens.size(1)], checked.tokens)


def parameter_counts(path: Path) -> dict[str, int]:
    """Every function of ``path`` and its parameters, keyword-only and ``*args`` / ``**kwargs`` included,
    ``self`` and ``cls`` not."""
    counts = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None]
            counts[f"{path.name}:{node.lineno} {node.name}"] = len([n for n in names if n not in ("self", "cls")])
    return counts


def test_no_decoding_function_takes_ten_parameters_or_more():
    counts = {k: v for path in sorted((SRC / "decoding").glob("*.py")) for k, v in parameter_counts(path).items()}
    assert len(counts) > 50  # every module read
    assert {k: v for k, v in counts.items() if v > MOST_PARAMETERS} == {}


def test_the_decoders_read_the_decoding_they_are_given():
    """What used to be ten keyword arguments is the ``Decoding``'s fields: each one reaches its decoder."""
    model, feats = tiny()
    cold = sample(model, feats, 1, Decoding("sample", 6, temperature=1e-4), generator=torch.Generator().manual_seed(1))
    top1 = sample(model, feats, 1, Decoding("sample", 6, top_k=1), generator=torch.Generator().manual_seed(2))
    greedy_beam = beam_search(model, feats, Decoding("beam", 6, beam_size=1))
    assert torch.equal(cold.tokens, top1.tokens) and torch.equal(cold.tokens, greedy_beam.tokens)
    short = beam_search(model, feats, Decoding("beam", 2, beam_size=3, exit_every=0), n_best=2)
    assert short.tokens.shape == (2 * feats.fc.size(0), 2)
    assert not (cold.tokens[:, :2] == EOS).any()  # (so that every prefix is rolled out)
    rolls = prefix_rollouts(model, feats, cold.tokens[:, :2], 2, Decoding("sample", 4, exit_every=0))
    assert rolls.tokens.shape == (2 * 2 * 2, 4)
    memory = expand_memory(model, model.encode(feats), 1)
    word = torch.full((feats.fc.size(0),), BOS)
    more = continue_decoding(model, memory, model.init_state(memory), word, Decoding("greedy", 3, exit_every=0))
    assert more.tokens.size(1) == 3
    with pytest.raises(ConfigError, match="continue_decoding: unknown method 'beam'"):
        continue_decoding(model, memory, model.init_state(memory), word, Decoding("beam", 3))
