"""One meaning per key, capabilities as Protocols, the phase as explicit state.

``rl.n_samples`` is the captions per image of every method that samples (PG-SPIDEr's M included); MIXER's
references per image are ``mixer.references`` and HRL's worker samples ``hrl.worker_samples``, and those runs list
no ``rl.n_samples``; a run's log records what it sampled, which the report shows. Optional model capabilities are
``runtime_checkable`` Protocols; a loop's phase is a :class:`Phase` it enters when it asks for its batches."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rlcap import api
from rlcap.methods import mixer as mixer_method
from rlcap.methods import pg as pg_method
from rlcap.models import ModelConfig, build_model, hidden_size
from rlcap.models.base import ExpandsMemory, ExportsPretrained, MarksSegments, ScoresDecoded, StatesHiddenSize
from rlcap.report.collect import collect
from rlcap.report.page import settings_rows
from rlcap.train.session import Phase, Progress, Session, train_batches
from rlcap.data.loader import CaptionData
from rlcap.data.vocab import Vocab
from tests.cli.in_process import run_cli
from tests.methods.test_method_registry import _listed
from tests.tiny import tiny_overrides

REPO = Path(__file__).resolve().parents[1]
EMPTY = REPO / "tests" / "train" / "empty.yaml"  # a recipe of no keys: the overrides say it all


# ------------------------------------------------------------------ item: one meaning of rl.n_samples
def test_help_config_lists_the_samples_key_each_method_reads(capsys):
    pg, mixer, hrl = (_listed(capsys, f"algorithm={name}") for name in ("pg", "mixer", "hrl"))
    assert "rl.n_samples" in pg and not [k for k in pg if k.startswith("pg.") and "sample" in k]
    assert "mixer.references" in mixer and "rl.n_samples" not in mixer
    assert "hrl.worker_samples" in hrl and "rl.n_samples" not in hrl
    assert "rl.n_samples" in _listed(capsys, "algorithm=scst")


@pytest.mark.parametrize("where", ["override", "recipe"])
def test_pg_samples_says_where_it_moved(tmp_path, capsys, where):
    recipe = tmp_path / "pg.yaml"
    recipe.write_text("algorithm: pg\npg:\n  samples: 1\n")
    argv = ["train", "configs/shapes_pg_spider.yaml", "pg.samples=2"] if where == "override" else ["train", str(recipe)]
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2
    assert err.strip().splitlines()[-1].endswith(
        "pg.samples was removed: PG-SPIDEr samples rl.n_samples captions per image, the samples per image of every "
        "method that samples (pg.samples: 1 is rl.n_samples: 1): remove it from the recipe or the command")


def test_every_pg_recipe_samples_one_caption_per_image():
    """The recipes moved pg.samples: 1 to rl.n_samples: 1 ([Liu17]'s M = 1): their runs draw what they drew."""
    for recipe in sorted((REPO / "configs").glob("*_pg_*.yaml")):
        assert api.load_run_config(recipe).rl.n_samples == 1, recipe
    for recipe in sorted((REPO / "configs").glob("*_mixer.yaml")):
        assert api.load_run_config(recipe).mixer.references == 5, recipe


def _drawn_per_image(monkeypatch, module) -> list[int]:
    """The rows per image each call of ``module.decode`` (the loops' decoding, rlcap.decoding.options) that samples
    really returned."""
    seen, real = [], module.decode

    def spy(model, feats, *args, **kwargs):
        out = real(model, feats, *args, **kwargs)
        if args[0].method == "sample":
            seen.append(out.tokens.size(0) // feats.fc.size(0))
        return out

    monkeypatch.setattr(module, "decode", spy)
    return seen


def _rl_argv(dataset, feats, init, out, **settings) -> list[str]:
    """``rlcap train`` overrides of a tiny run from the tiny XE checkpoint (whose model section it keeps)."""
    items = tiny_overrides(dataset, feats, out, **{"init_from": init, "rl.epochs": 1, "rl.batch_size": 8, **settings})
    return [a for a in items if not a.startswith(("model.", "xe.", "data.min_count", "data.seq_per_img"))]


@pytest.mark.parametrize("algorithm, module, settings, n", [
    ("pg", pg_method, {"rl.n_samples": 2, "pg.rollouts": 1}, 2),
    ("mixer", mixer_method, {"mixer.references": 3, "mixer.start": 2}, 3),
])
def test_the_report_shows_what_a_run_sampled(tiny_xe, tmp_path, capsys, monkeypatch, algorithm, module, settings, n):
    dataset, feats, init = tiny_xe(1)
    drawn = _drawn_per_image(monkeypatch, module)
    out = tmp_path / algorithm
    argv = _rl_argv(dataset, feats, init, out, algorithm=algorithm, max_steps=2, **settings)
    rc, _, err = run_cli(capsys, "train", str(EMPTY), *argv)
    assert rc == 0, err
    assert drawn and set(drawn) == {n}  # what the loop really sampled per image
    data = collect(out)
    assert data.drawn == {algorithm: n}
    rows = dict(settings_rows(data.settings, data.drawn))
    assert rows["samples per image"] == [str(n)]
    if algorithm == "mixer":  # the default rl.n_samples (5) is not what it drew
        assert data.settings[algorithm]["rl"]["n_samples"] != n


def test_a_run_that_samples_nothing_shows_no_samples_row():
    assert "samples per image" not in dict(settings_rows({"xe": {"algorithm": "xe", "xe": {"epochs": 2}}}, {}))


# ------------------------------------------------------------------ item: capabilities as Protocols
def _model(arch: str) -> torch.nn.Module:
    cfg = ModelConfig(arch=arch, embed_dim=8, hidden_dim=8, att_hidden_dim=8, num_layers=1, num_heads=2, ff_dim=16)
    return build_model(cfg, 12, 6, 6)


def test_optional_capabilities_are_protocols():
    show_tell, updown, transformer = _model("fc"), _model("updown"), _model("transformer")
    assert not isinstance(show_tell, ExpandsMemory) and isinstance(updown, ExpandsMemory)
    assert isinstance(transformer, ScoresDecoded) and not isinstance(updown, ScoresDecoded)
    assert not isinstance(updown, MarksSegments) and isinstance(_model("hrl"), MarksSegments)
    assert not isinstance(updown, StatesHiddenSize) and hidden_size(updown, ModelConfig(hidden_dim=8)) == 8
    assert not isinstance(updown, ExportsPretrained)

    class Exports(torch.nn.Module):
        hidden_size = 5

        def export_pretrained(self, folder, decode=None) -> None:
            pass

    assert isinstance(Exports(), ExportsPretrained) and hidden_size(Exports(), ModelConfig(hidden_dim=8)) == 5


def test_hrl_refuses_a_model_without_segments(tiny_xe, tmp_path, capsys):
    dataset, feats, init = tiny_xe(1)
    rc, _, err = run_cli(capsys, "train", str(EMPTY), *_rl_argv(dataset, feats, init, tmp_path / "h", algorithm="hrl"))
    assert rc == 2 and "algorithm=hrl trains a model of arch hrl" in err


PROBED = ["models/base.py", "decoding/sampling.py", "methods/hrl.py", "models/__init__.py", "train/checkpoint.py",
          "config.py", "run_config.py"]


def test_no_capability_probe_is_left_in_the_converted_modules():
    """hasattr probes and getattr-with-a-default probes of a model, module or section became isinstance checks
    (same_kind's NamedTuple test and os.sched_getaffinity, the platform's, stay)."""
    src = REPO / "src" / "rlcap"
    found = [(name, line.strip()) for name in PROBED for line in (src / name).read_text().splitlines()
             if re.search(r"hasattr\(|getattr\((model|module|own|section|obj), [^,()]+, ", line)
             and "_fields" not in line and "sched_getaffinity" not in line]
    assert found == []


# ------------------------------------------------------------------ item: the phase is explicit state
def test_train_batches_enters_its_phase_when_called():
    from rlcap.run_config import SequenceRunConfig

    session = Session(SequenceRunConfig(), CaptionData(Vocab(["<pad>", "<bos>", "<eos>", "<unk>"]), {}), {},
                      Progress(), Path("."))
    assert session.phase is None
    batches = train_batches(session, 2, 4, batches=lambda epoch, start: [], steps_per_epoch=0, phase="warm")
    assert session.phase == Phase("warm", 2)  # entered before the first batch
    assert session.state == {}  # nothing counted yet
    assert list(batches) == [] and session.state["warm"] == {"epoch": 2, "step_in_epoch": 0}
    main = Phase(None, 3)
    assert main.counter(session.state, session.progress) is vars(session.progress)  # the run's Progress, written


def test_a_run_stopped_in_its_pretraining_phase_stopped_early(tiny_xe, tmp_path):
    """finish_run reads the phase the loop is in: stopped by max_steps inside the value pretraining (3 steps), an
    ac run stopped early; run to its end, it did not."""
    dataset, feats, init = tiny_xe(1)
    settings = {"algorithm": "ac", "ac.value_pretrain_epochs": 1}
    stopped = api.train(api.load_run_config(None, _rl_argv(dataset, feats, init, tmp_path / "a", max_steps=2,
                                                           **settings)))
    assert stopped.steps == 2 and stopped.stopped_early
    whole = api.train(api.load_run_config(None, _rl_argv(dataset, feats, init, tmp_path / "b", **settings)))
    assert whole.steps == 6 and not whole.stopped_early
