"""Potential-based step reward, an opt-in alternative to eq 16 (``gta.reward.step_shaping``).

GTA-RAG pays each search turn an additive term (eq 16: +hit_per_doc per new target, miss
otherwise). Additive per-turn terms are not potential-based, so they can change which policy
is optimal: the total depends on how the evidence was collected (how many turns, how many
misses), not only on what was found. The potential-based form (Ng, Harada & Russell 1999;
PiCA) pays instead, for search turn t = 1..T,

* Φ(s) = |C ∩ S(x)| / |S(x)|: the fraction of the question's target documents shown so far
  (C_{t+1} after turn t, C_1 = ∅, so Φ(s_0) = 0); Φ ≡ 0 when S(x) = ∅;
* F_t = γ·Φ(s_t) − Φ(s_{t−1}),  0 < γ ≤ 1.

With γ = 1 the sum telescopes: Σ_t F_t = Φ(s_T) − Φ(s_0) = Φ(s_T), the final coverage, the
same for every path to the same evidence — so an extra search can never pay. With γ < 1,
Σ_t F_t = γ·Φ(s_T) − (1 − γ)·Σ_{t<T} Φ(s_t): each further turn costs (1 − γ)·Φ of the
evidence already held, so extra searches only lower it. Φ of the last state is kept (not
zeroed at the answer), so under trajectory-level GRPO the shaping amounts to paying the final
coverage once; under the per-turn estimator (``gta_turn_grpo``) it places that credit on the
turns that found the documents.

Pure Python on counts; no verl, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["STEP_SHAPINGS", "potential_step_rewards", "target_potential"]

#: ``gta.reward.step_shaping`` values: eq 16 as in the paper, or the potential-based form.
STEP_SHAPINGS = ("additive", "potential")


def target_potential(found: int, num_targets: int) -> float:
    """Φ(s) = |C ∩ S(x)| / |S(x)|, the fraction of target documents shown so far.

    Args:
        found: |C ∩ S(x)|, target documents shown so far.
        num_targets: |S(x)|.

    Returns:
        Φ ∈ [0, 1]; 0 when S(x) = ∅ (no labels: no evidence signal).

    Examples:
        >>> target_potential(1, 4), target_potential(0, 0)
        (0.25, 0.0)
    """
    if found < 0 or num_targets < 0 or found > num_targets:
        raise ValueError(f"need 0 <= found <= num_targets, got found={found}, num_targets={num_targets}")
    return found / num_targets if num_targets else 0.0


def potential_step_rewards(
    new_targets_per_turn: Sequence[int], num_targets: int, gamma: float = 1.0
) -> tuple[float, ...]:
    """F_t = γ·Φ(s_t) − Φ(s_{t−1}) for every search turn (see module docstring).

    Args:
        new_targets_per_turn: |Δ_t| per search turn (eq 15: targets first shown in turn t).
        num_targets: |S(x)|.
        gamma: γ ∈ (0, 1]; 1 keeps the sum path-independent.

    Returns:
        F_t per search turn, in turn order.

    Examples:
        S = {d1, d2}, turn 1 finds d1, turn 2 nothing, turn 3 finds d2 (γ = 1):
        Φ = 0, 1/2, 1/2, 1 → F = 1/2, 0, 1/2.

        >>> potential_step_rewards([1, 0, 1], 2)
        (0.5, 0.0, 0.5)
    """
    if not (math.isfinite(gamma) and 0.0 < gamma <= 1.0):
        raise ValueError(f"gta.reward.shaping_gamma={gamma} must be in (0, 1]")
    found = 0
    before = target_potential(0, num_targets)
    rewards: list[float] = []
    for new in new_targets_per_turn:
        found += int(new)
        after = target_potential(found, num_targets)
        rewards.append(gamma * after - before)
        before = after
    return tuple(rewards)
