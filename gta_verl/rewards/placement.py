"""Opt-in per-turn reward placement (beyond the paper; ``gta.agent.place_turn_rewards``).

The paper's GRPO normalizes one trajectory-level scalar R_traj (eq 18), which verl puts on
the last response token. With placement on, the agent loop's ``AgentLoopOutput.as_dict``
instead spreads the same total over the response: each search turn's r_search_t sits on the
last token of that turn's query (the action that earned it), and the remainder
R_traj − Σ_t r_search_t (= r_ans) sits on the last token. The sum is preserved, so verl's
``grpo`` (which sums token rewards) is unchanged by placement; only a return-to-go estimator
such as ``gta_turn_grpo`` (:mod:`gta_verl.algos.advantages`) sees the difference.

Pure Python: the agent loop helper calls :func:`place_from_extra_fields` and writes the
list into ``rm_scores``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gta_verl.data.schema import EF_REWARD_EXTRA_INFO, EF_TURN_SPANS, parse_turn_spans

__all__ = [
    "TURN_REWARDS_KEY",
    "place_from_extra_fields",
    "place_turn_rewards",
    "query_end_positions",
    "turn_rewards_from_info",
]

#: ``reward_extra_info`` key holding the JSON list of per-search-turn rewards.
TURN_REWARDS_KEY = "turn_rewards_json"


def place_turn_rewards(
    response_length: int,
    total_reward: float,
    turn_end_positions: Sequence[int],
    turn_rewards: Sequence[float],
) -> list[float]:
    """Token-level rewards whose sum is ``total_reward``.

    Args:
        response_length: number of response tokens L (> 0).
        total_reward: the trajectory reward R (e.g. R_traj of eq 18).
        turn_end_positions: response index of each search turn's last query token.
        turn_rewards: r_search_t per search turn, aligned with ``turn_end_positions``.

    Returns:
        A list of L floats: ``turn_rewards[i]`` added at ``turn_end_positions[i]`` and
        ``total_reward − Σ placed`` added at index L − 1. A turn whose position is ≥ L
        (cut off by truncation) is not placed, so its reward lands in the remainder; the
        sum is preserved in every case.

    Raises:
        ValueError: on L ≤ 0, a negative position, or mismatched lengths.

    Examples:
        >>> place_turn_rewards(6, 2.5, [1, 3], [0.25, 0.25])
        [0.0, 0.25, 0.0, 0.25, 0.0, 2.0]
    """
    if response_length <= 0:
        raise ValueError(f"response_length must be > 0, got {response_length}")
    if len(turn_end_positions) != len(turn_rewards):
        raise ValueError(
            f"{len(turn_end_positions)} turn end positions but {len(turn_rewards)} turn rewards; "
            "pass one position per search turn"
        )
    out = [0.0] * response_length
    placed = 0.0
    for pos, reward in zip(turn_end_positions, turn_rewards, strict=True):
        pos = int(pos)
        if pos < 0:
            raise ValueError(f"turn end position {pos} is negative")
        if pos < response_length:
            out[pos] += float(reward)
            placed += float(reward)
    # Remainder computed as a difference (not r_ans re-read) so the sum is exact by construction.
    out[-1] += float(total_reward) - placed
    return out


def turn_rewards_from_info(reward_extra_info: Mapping[str, Any] | None) -> list[float]:
    """Parse the per-search-turn rewards a gta reward manager stored as JSON (``[]`` if absent)."""
    if not reward_extra_info or TURN_REWARDS_KEY not in reward_extra_info:
        return []
    raw = reward_extra_info[TURN_REWARDS_KEY]
    values = json.loads(raw) if isinstance(raw, str) else list(raw)
    return [float(v) for v in values]


def query_end_positions(turn_spans: Sequence[Sequence[Any]]) -> list[int]:
    """Last token index of every ``query`` span (``[kind, start, end)`` with end exclusive)."""
    return [end - 1 for kind, start, end in parse_turn_spans(turn_spans) if kind == "query" and end > start]


def place_from_extra_fields(
    response_length: int, total_reward: float, extra_fields: Mapping[str, Any]
) -> list[float]:
    """Placement for an agent-loop output: spans from ``gta/turn_spans``, rewards from
    ``extra_fields["reward_extra_info"]["turn_rewards_json"]``.

    Query spans and turn rewards are paired in order; any surplus on either side (e.g. a
    truncated final query) is left to the remainder at the last token.
    """
    rewards = turn_rewards_from_info(extra_fields.get(EF_REWARD_EXTRA_INFO))
    positions = query_end_positions(extra_fields.get(EF_TURN_SPANS, []) or [])
    n = min(len(rewards), len(positions))
    return place_turn_rewards(response_length, total_reward, positions[:n], rewards[:n])
