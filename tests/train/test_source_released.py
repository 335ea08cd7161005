"""A session loads the checkpoint it starts from (``init_from``) or resumes (``OUT/last``) into its parts and their
optimizers, then lets the checkpoint's own copies go: a run from an XE checkpoint does not hold that policy's
weights (and, resumed, its optimizer moments) a second time for all its steps."""

from __future__ import annotations

import gc
import weakref

import pytest

from rlcap.api import load_run_config
from rlcap.train import init_source, session as session_module
from rlcap.train.session import start_session
from tests.tiny import tiny_overrides, tiny_xe_run


def _tensors(tree):
    if hasattr(tree, "data_ptr"):
        yield tree
    elif isinstance(tree, dict):
        for value in tree.values():
            yield from _tensors(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _tensors(value)


@pytest.mark.parametrize("how", ["init_from", "resumed"])
def test_the_source_checkpoints_tensors_are_not_held_twice(tmp_path, monkeypatch, how):
    dataset, feats, best = tiny_xe_run(tmp_path, epochs=1)
    loaded: list[weakref.ref] = []

    def recording(load):
        def wrapped(*args, **kwargs):
            ckpt = load(*args, **kwargs)
            loaded.extend(weakref.ref(t) for t in _tensors([ckpt.weights, ckpt.trainer]))
            return ckpt
        return wrapped

    for module in (session_module, init_source):
        monkeypatch.setattr(module, "load_checkpoint", recording(module.load_checkpoint))
    extra = {"init_from": best} if how == "init_from" else {"xe.epochs": 2}
    out = tmp_path / ("next" if how == "init_from" else "xe")
    session = start_session(load_run_config(None, tiny_overrides(dataset, feats, out, **extra)))
    assert session.resuming == (how == "resumed") and loaded
    gc.collect()
    own = {id(t) for part in session.parts.values() for t in _tensors(
        [dict(part.module.state_dict(keep_vars=True)), part.optimizer.state_dict()["state"] if part.optimizer else {}])}
    held = [r() for r in loaded if r() is not None]
    assert not [t for t in held if id(t) not in own]  # what is still alive is the parts' own, not a copy
    assert len(held) < len(loaded)  # (the weights were copied into the parts: the checkpoint's are gone)
