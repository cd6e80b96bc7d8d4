"""``gta_turn_grpo``: group-normalized reward-to-go, for opt-in per-turn rewards (beyond the paper).

The paper (GTA-RAG eqs 20–21) normalizes one trajectory-level scalar per rollout:
Â_i = (R_i − mean_g R)/(std_g R + ε), the same for every token — verl's ``grpo``. With
``gta.agent.place_turn_rewards=true`` the agent loop puts each search turn's r_search_t on
that turn's last query token and r_ans on the last token (sum preserved), and this estimator
turns the token rewards r_{i,s} into per-token advantages:

    G_{i,t} = Σ_{s ≥ t} r_{i,s}                     (undiscounted reward-to-go)
    R_i     = G_{i,0} = Σ_s r_{i,s}                 (total return, what ``grpo`` uses)
    μ_g, σ_g = mean and unbiased std of {R_j : j in i's group g}
    A_{i,t} = (G_{i,t} − μ_g) / (σ_g + ε) · m_{i,t} (or G_{i,t} − μ_g without std scaling)

Groups of one get μ = 0, σ = 1, as in verl's ``grpo``.

Relation to ``grpo`` (tested): when each row's only non-zero reward sits on its last
response token — or anywhere after its last mask-1 token — G_{i,t} = R_i at every mask-1
position, so the advantages equal ``compute_grpo_outcome_advantage``'s exactly. Returns
differ: ``grpo`` returns its advantages as "returns"; this returns G · m.

Trade-off (see docs/rewards.md and verl issue #7244): a token's reward-to-go drops the
rewards of earlier turns, yet the baseline μ_g is the group mean of *total* returns. The
baseline is still one constant per group (independent of the action at t), so the policy
gradient keeps GRPO's (slightly self-inclusive) bias and no more; but late tokens, whose G
excludes the search rewards already earned, are compared against a baseline that includes
them, which shifts their advantages down by the group's mean search reward and raises
variance. The alternative — normalizing per turn index across the group — depends on
how many turns each rollout took (an action-dependent baseline, #7244's length bias).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gta_verl.verl_compat import register_adv_est

__all__ = ["TURN_GRPO_NAME", "checked_std_norm", "compute_turn_grpo_advantage", "group_stats", "reward_to_go"]

TURN_GRPO_NAME = "gta_turn_grpo"


def reward_to_go(token_level_rewards: torch.Tensor) -> torch.Tensor:
    """G_{i,t} = Σ_{s ≥ t} r_{i,s} over every position (masked ones included).

    Rewards on mask-0 positions (e.g. a final observation token) still count for the
    tokens before them.

    Args:
        token_level_rewards: shape (bs, response_length).

    Returns:
        Tensor of the same shape.
    """
    return torch.flip(torch.cumsum(torch.flip(token_level_rewards, dims=[-1]), dim=-1), dims=[-1])


def group_stats(totals: torch.Tensor, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row group mean and std of ``totals`` (groups of one: mean 0, std 1, as verl)."""
    groups: dict[Any, list[int]] = {}
    for row, key in enumerate(np.asarray(index, dtype=object).tolist()):
        groups.setdefault(key, []).append(row)
    mean = torch.zeros_like(totals)
    std = torch.ones_like(totals)
    for rows in groups.values():
        if len(rows) > 1:
            idx = torch.tensor(rows, device=totals.device)
            values = totals[idx]
            mean[idx] = values.mean()
            std[idx] = values.std()  # unbiased, as torch.std in verl's grpo
    return mean, std


def checked_std_norm(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any,
    default: bool,
) -> bool:
    """Check an estimator's inputs (same (bs, response_length) shape, one group id per row) and return
    ``norm_adv_by_std_in_grpo``: the config's value wins (verl passes only ``config`` to registered
    estimators), else ``default``."""
    if token_level_rewards.shape != response_mask.shape:
        raise ValueError(
            f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must have the same shape (bs, response_length)"
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} entries for {token_level_rewards.shape[0]} rows")
    if config is not None and hasattr(config, "get"):
        return bool(config.get("norm_adv_by_std_in_grpo", default))
    return default


@register_adv_est(TURN_GRPO_NAME)
def compute_turn_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-normalized reward-to-go advantages (module docstring has the equations).

    Args:
        token_level_rewards: r, shape (bs, response_length).
        response_mask: m, shape (bs, response_length); 1 on policy tokens, 0 on
            observations and padding.
        index: group id (verl's ``uid``) per row, shape (bs,).
        config: verl's ``AlgoConfig``; its ``norm_adv_by_std_in_grpo`` wins over the
            argument (verl passes only ``config`` to registered estimators).
        epsilon: added to σ_g.
        norm_adv_by_std_in_grpo: divide by σ_g + ε (False = Dr.GRPO-style centering only).
        **kwargs: ignored (e.g. ``reward_baselines``).

    Returns:
        (advantages, returns), each shape (bs, response_length), zero where m = 0;
        returns = G · m.
    """
    norm_adv_by_std_in_grpo = checked_std_norm(
        token_level_rewards, response_mask, index, config, norm_adv_by_std_in_grpo
    )
    mask = response_mask.to(token_level_rewards.dtype)
    with torch.no_grad():
        rtg = reward_to_go(token_level_rewards)
        mean, std = group_stats(token_level_rewards.sum(dim=-1), index)
        centered = rtg - mean.unsqueeze(-1)
        if norm_adv_by_std_in_grpo:
            centered = centered / (std.unsqueeze(-1) + epsilon)
        advantages = centered * mask
        returns = rtg * mask
    return advantages, returns
