"""Per-word credit: returns, advantages and critic losses for one advantage per word.

Pure tensor functions, in the style of torchtune's ``rlhf.estimate_advantages``.
A (B, T) advantage from here goes straight into :func:`rlcap.rl.losses.reinforce_loss`.

Conventions, shared by every function:

- Step ``t`` is the step that chooses word ``t``: ``logprobs[:, t]`` is ``log pi(w_t | s_t)``,
  ``values[:, t]`` is ``v(s_t)`` and ``baseline[:, t]`` is ``B(s_t)``, both predicted from the
  state *before* word ``t`` is chosen ([Shi18 eq. 10]; [Liu17]'s
  ``B_phi(g_1:t-1)``).
- ``mask`` (B, T) is bool or 0/1 float, nonzero = a valid step. Each row is a run of valid steps
  followed by padding (``1 1 1 0 0``), as the rollouts produce; anything else is an error. A
  caption's *last valid step* is its EOS, or its last word when it has no EOS.
- Padding gets 0 in every (B, T) result and contributes nothing: its rewards, values and rollout
  rewards are ignored, whatever they hold (even NaN).
- The state after a caption's last valid step is terminal: its value is 0.
- Credit (returns, advantages, Q) is returned detached: it is a constant for the policy gradient
  and a target for the critics. The two critic losses differentiate only into the critic.

Which function for which paper:

- actor-critic ([Shi18 eq. 10]): ``value_advantages(R, values, mask)``, ``A_t = R - v(s_t)``; the value
  net learns from ``value_loss(values, R, mask)`` (eq. 9/11). The one-step TD form is
  ``td_advantages(terminal_rewards(R, mask), values, mask, gamma)``.
- PG-SPIDEr ([Liu17]): ``q = mc_q_estimates(rollout_rewards, R, mask)``, advantage
  ``value_advantages(q, baseline, mask)`` (``Q - B``), baseline loss ``baseline_loss(baseline, q, mask)``.
- HRL ([Wang18]): the worker's return ``discounted_returns(delta_rewards, mask, 0.95)`` (eq. 24), the
  manager's ``segment_returns(delta_rewards, segment_end, mask, 0.95)`` (eq. 25).

How well a critic predicts the return, position by position: ``value_fit_by_position(values, R, mask)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rlcap.host_sync import device_check


def _valid_steps(name: str, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) bool of valid steps; raises unless every row is valid steps then padding."""
    if mask.dim() != 2:
        raise ValueError(f"{name}: expected mask of shape (B, T), got {tuple(mask.shape)}")
    valid = mask != 0
    holes = valid[:, 1:] & ~valid[:, :-1]  # a valid step after padding

    def error() -> ValueError:
        row = int(holes.any(dim=1).nonzero()[0])
        return ValueError(f"{name}: each mask row must be valid steps followed by padding (1 1 0 0); "
                          f"row {row} is {valid[row].int().tolist()}")

    device_check(holes.any(), error, f"{name}: each mask row must be valid steps followed by padding")
    return valid


def _last_step(valid: torch.Tensor) -> torch.Tensor:
    """(B, T) bool, True at each row's last valid step (nowhere in an empty row)."""
    after = torch.zeros_like(valid[:, :1])
    return valid & ~torch.cat([valid[:, 1:], after], dim=1)


def _check_same(name: str, what: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    if x.shape != mask.shape:
        raise ValueError(f"{name}: expected {what} of the mask's shape {tuple(mask.shape)}, got {tuple(x.shape)}")


def _per_step(name: str, what: str, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` as (B, T): a (B,) tensor is repeated along each row, a (B, T) one is kept."""
    b, t = mask.shape
    if x.shape == (b,):
        return x[:, None].expand(b, t)
    if x.shape == (b, t):
        return x
    raise ValueError(f"{name}: expected {what} of shape ({b},) (one per caption) or ({b}, {t}) (one per step), "
                     f"got {tuple(x.shape)}")


def _check_gamma(name: str, gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"{name}: gamma must be in [0, 1], got {gamma}")


def _zero_padding(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    # where, not a product with the mask: NaN or inf at padding must not leak (NaN * 0 = NaN).
    return torch.where(valid, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _masked_mse(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean of ``(pred - target)^2`` over valid steps, gradient into ``pred`` only; 0 if none."""
    # Padding is zeroed before the subtraction, so garbage there gives neither NaN nor gradient.
    err = _zero_padding(pred, valid) - _zero_padding(target.detach().to(pred.dtype), valid)  # (B, T)
    return (err * err).sum() / valid.sum().clamp(min=1)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted return of each step: ``G_t = r_t + gamma * G_{t+1}``, ``G`` = 0 after the last valid step.

    [Wang18 eq. 24] (the worker's return of delta-CIDEr rewards, gamma 0.95 there).

    Args:
        rewards: (B, T) immediate reward of each step; padding ignored.
        mask: (B, T) valid steps.
        gamma: discount in [0, 1].

    Returns:
        (B, T) returns, detached; 0 at padding.

    Example: rewards [[1, 0, 2], [3, 5, 9]], mask [[1, 1, 1], [1, 0, 0]], gamma 0.5
    -> [[1.5, 1, 2], [3, 0, 0]]  (1.5 = 1 + 0.5 * (0 + 0.5 * 2)).
    """
    valid = _valid_steps("discounted_returns", mask)
    _check_same("discounted_returns", "rewards", rewards, mask)
    _check_gamma("discounted_returns", gamma)
    r = _zero_padding(rewards.detach(), valid)  # (B, T)
    running = torch.zeros_like(r[:, 0])  # (B,) G_{t+1}; stays 0 over the trailing padding
    returns = []
    for t in reversed(range(r.shape[1])):
        running = r[:, t] + gamma * running
        returns.append(running)
    return torch.stack(returns[::-1], dim=1)  # (B, T)


def terminal_rewards(final: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A sequence-level reward as per-step rewards: ``final[i]`` at row i's last valid step, 0 elsewhere.

    Args:
        final: (B,) reward of each whole caption.
        mask: (B, T) valid steps.

    Returns:
        (B, T), detached. A row with no valid step is all 0 (there is no step to credit).

    Example: final [2, 5], mask [[1, 1, 1], [1, 1, 0]] -> [[0, 0, 2], [0, 5, 0]].
    """
    valid = _valid_steps("terminal_rewards", mask)
    if final.shape != mask.shape[:1]:
        raise ValueError(f"terminal_rewards: expected final of shape ({mask.shape[0]},), got {tuple(final.shape)}")
    placed = final.detach()[:, None].expand(mask.shape)  # (B, T)
    return _zero_padding(placed, _last_step(valid))


def value_advantages(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Advantage of each word against a learned value: ``A_t = R_t - v(s_t)`` ([Shi18 eq. 10]).

    Also the PG-SPIDEr advantage ``Q - B`` ([Liu17]) with ``returns = q`` and ``values = baseline``.

    Args:
        returns: (B,) final reward of each caption (the same target at every step, as [Shi18]'s ``R``),
            or (B, T) per-step returns or Q estimates.
        values: (B, T) ``v(s_t)``, usually with grad; the result does not carry it.
        mask: (B, T) valid steps.

    Returns:
        (B, T) advantages, detached (no gradient reaches the value net through the policy loss);
        0 at padding.

    Example: returns [2, 5], values [[1, 1.5, 2], [4, 6, 9]], mask [[1, 1, 1], [1, 1, 0]]
    -> [[1, 0.5, 0], [1, -1, 0]].
    """
    valid = _valid_steps("value_advantages", mask)
    _check_same("value_advantages", "values", values, mask)
    target = _per_step("value_advantages", "returns", returns, mask).detach()  # (B, T)
    adv = _zero_padding(target.to(values.dtype), valid) - _zero_padding(values.detach(), valid)
    return adv  # (B, T)


def td_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """One-step temporal-difference advantage ``A_t = r_t + gamma * v(s_{t+1}) - v(s_t)``.

    ``v(s_{t+1})`` after a caption's last valid step is 0 (the caption is finished), so the last
    step's advantage is ``r_T - v(s_T)``. With only a sequence-level reward, pass
    ``terminal_rewards(final, mask)``: ``r_t`` is then 0 except at the last valid step.

    Args:
        rewards: (B, T) immediate rewards; padding ignored.
        values: (B, T) ``v(s_t)``; padding ignored.
        mask: (B, T) valid steps.
        gamma: discount in [0, 1].

    Returns:
        (B, T) advantages, detached; 0 at padding.

    Example: rewards [[0, 0, 2], [0, 5, 0]], values [[1, 1.5, 2], [4, 6, 9]],
    mask [[1, 1, 1], [1, 1, 0]], gamma 0.5
    -> [[0.5 * 1.5 - 1, 0.5 * 2 - 1.5, 2 - 2], [0.5 * 6 - 4, 5 - 6, 0]] = [[-0.25, -0.5, 0], [-1, -1, 0]].
    """
    valid = _valid_steps("td_advantages", mask)
    _check_same("td_advantages", "rewards", rewards, mask)
    _check_same("td_advantages", "values", values, mask)
    _check_gamma("td_advantages", gamma)
    r = _zero_padding(rewards.detach().to(values.dtype), valid)  # (B, T)
    v = _zero_padding(values.detach(), valid)  # (B, T); 0 from the first padded step on
    v_next = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)  # (B, T); 0 = terminal
    return _zero_padding(r + gamma * v_next - v, valid)


def value_loss(values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Squared error of the value net, averaged over valid steps: ``mean_t (v(s_t) - R_t)^2``.

    [Shi18 eq. 9] (``L_v = ||v(s_t) - R||^2``); its gradient is -2 times eq. 11's
    update direction ``grad v(s_t) (R - v(s_t))``, so descending it is eq. 11 up to the step size.

    Args:
        values: (B, T) ``v(s_t)`` with grad.
        targets: (B,) final reward of each caption, or (B, T) per-step returns; detached here.
        mask: (B, T) valid steps.

    Returns:
        () scalar; gradient into ``values`` only; 0 when the mask is empty.

    Example: values [[1, 1.5, 2], [4, 6, 9]], targets [2, 5], mask [[1, 1, 1], [1, 1, 0]]
    -> (1 + 0.25 + 0 + 1 + 1) / 5 = 0.65.
    """
    valid = _valid_steps("value_loss", mask)
    _check_same("value_loss", "values", values, mask)
    target = _per_step("value_loss", "targets", targets, mask)  # (B, T)
    return _masked_mse(values, target, valid)


def mc_q_estimates(rollout_rewards: torch.Tensor, final_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Monte-Carlo ``Q(g_1:t-1, g_t)`` of each sampled word ([Liu17], MC rollouts).

    ``Q_t = 1/K sum_k R(g_1..g_t ; g^k_t+1..)``: the mean reward of K completions of the prefix
    that ends with word ``t``. At a caption's last valid step the caption is complete, so no
    rollout is needed and ``Q`` is the caption's own reward ``R(g_1:T)``.

    Args:
        rollout_rewards: (B, T, K) ``rollout_rewards[i, t, k]`` is the reward of the k-th rollout
            that completes caption i's prefix up to and including word t. The entries at each
            caption's last valid step and at padding are ignored (fill them with anything, e.g. 0).
        final_rewards: (B,) reward of each full sampled caption.
        mask: (B, T) valid steps.

    Returns:
        (B, T) Q estimates, detached; 0 at padding.

    Example (K=2): rollout_rewards [[[1, 3], [0, 1], [7, 7]], [[4, 6], [8, 8], [9, 9]]],
    final_rewards [2, 5], mask [[1, 1, 1], [1, 1, 0]] -> [[2, 0.5, 2], [5, 5, 0]].
    """
    valid = _valid_steps("mc_q_estimates", mask)
    if rollout_rewards.dim() != 3 or rollout_rewards.shape[:2] != mask.shape or rollout_rewards.shape[2] < 1:
        b, t = mask.shape
        raise ValueError(f"mc_q_estimates: expected rollout_rewards of shape ({b}, {t}, K) with K >= 1, "
                         f"got {tuple(rollout_rewards.shape)}")
    if final_rewards.shape != mask.shape[:1]:
        raise ValueError(f"mc_q_estimates: expected final_rewards of shape ({mask.shape[0]},), "
                         f"got {tuple(final_rewards.shape)}")
    last = _last_step(valid)  # (B, T)
    rolled = _zero_padding(rollout_rewards.detach(), (valid & ~last)[:, :, None]).mean(dim=2)  # (B, T)
    own = final_rewards.detach().to(rolled.dtype)[:, None].expand_as(rolled)  # (B, T)
    return torch.where(last, own, rolled)


def baseline_loss(baseline: torch.Tensor, q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """PG-SPIDEr's baseline loss ``L_phi = mean over valid steps of (Q_t - B_phi(s_t))^2`` ([Liu17]).

    ``q`` is detached, so the loss trains the baseline only. [Liu17] also stops the baseline's
    gradient at the RNN state it reads; that is the caller's ``hidden.detach()``.

    Args:
        baseline: (B, T) ``B_phi(s_t)`` with grad.
        q: (B, T) targets, e.g. from :func:`mc_q_estimates`.
        mask: (B, T) valid steps.

    Returns:
        () scalar; 0 when the mask is empty.

    Example: baseline [[1, 1, 1], [5, 4, 0]], q [[2, 0.5, 2], [5, 5, 0]], mask [[1, 1, 1], [1, 1, 0]]
    -> (1 + 0.25 + 1 + 0 + 1) / 5 = 0.65.
    """
    valid = _valid_steps("baseline_loss", mask)
    _check_same("baseline_loss", "baseline", baseline, mask)
    _check_same("baseline_loss", "q", q, mask)
    return _masked_mse(baseline, q, valid)


def segment_returns(rewards: torch.Tensor, segment_end: torch.Tensor, mask: torch.Tensor,
                    gamma: float) -> torch.Tensor:
    """The HRL manager's discounted return of each segment, at every step of that segment ([Wang18 eq. 25]).

    Segments are runs of valid steps, each ending where ``segment_end`` is True or at the last
    valid step. With ``e_n`` the n-th segment of a caption and ``f(e_n)`` the sum of the word
    rewards inside it, every step of ``e_n`` gets ``R(e_n) = sum_{m >= n} gamma^(m-n) f(e_m)``.
    For [Wang18]'s delta-CIDEr word rewards ``f(a_t) = CIDEr(sent + a_t) - CIDEr(sent)`` the sum
    telescopes: ``f(e_n) = CIDEr(sent + e_n) - CIDEr(sent)``, eq. 25's segment reward. Repeating
    ``R(e_n)`` over the segment's words makes reinforce_loss weight ``sum_i log pi(a_i)`` over
    the segment by it, as in eq. 21-22.

    Args:
        rewards: (B, T) immediate reward of each word; padding ignored.
        segment_end: (B, T) bool, True at the last word of a segment; ignored at padding.
        mask: (B, T) valid steps.
        gamma: discount per segment in [0, 1] (0.95 in [Wang18]).

    Returns:
        (B, T) returns, detached; 0 at padding.

    Example: rewards [[1, 2, 3, 4], [1, 1, 9, 9]], segment_end [[0, 1, 0, 0], [1, 0, 1, 0]],
    mask [[1, 1, 1, 1], [1, 1, 0, 0]], gamma 0.5: segment rewards [3, 7] and [1, 1]
    -> [[3 + 0.5 * 7, 6.5, 7, 7], [1 + 0.5 * 1, 1, 0, 0]] = [[6.5, 6.5, 7, 7], [1.5, 1, 0, 0]].
    """
    valid = _valid_steps("segment_returns", mask)
    _check_same("segment_returns", "rewards", rewards, mask)
    _check_same("segment_returns", "segment_end", segment_end, mask)
    _check_gamma("segment_returns", gamma)
    ends = ((segment_end != 0) & valid) | _last_step(valid)  # (B, T)
    # Index of the segment each step is in; padding points past the last segment (< T if any padding).
    seg_id = ends.long().cumsum(dim=1) - ends.long()  # (B, T)
    r = _zero_padding(rewards.detach(), valid)  # (B, T)
    seg_reward = torch.zeros_like(r).scatter_add(1, seg_id, r)  # (B, T): f(e_n) in slot n
    seg_return = discounted_returns(seg_reward, torch.ones_like(valid), gamma)  # (B, T): R(e_n)
    return _zero_padding(seg_return.gather(1, seg_id), valid)


class ValueFit(NamedTuple):
    """How much of the return's variance a critic explains (:func:`value_fit_by_position`)."""

    by_position: torch.Tensor  # (T,) R^2 over the rows still running at t; NaN where it is undefined
    rows: torch.Tensor         # (T,) long, rows still running at t
    overall: torch.Tensor      # () R^2 over every valid step of every row


def _r_squared(ss_res: torch.Tensor, ss_tot: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``1 - ss_res / ss_tot``, NaN where fewer than 2 entries were summed or the target is constant."""
    undefined = (count < 2) | (ss_tot <= 0)
    return torch.where(undefined, float("nan"), 1.0 - ss_res / torch.where(undefined, 1.0, ss_tot))


def value_fit_by_position(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> ValueFit:
    """R^2 of ``v(s_t)`` as a prediction of the caption's return ``R``, at each position and overall.

    ``R^2_t = 1 - sum_i (R_i - v_it)^2 / sum_i (R_i - mean R)^2`` over the rows i still running at
    step t (the mean of R over those rows): 1 is a perfect critic, 0 one no better than the mean
    return of the captions that reach t, below 0 a worse one. ``overall`` pools every valid step
    (a caption counts once per word, around the mean over those steps). Used to ask how much a
    value network knows at the image alone (t = 0) and as the caption grows ([Shi18 eq. 9-10]).

    Args:
        values: (N, T) ``v(s_t)``; padding ignored (may hold anything, even NaN).
        returns: (N,) the return of each caption ([Shi18]'s ``R``).
        mask: (N, T) valid steps, as everywhere in this module.

    Returns:
        :class:`ValueFit`, computed in float64 and detached: ``by_position`` (T,) (NaN where fewer
        than 2 rows run or their returns are all equal), ``rows`` (T,), ``overall`` ().

    Example: values [[1, 1.5, 0.5], [2, 2.5, 9], [2, 9, 9]], returns [1, 3, 2],
    mask [[1, 1, 1], [1, 1, 0], [1, 0, 0]]: at t = 0 the mean R is 2, the residuals 0, 1, 0 and the
    deviations 1, 1, 0, so R^2 = 1 - 1/2 = 0.5; at t = 1, 1 - (0.25 + 0.25) / 2 = 0.75; at t = 2
    one row: NaN. Overall: mean R 11/6, 1 - 1.75 / (29/6) = 0.6379.
    """
    valid = _valid_steps("value_fit_by_position", mask)
    _check_same("value_fit_by_position", "values", values, mask)
    if returns.shape != mask.shape[:1]:
        raise ValueError(f"value_fit_by_position: expected returns of shape ({mask.shape[0]},), "
                         f"got {tuple(returns.shape)}")
    w = valid.double()  # (N, T)
    v = _zero_padding(values.detach().double(), valid)  # (N, T)
    r = returns.detach().double()[:, None].expand_as(v)  # (N, T)
    residual = w * (r - v) ** 2  # (N, T)
    rows = valid.sum(0)  # (T,)
    mean_t = (w * r).sum(0) / rows.clamp(min=1)  # (T,) mean return of the rows running at t
    by_position = _r_squared(residual.sum(0), (w * (r - mean_t) ** 2).sum(0), rows)  # (T,)
    mean_all = (w * r).sum() / valid.sum().clamp(min=1)  # () mean return over every valid step
    overall = _r_squared(residual.sum(), (w * (r - mean_all) ** 2).sum(), valid.sum())  # ()
    return ValueFit(by_position, rows, overall)
