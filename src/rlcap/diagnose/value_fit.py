"""How well an actor-critic checkpoint's value network predicts the reward, by caption position.

The measurement is :func:`rlcap.diagnose.value_samples.diagnose_value` (R^2 of ``v(s_t)`` against the
caption's reward R, :func:`rlcap.rl.credit.value_fit_by_position`); this module opens the checkpoint and
loads its data for it, as ``rlcap eval`` does."""

from __future__ import annotations

from pathlib import Path

from rlcap.diagnose.checkpoint_data import checkpoint_data
from rlcap.diagnose.value_samples import ValueDiagnosis, diagnose_value
from rlcap.eval.open_run import open_run


def value_fit(checkpoint: str | Path, split: str = "val", images: int = 500, samples: int | None = None,
              temperature: float | None = None, data_overrides: list[str] | None = None, batch_size: int = 50,
              seed: int = 0, progress: bool = False) -> ValueDiagnosis:
    """R^2 of the value network of an ``algorithm: ac`` checkpoint on the first ``images`` images of
    ``split`` (0: all), ``samples`` captions each at ``temperature`` (None: the run's ``rl.n_samples``
    and ``decode.temperature``), scored with the run's reward."""
    run = open_run(checkpoint, device="cpu", value=True)  # a checkpoint without one fails before the data load
    data = checkpoint_data(run, split, data_overrides)
    return diagnose_value(run, data, split, n_samples=samples, temperature=temperature, max_images=images,
                          batch_size=batch_size, seed=seed, progress=progress)
