"""Opt-in per-search-turn terms replacing eq 16 (``gta.reward.step_shaping``).

GTA-RAG pays each search turn an additive term (eq 16: +hit_per_doc per new target, miss
otherwise). Its sum depends on how the evidence was collected (how many turns, how many
misses), not only on what was found, so it can change which policy is optimal. Two
alternatives, both on the potential

* Φ(s) = |C ∩ S(x)| / |S(x)|: the fraction of the question's target documents shown so far
  (s_t = after search turn t, s_0 = before any search, so Φ(s_0) = 0); Φ ≡ 0 when S(x) = ∅.

``potential`` — potential-based shaping (Ng, Harada & Russell 1999). Every transition s → s′
pays F = γΦ(s′) − Φ(s), with Φ = 0 at the terminal state (after the answer, or the end of the
rollout):

* F_t = Φ(s_t) − Φ(s_{t−1}) for search turn t = 1..T;
* F_end = 0 − Φ(s_T) on the last transition (paid with r_ans, on the last token).

The sum telescopes to Φ(s_terminal) − Φ(s_0) = 0 for every trajectory, so the return of every
policy, and hence their order, is unchanged (the theorem's guarantee). Our returns are
undiscounted (verl's ``grpo`` sums token rewards; ``gta_turn_grpo`` takes the undiscounted
reward-to-go), so the invariance needs γ = 1, the only value this form accepts: with γ < 1
an undiscounted sum keeps −(1 − γ)·Σ_t Φ(s_t), a cost on evidence held. Under trajectory-level
``grpo`` the form therefore changes nothing; under ``gta_turn_grpo`` with per-turn placement
it moves credit between turns (the reward-to-go from turn t is r_ans − Φ(s_{t−1})), never the
optimum.

``coverage_bonus`` — the same differences, but Φ of the last state kept (not zeroed):
F_t = γ·Φ(s_t) − Φ(s_{t−1}), no terminal term. With γ = 1, Σ_t F_t = Φ(s_T), the final
coverage: a terminal bonus for evidence, spread over the turns that found it. Like eq 16 it
changes which policy is optimal (module test: V(A) 0.50 < V(B) 0.60 without it, 1.50 > 0.60
with it); unlike eq 16 it never pays an extra search. With γ < 1,
Σ_t F_t = γ·Φ(s_T) − (1 − γ)·Σ_{t<T} Φ(s_t).

Pure Python on counts; no verl, no numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "STEP_SHAPINGS",
    "coverage_bonus_step_rewards",
    "potential_shaping",
    "target_potential",
]

#: ``gta.reward.step_shaping`` values: eq 16 as in the paper, potential-based shaping, or
#: the coverage bonus spread over turns.
STEP_SHAPINGS = ("additive", "potential", "coverage_bonus")


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


def _potentials(new_targets_per_turn: Sequence[int], num_targets: int) -> list[float]:
    """[Φ(s_0), Φ(s_1), …, Φ(s_T)] from |Δ_t| per search turn."""
    found, out = 0, [target_potential(0, num_targets)]
    for new in new_targets_per_turn:
        found += int(new)
        out.append(target_potential(found, num_targets))
    return out


def _check_gamma(gamma: float) -> None:
    if not (math.isfinite(gamma) and 0.0 < gamma <= 1.0):
        raise ValueError(f"gta.reward.shaping_gamma={gamma} must be in (0, 1]")


def coverage_bonus_step_rewards(
    new_targets_per_turn: Sequence[int], num_targets: int, gamma: float = 1.0
) -> tuple[float, ...]:
    """F_t = γ·Φ(s_t) − Φ(s_{t−1}) per search turn, Φ(s_T) kept (``coverage_bonus``).

    Args:
        new_targets_per_turn: |Δ_t| per search turn (eq 15: targets first shown in turn t).
        num_targets: |S(x)|.
        gamma: γ ∈ (0, 1]; with 1 the sum is the final coverage Φ(s_T).

    Returns:
        F_t per search turn, in turn order.

    Examples:
        S = {d1, d2}, turn 1 finds d1, turn 2 nothing, turn 3 finds d2 (γ = 1):
        Φ = 0, 1/2, 1/2, 1 → F = 1/2, 0, 1/2 (sum 1 = Φ(s_3)).

        >>> coverage_bonus_step_rewards([1, 0, 1], 2)
        (0.5, 0.0, 0.5)
    """
    _check_gamma(gamma)
    phi = _potentials(new_targets_per_turn, num_targets)
    return tuple(gamma * phi[t] - phi[t - 1] for t in range(1, len(phi)))


def potential_shaping(
    new_targets_per_turn: Sequence[int], num_targets: int
) -> tuple[tuple[float, ...], float]:
    """Potential-based shaping, γ = 1: (F_t per search turn, F_end of the last transition).

    F_t = Φ(s_t) − Φ(s_{t−1}); F_end = 0 − Φ(s_T) (Φ = 0 at the terminal state). The sum of
    all terms is 0 on every trajectory.

    Examples:
        S = {d1, d2}, turn 1 finds d1, turn 2 nothing, turn 3 finds d2:
        F = (1/2, 0, 1/2), F_end = −1; sum 0.

        >>> potential_shaping([1, 0, 1], 2)
        ((0.5, 0.0, 0.5), -1.0)
    """
    phi = _potentials(new_targets_per_turn, num_targets)
    return tuple(phi[t] - phi[t - 1] for t in range(1, len(phi))), -phi[-1]
