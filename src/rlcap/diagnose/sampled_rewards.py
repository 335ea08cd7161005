"""A checkpoint's policy sampled on a split and each sample scored by every part of a reward: what the reward-based
diagnostics (:mod:`rlcap.diagnose.reward_spread`, :mod:`rlcap.diagnose.reward_forms`) measure on."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import torch

from rlcap.config import apply_overrides, from_dict
from rlcap.decoding import Decoding, sample
from rlcap.diagnose.checkpoint_data import checkpoint_data, reward_references
from rlcap.errors import DataError
from rlcap.eval.open_run import open_run
from rlcap.progress import track
from rlcap.rewards import RewardConfig, build_reward
from rlcap.rewards.batch import reward_batch
from rlcap.run_config import RLConfig


class SampledRewards(NamedTuple):
    """N images' K sampled captions and the M rewards of each, with the settings they were drawn at."""

    checkpoint: str
    split: str
    temperature: float
    max_len: int                  # the most words a sample had
    image_ids: list[str]          # (N,)
    captions: list[list[str]]     # (N, K)
    rewards: list[str]            # the M rewards, in the order of ``scores``' last axis
    weights: list[float]          # (M,) their weights in the combined reward R
    scores: torch.Tensor          # (N, K, M) reward m of sample k of image n, unweighted

    @property
    def samples_per_image(self) -> int:
        return self.scores.size(1)


def sampled_rewards(checkpoint: str | Path, split: str = "val", images: int = 500, samples: int | None = None,
                    temperature: float | None = None, weights: dict[str, float] | None = None,
                    data_overrides: list[str] | None = None, batch_size: int = 50, seed: int = 0,
                    progress: bool = False, reward_overrides: list[str] | None = None,
                    what: str = "reward spread", max_len: int | None = None) -> SampledRewards:
    """Sample ``samples`` captions per image of ``split`` from the checkpoint's policy and score each with every
    reward of ``weights``.

    Args:
        checkpoint: a checkpoint folder of any captioner run (its ``policy``).
        split: the images measured (their first ``images``; 0: all).
        samples, temperature: captions per image (>= 2) and sampling temperature (None: the run's
            ``rl.n_samples`` and ``decode.temperature``), at most ``max_len`` words (None: the run's
            ``decode.max_len``); the policy is in eval mode (no dropout), sampling is seeded by ``seed`` and leaves
            the global random state alone.
        weights: reward name -> weight (None: the run's ``reward.weights``), built as the run builds
            its reward (its ``reward`` section: EOS convention, paths of learned rewards), except that
            CIDEr-D's document frequencies count the training references and the split's, and are
            not cached (the run's cache stays as it is).
        data_overrides: ``key=value`` changes to the checkpoint's data section (``features=x.h5``).
        reward_overrides: ``key=value`` changes to its reward section, e.g. the paths of a reward the run did not
            train with (``paths={qa_utility: DIR, qa_file: FILE}`` on an XE checkpoint).
        what: the measurement's name, for the progress bar and errors.
    """
    # 1. the policy (open_run leaves the caller's random state alone)
    run = open_run(checkpoint, device="cpu")
    model, vocab, config = run.policy, run.vocab, run.config
    # an XE checkpoint has no rl or reward section: the sequence-level methods' defaults
    n = config.get("rl", asdict(RLConfig()))["n_samples"] if samples is None else samples
    stored = apply_overrides({"reward": dict(config.get("reward", asdict(RewardConfig())))},
                             [f"reward.{o}" for o in reward_overrides or []])["reward"]
    if n < 2:
        raise DataError(f"{what}: {n} sample per image has no spread; give 2 or more")
    temperature = config["decode"]["temperature"] if temperature is None else temperature
    max_len = config["decode"]["max_len"] if max_len is None else max_len
    reward_cfg = from_dict(RewardConfig, {**stored, "weights": dict(weights or stored["weights"]),
                                          "cache_dir": None}, "reward.")
    # 2. the data: the split measured, and the training references the reward is built with
    data = checkpoint_data(run, split, data_overrides)
    measured, dims = data.splits[split], config["feature_dims"]
    batches = list(measured.eval_batches(batch_size, images))
    gen = torch.Generator().manual_seed(seed)
    scores: list[torch.Tensor] = []
    captions: list[list[str]] = []
    with build_reward(reward_cfg, reward_references(data, split), vocab=vocab, fc_dim=dims["fc"],
                      att_dim=dims["att"]) as reward, torch.no_grad():
        for batch in (track(batches, len(batches), f"{what} on {split}", "batch") if progress else batches):
            # 3. n captions per image from the policy: B*n rows, one image's adjacent
            out = sample(model, batch.feats, n,
                         Decoding("sample", max_len, temperature=temperature), generator=gen)
            said = [vocab.decode(row.tolist()) for row in out.tokens]
            captions += [said[i * n:(i + 1) * n] for i in range(len(batch.ids))]
            # 4. each reward's own scores, unweighted: (B*n,) each -> (B, n, M)
            parts = reward.components(said, reward_batch(batch, n))
            scores.append(torch.stack([parts[name] for name in reward_cfg.weights], dim=1).view(len(batch.ids), n, -1))
    names = list(reward_cfg.weights)
    return SampledRewards(str(checkpoint), split, float(temperature), int(max_len), [i for b in batches for i in b.ids], captions,
                          names, [float(reward_cfg.weights[name]) for name in names], torch.cat(scores))
