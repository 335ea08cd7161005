"""MIXER's schedule and masks (Ranzato et al. 2016, as [Liu17] describes it):
cross-entropy on the first M words of the reference, REINFORCE on the words the policy samples
after them, M annealed to 0. Pure functions, no model code.
"""

from __future__ import annotations

import torch



def mixer_prefix_len(epoch: int, start: int, delta: int, epochs_per_stage: int) -> int:
    """M at ``epoch`` (0-based): ``start`` for the first ``epochs_per_stage`` epochs, then ``delta``
    fewer at each later stage, never below 0 (Ranzato starts at the longest caption: pure XE).

    Example: start 6, delta 2, epochs_per_stage 2, epochs 0..7 -> 6, 6, 4, 4, 2, 2, 0, 0.
    """
    if epoch < 0 or start < 0 or delta < 1 or epochs_per_stage < 1:
        raise ValueError(f"mixer_prefix_len: expected epoch >= 0, start >= 0, delta >= 1, epochs_per_stage >= 1; "
                         f"got {epoch}, {start}, {delta}, {epochs_per_stage}")
    return max(0, start - delta * (epoch // epochs_per_stage))


def mixer_masks(target_mask: torch.Tensor, sample_mask: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which words each loss covers, for references continued by the policy after their first M words.

    Args:
        target_mask: (R, L) True at the reference's words and EOS (w_1 .. w_n EOS, then padding; no BOS).
        sample_mask: (R, T) valid positions of the sampled captions, whose first M positions are the
            reference's (forced; a reference shorter than M is the whole caption, EOS included).
        m: M, the words of the reference trained with cross-entropy.

    Returns:
        xe_mask (R, min(M, L)): the reference's words and EOS among its first M positions;
        rl_mask (R, T): the sampled positions from M on (the words REINFORCE trains).

    Example: target_mask [[1, 1, 1, 0], [1, 1, 0, 0]] (references "w w EOS", "w EOS"), sample_mask [[1, 1, 1, 1], [1, 1, 0, 0]]
    (row 0 sampled two words after "5 6"; row 1 is its reference), M = 2
    -> xe_mask [[1, 1], [1, 1]], rl_mask [[0, 0, 1, 1], [0, 0, 0, 0]].
    """
    if target_mask.dim() != 2 or sample_mask.dim() != 2 or target_mask.size(0) != sample_mask.size(0) or m < 0:
        raise ValueError(f"mixer_masks: expected target_mask (R, L), sample_mask (R, T) and M >= 0; got "
                         f"{tuple(target_mask.shape)}, {tuple(sample_mask.shape)}, {m}")
    xe_mask = target_mask[:, :m].bool()  # (R, min(M, L))
    positions = torch.arange(sample_mask.size(1), device=sample_mask.device)  # (T,)
    rl_mask = sample_mask.bool() & (positions >= m)[None, :]  # (R, T)
    return xe_mask, rl_mask
