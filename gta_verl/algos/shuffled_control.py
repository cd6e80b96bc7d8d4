"""``gta_shuffled_grpo``: the shuffled-reward control of a learning experiment.

If GRPO's gains came from the reward, a run whose rewards carry no information about the rollouts they are
attached to should not gain as much. This estimator keeps everything of verl's ``grpo`` (one trajectory-level
scalar per rollout, group mean and std, the same advantage on every policy token) except which rollout a
reward belongs to: within each group the scores are permuted before the advantages are computed,

    R_i   = Σ_t r_{i,t}                                   (the trajectory score, as ``grpo``)
    R'_i  = R_{π_g(i)}                                    (π_g: a seeded permutation of group g)
    A_i,t = (R'_i − mean_g R) / (std_g R + ε) · m_{i,t}   (or R'_i − mean_g R without std scaling)

so each group's advantages are the same multiset as ``grpo``'s, the update has the same size, and only the
credit assignment is destroyed. π_g is seeded by the group id (verl's ``uid``): a run is reproducible. Groups
of one get mean 0, std 1, as in verl.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from gta_verl.verl_compat import register_adv_est

__all__ = ["SHUFFLED_GRPO_NAME", "compute_shuffled_grpo_advantage", "group_permutation"]

SHUFFLED_GRPO_NAME = "gta_shuffled_grpo"


def group_permutation(index: np.ndarray) -> np.ndarray:
    """``perm`` with ``perm[i]`` = the row whose score row ``i`` receives; rows only move within their group.

    Args:
        index: group id per row, shape (bs,).

    Returns:
        int array, shape (bs,); the permutation of a group depends only on its id.
    """
    perm = np.arange(len(index))
    groups: dict[str, list[int]] = {}
    for row, key in enumerate(np.asarray(index, dtype=object).tolist()):
        groups.setdefault(str(key), []).append(row)
    for key, rows in groups.items():
        seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        perm[rows] = np.asarray(rows)[np.random.default_rng(seed).permutation(len(rows))]
    return perm


@register_adv_est(SHUFFLED_GRPO_NAME)
def compute_shuffled_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages of the within-group shuffled scores (module docstring has the equations).

    Args:
        token_level_rewards: r, shape (bs, response_length).
        response_mask: m, shape (bs, response_length).
        index: group id (verl's ``uid``) per row, shape (bs,).
        config: verl's ``AlgoConfig``; its ``norm_adv_by_std_in_grpo`` wins over the argument.
        epsilon: added to the group std.
        norm_adv_by_std_in_grpo: divide by std + ε (False: Dr. GRPO's centering only).

    Returns:
        (advantages, returns), both the advantages, shape (bs, response_length), as verl's ``grpo``.
    """
    from gta_verl.algos.advantages import checked_std_norm, group_stats

    norm_adv_by_std_in_grpo = checked_std_norm(
        token_level_rewards, response_mask, index, config, norm_adv_by_std_in_grpo
    )
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        mean, std = group_stats(scores, index)
        shuffled = scores[torch.as_tensor(group_permutation(index), device=scores.device)]
        centered = shuffled - mean
        if norm_adv_by_std_in_grpo:
            centered = centered / (std + epsilon)
        advantages = centered.unsqueeze(-1) * response_mask.to(scores.dtype)
    return advantages, advantages
