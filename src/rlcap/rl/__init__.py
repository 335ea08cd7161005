"""Pure tensor functions for RL training: baselines, losses, per-word credit and sequence-level exploration.

No model or reward code lives here; see docs/RL.md for the conventions.
"""

from rlcap.rl.baselines import (
    RunningMean,
    advantages,
    greedy_baseline,
    leave_one_out_baseline,
    no_baseline,
    running_mean_baseline,
    update_running_mean,
)
from rlcap.rl.credit import (
    baseline_loss,
    discounted_returns,
    mc_q_estimates,
    segment_returns,
    td_advantages,
    terminal_rewards,
    value_advantages,
    value_loss,
)
from rlcap.rl.losses import entropy_bonus, masked_mean, masked_sum, reinforce_loss, sequence_logprob, xe_loss
from rlcap.rl.sle import (
    bleu34_distance,
    diversity_advantages,
    diversity_baseline,
    pairwise_distances,
    sle_advantages,
    sle_loss,
)

__all__ = [
    "RunningMean", "advantages", "greedy_baseline", "leave_one_out_baseline", "no_baseline",
    "running_mean_baseline", "update_running_mean",
    "baseline_loss", "discounted_returns", "mc_q_estimates", "segment_returns", "td_advantages",
    "terminal_rewards", "value_advantages", "value_loss",
    "entropy_bonus", "masked_mean", "masked_sum", "reinforce_loss", "sequence_logprob", "xe_loss",
    "bleu34_distance", "diversity_advantages", "diversity_baseline", "pairwise_distances",
    "sle_advantages", "sle_loss",
]
