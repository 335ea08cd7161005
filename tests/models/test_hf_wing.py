"""The transformers wing's shape (issue 65): one package, rlcap.models.hf, whose policies hold their weights by
composition (rlcap.models.hf.weights.HFWeights) rather than one policy class overriding another's methods."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import rlcap.models
from tests.test_imports import import_graph


def _model_classes() -> set[type]:
    modules = [importlib.import_module(m.name) for m in pkgutil.walk_packages(rlcap.models.__path__, "rlcap.models.")]
    return {c for module in modules for _, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__.startswith("rlcap.models")}


def _is_policy(cls: type) -> bool:
    """A concrete captioner class: it steps, starts a state and runs a teacher-forced forward (not a protocol)."""
    return all(callable(getattr(cls, name, None)) for name in ("step", "init_state", "forward")) and \
        not getattr(cls, "_is_protocol", False)


def overrides(classes: set[type]) -> list[tuple[str, str, str]]:
    """(class, concrete policy class it derives from, method it defines again), for every such pair."""
    return sorted((cls.__qualname__, base.__qualname__, name) for cls in classes for base in cls.__mro__[1:]
                  if base in classes and _is_policy(base)
                  for name, value in vars(cls).items() if callable(value) and name in vars(base)
                  and not name.startswith("__"))


def test_the_override_checker_finds_a_policy_that_changes_another():
    class Policy:
        def step(self): ...
        def init_state(self): ...
        def forward(self): ...

    class Changed(Policy):
        def step(self): ...

    class Mixin:
        def read(self): ...

    class Held(Mixin, Policy):
        def read(self): ...

    assert overrides({Policy, Changed, Mixin, Held}) == [("test_the_override_checker_finds_a_policy_that_changes_"
                                                          "another.<locals>.Changed", "test_the_override_checker_"
                                                          "finds_a_policy_that_changes_another.<locals>.Policy",
                                                          "step")]


def test_no_class_in_models_overrides_a_method_of_another_concrete_policy_class():
    classes = _model_classes()
    from rlcap.models.hf.captioner import HFCaptioner
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner
    from rlcap.models.hf.vlm import HFVLMCaptioner

    assert {HFCaptioner, HFVLMCaptioner, Seq2SeqVLMCaptioner} <= {c for c in classes if _is_policy(c)}
    assert overrides(classes) == []


def test_the_transformers_wing_is_one_package():
    """Every module of rlcap.models that reads a transformers folder (rlcap.transformers_io) is in rlcap.models.hf,
    and every hf policy holds an HFWeights and shares nn.Module's weight calls through HoldsHFWeights."""
    from rlcap.models.hf.captioner import HFCaptioner
    from rlcap.models.hf.seq2seq_vlm import Seq2SeqVLMCaptioner
    from rlcap.models.hf.vlm import HFVLMCaptioner
    from rlcap.models.hf.weights import HoldsHFWeights

    graph = import_graph()
    readers = {m for m, targets in graph.items() if m.startswith("rlcap.models") and "rlcap.transformers_io" in targets}
    assert readers and all(m.startswith("rlcap.models.hf.") for m in readers), sorted(readers)
    for policy in (HFCaptioner, HFVLMCaptioner, Seq2SeqVLMCaptioner):
        assert issubclass(policy, HoldsHFWeights) and policy.__module__.startswith("rlcap.models.hf.")
        assert "HFWeights(" in inspect.getsource(policy.__init__), policy
