"""How well an actor-critic run's value network predicts the reward, position by position.

[Shi18]'s value network learns the final reward ``R`` of a caption from each of its states (eq. 9), and
both its advantages (eq. 10) and lookahead inference (Fig. 1) are only as good as that prediction.
:func:`diagnose_value` samples captions of held-out images from the run's policy, scores them with
the run's own reward and reports the R^2 of ``v(s_t)`` against ``R`` at each position t
(:func:`rlcap.rl.credit.value_fit_by_position`): R^2 at t = 0 is what the critic knows from the
image alone, its rise along the caption what it learns from the words.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from rlcap.config import from_dict
from rlcap.data.loader import CaptionData
from rlcap.decoding import Decoding, sample
from rlcap.errors import DataError
from rlcap.rewards import RewardConfig, build_reward
from rlcap.rl.credit import ValueFit, value_fit_by_position
from rlcap.methods.actor_critic import value_inputs
from rlcap.eval.open_run import OpenRun, open_run
from rlcap.rewards.batch import reward_batch
from rlcap.rewards.combine import score

log = logging.getLogger(__name__)


class ValueDiagnosis(NamedTuple):
    checkpoint: str
    split: str
    value_features: str      # what the value network reads (ac.value_features)
    images: int
    samples_per_image: int
    temperature: float
    mean_reward: float       # mean R of the samples
    fit: ValueFit            # R^2 of v(s_t) against R by position and overall


def diagnose_value(checkpoint: str | Path | OpenRun, data: CaptionData, split: str = "val",
                   n_samples: int | None = None, temperature: float | None = None, max_images: int = 0,
                   batch_size: int = 50, seed: int = 0, progress: bool = False) -> ValueDiagnosis:
    """The value network's R^2 by position on ``split`` for an ``algorithm: ac`` checkpoint.

    Args:
        checkpoint: a checkpoint folder of an ac run (``RUN/best`` or ``RUN/last``), or that folder
            opened with its value network (``open_run(folder, device="cpu", value=True)``).
        data: loaded with the checkpoint's vocabulary; holds ``split`` (held-out images: ``val`` or
            ``test``) and ``train``. The reward is built as in training, from the training references
            and, so that CIDEr-D finds the held-out images' own, the split's (its document
            frequencies then count both).
        n_samples, temperature: captions per image and sampling temperature (None: the run's
            ``rl.n_samples`` and ``decode.temperature``); both networks are in eval mode (no dropout).
        max_images: the split's first images only (0: all); seed: of the sampling, which leaves the
            global random state alone.
    """
    missing = [name for name in ("train", split) if name not in data.splits]
    if missing:
        raise DataError(f"diagnose_value: the data holds no {missing[0]!r} split (it has {sorted(data.splits)}); "
                        "it needs the split to diagnose and the training references of the run's reward")
    # 1. the policy and the value network (eval mode) and the run's settings (open_run leaves the caller's
    # random state alone)
    run = checkpoint if isinstance(checkpoint, OpenRun) else open_run(checkpoint, device="cpu", value=True)
    policy, value_net, vocab, config = run.policy, run.value, run.vocab, run.config
    n = config["rl"]["n_samples"] if n_samples is None else n_samples
    temperature = config["decode"]["temperature"] if temperature is None else temperature
    max_len = config["decode"]["max_len"]
    features = value_net.part_spec()["settings"]["features"]  # the network's own spec (DescribesItself)
    train, held_out = data.splits["train"], data.splits[split]
    gen = torch.Generator().manual_seed(seed)
    values, returns, masks = [], [], []
    # 2. the run's reward, with the references and the feature sizes it was trained with
    dims, refs = config["feature_dims"], {**dict(zip(train.ids, train.refs)), **dict(zip(held_out.ids, held_out.refs))}
    with build_reward(from_dict(RewardConfig, config["reward"], "reward."), refs, vocab=vocab, fc_dim=dims["fc"],
                      att_dim=dims["att"]) as reward, torch.no_grad():
        for batch in tqdm(list(held_out.eval_batches(batch_size, max_images)), desc=f"value fit on {split}",
                          disable=not progress, leave=False):
            # 3. n captions per image from the policy, scored: R (B*n,)
            out = sample(policy, batch.feats, n, Decoding("sample", max_len, temperature=temperature), generator=gen)
            captions = [vocab.decode(row.tolist()) for row in out.tokens]
            returns.append(score(reward, captions, reward_batch(batch, n)))
            # 4. v(s_t) at every step, the state each word is chosen from (as in training)
            values.append(value_net(batch.feats, value_inputs(out.tokens), seq_per_img=n))
            masks.append(out.mask)
    # 5. R^2 of v(s_t) against R, by position (captions padded to the longest batch)
    width = max(v.size(1) for v in values)
    fit = value_fit_by_position(torch.cat([_pad(v, width) for v in values]), torch.cat(returns),
                                torch.cat([_pad(m, width) for m in masks]))
    images = sum(len(r) for r in returns) // n
    log.info("value fit of %s on %s (%d images, %d samples each): R^2 %.3f overall, by position %s", run.folder,
             split, images, n, fit.overall, ", ".join(f"{x:.3f}" for x in fit.by_position.tolist()))
    return ValueDiagnosis(str(run.folder), split, features, images, n, temperature,
                          float(torch.cat(returns).mean()), fit)


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """(R, T) -> (R, width), zeros (False for a mask) on the right."""
    return torch.nn.functional.pad(x, (0, width - x.size(1)))
