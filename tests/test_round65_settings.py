"""A setting a run sets that no part of it reads is refused in one line: ``rl.kl_coef`` for a method whose loss has
no KL term (its run config's ``KL_TERM``), and a key of the method's own section its other settings leave unread."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from rlcap import api
from rlcap.errors import ConfigError
from rlcap.methods import METHODS
from rlcap.run_config import SequenceRunConfig
from tests.cli.in_process import run_cli
from tests.methods.toy_method import TOY

REPO = Path(__file__).resolve().parents[1]
TOY_RECIPE = REPO / "tests" / "methods" / "data" / "toy.yaml"


def test_a_method_without_the_kl_term_refuses_kl_coef_through_the_cli(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "train", "configs/moving-shapes_hrl.yaml", "rl.kl_coef=0.1",
                           f"out_dir={tmp_path / 'run'}")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "rl.kl_coef=0.1: algorithm=hrl has no KL term in its loss" in err
    assert "the methods with one: ac, grpo, mixer, pg, scst, scst_discriminator, sll_me, sll_sle, wtf_rl" in err
    assert not (tmp_path / "run").exists()  # refused before the run folder is made
    # its default is no setting of the run's own: the same recipe with rl.kl_coef=0 loads
    assert api.load_run_config(REPO / "configs" / "moving-shapes_hrl.yaml", ["rl.kl_coef=0"]).rl.kl_coef == 0
    # ... and --help-config lists the key for a method with the term, not for hrl
    rc, out, _ = run_cli(capsys, "train", "--help-config", "algorithm=hrl")
    assert rc == 0 and "\nrl.kl_coef " not in out and "rl.kl_coef" in out.split("not shown")[1]
    rc, out, _ = run_cli(capsys, "train", "--help-config", "algorithm=scst")
    assert rc == 0 and "\nrl.kl_coef " in out


def test_a_method_that_forgets_the_kl_term_refuses_kl_coef(monkeypatch):
    """The toy method (docs/ARCHITECTURE.md's worked example) adds no KL term and declares none: rl.kl_coef is
    refused, not ignored; shared overrides (rlcap bench, rlcap demo) are left to the runs that read them."""
    monkeypatch.setitem(METHODS, "toy", TOY)  # registered for this test only
    assert not METHODS["toy"].config.KL_TERM
    with pytest.raises(ConfigError, match=r"^rl.kl_coef=0.2: algorithm=toy has no KL term in its loss"):
        api.load_run_config(TOY_RECIPE, ["rl.kl_coef=0.2"])
    assert api.load_run_config(TOY_RECIPE, ["rl.kl_coef=0.2"], shared=True).rl.kl_coef == 0.2
    cfg = api.load_run_config(None, ["algorithm=scst", "rl.kl_coef=0.2"])
    assert cfg.reads("rl.kl_coef") and cfg.rl.kl_coef == 0.2


def test_a_key_of_the_methods_section_its_run_does_not_read_is_refused_through_the_cli(capsys, tmp_path):
    # shapes_scst.yaml's baseline is leave_one_out: the running mean's decay is read by scst.baseline=running_mean only
    rc, out, err = run_cli(capsys, "train", "configs/shapes_scst.yaml", "scst.running_mean_decay=0.5",
                           f"out_dir={tmp_path / 'run'}")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "scst.running_mean_decay=0.5: algorithm=scst does not read it beside the run's other settings" in err
    cfg = api.load_run_config(REPO / "configs" / "shapes_scst.yaml",
                              ["scst.running_mean_decay=0.5", "scst.baseline=running_mean"])
    assert cfg.scst.running_mean_decay == 0.5
    with pytest.raises(ConfigError, match=r"^grpo.kl_ratio=True: algorithm=grpo does not read it"):
        api.load_run_config(None, ["algorithm=grpo", "grpo.kl_ratio=true"])  # it shapes a KL term there is not
    assert api.load_run_config(None, ["algorithm=grpo", "grpo.kl_ratio=true", "rl.kl_coef=0.1"]).grpo.kl_ratio


def test_every_recipe_loads():
    recipes = sorted((REPO / "configs").glob("*.yaml"))
    assert len(recipes) > 20
    for recipe in recipes:
        assert api.load_run_config(recipe).algorithm in METHODS, recipe


def test_a_method_declares_the_kl_term_exactly_when_its_loop_adds_one():
    """``KL_TERM`` is what rl.kl_coef is read by: a method's module adds the term (methods/reference.py's add_kl,
    or grpo's own from reference_logprobs) exactly when its run config declares it."""
    sequence = {name: m for name, m in METHODS.items() if issubclass(m.config, SequenceRunConfig)}
    assert {"scst", "grpo", "hrl", "wtf_rl"} <= set(sequence)
    for name, method in sequence.items():
        source = inspect.getsource(sys.modules[method.train.__module__])
        adds = "add_kl(" in source or "reference_logprobs(" in source
        assert adds == method.config.KL_TERM, name
    assert not METHODS["hrl"].config.KL_TERM
