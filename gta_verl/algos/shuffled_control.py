"""``gta_shuffled_grpo``: the shuffled-reward control of a learning experiment.

If GRPO's gains came from the reward, a run whose rewards carry no information about the rollouts they are
attached to should not gain as much. This estimator keeps everything of verl's ``grpo`` (one trajectory-level
scalar per rollout, group mean and std, the same advantage on every policy token) except which rollout a
reward belongs to: within each group the scores are permuted before the advantages are computed,

    R_i   = Σ_t r_{i,t}                                   (the trajectory score, as ``grpo``)
    R'_i  = R_{π_g(i)}                                    (π_g: a seeded permutation of group g)
    A_i,t = (R'_i − mean_g R) / (std_g R + ε) · m_{i,t}   (or R'_i − mean_g R without std scaling)

so each group's advantages are the same multiset as ``grpo``'s, the update has the same size, and only the
credit assignment is destroyed. π_g is drawn from a generator seeded by (the run's seed ``data.seed``, the
training step, the group's position in the batch) — never by verl's ``uid``, which verl draws with
``uuid4`` and which would make two runs of one seed shuffle differently. gta's trainers set the seed and
step (:class:`gta_verl.algos.advantages.AdvantageContext`); outside them both are 0. A group's position is
the order of its first row in the batch, and a row's place within its group the order of its rows, both as
verl's replay buffer lays out the batch (the order its prompts were added). Groups of one get mean 0, std 1,
as in verl. Group ids must be all strings or all integers (:func:`gta_verl.algos.advantages.group_rows`):
mixed or NaN ids are refused, never merged, so a score never moves to another group. A row whose reward
could not be computed (``reward_error``) keeps advantage 0 and takes no part in its group's permutation,
mean or std.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gta_verl.verl_compat import register_adv_est, retry_plugin_registration

__all__ = ["SHUFFLED_GRPO_NAME", "compute_shuffled_grpo_advantage", "group_permutation"]

SHUFFLED_GRPO_NAME = "gta_shuffled_grpo"


def group_permutation(
    index: np.ndarray, seed: int = 0, step: int = 0, valid: np.ndarray | None = None
) -> np.ndarray:
    """``perm`` with ``perm[i]`` = the row whose score row ``i`` receives; rows only move within their group.

    Group ``p`` (the ``p``-th distinct id in the batch, :func:`gta_verl.algos.advantages.group_rows`) permutes
    its valid rows with ``numpy.random.default_rng([seed, step, p]).permutation``; invalid rows stay put.

    Args:
        index: group id per row, shape (bs,); all strings or all integers.
        seed: the run's seed (>= 0).
        step: the training step (>= 0).
        valid: bool per row (None: all valid).

    Returns:
        int array, shape (bs,); it depends on (seed, step, each group's position and size), not on the ids.

    Raises:
        ValueError: a negative seed or step, or group ids refused by ``group_rows``.
    """
    from gta_verl.algos.advantages import group_rows

    if int(seed) < 0 or int(step) < 0:
        raise ValueError(f"the shuffled control needs a seed and step >= 0, got seed={seed}, step={step}")
    ok = np.ones(len(index), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    perm = np.arange(len(index))
    for position, rows in enumerate(group_rows(index)):
        kept = np.asarray([r for r in rows if ok[r]], dtype=np.int64)
        rng = np.random.default_rng([int(seed), int(step), position])
        perm[kept] = kept[rng.permutation(len(kept))]
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
    from gta_verl.algos.advantages import (
        checked_std_norm,
        current_advantage_context,
        excluded_rows,
        group_stats,
    )

    norm_adv_by_std_in_grpo = checked_std_norm(
        token_level_rewards, response_mask, index, config, norm_adv_by_std_in_grpo
    )
    context = current_advantage_context()
    valid = ~excluded_rows(token_level_rewards.shape[0])
    perm = group_permutation(index, context.seed, context.step, valid.numpy())
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        valid = valid.to(scores.device)
        mean, std = group_stats(scores, index, valid)
        shuffled = scores[torch.as_tensor(perm, device=scores.device)]
        centered = shuffled - mean
        if norm_adv_by_std_in_grpo:
            centered = centered / (std + epsilon)
        centered = centered * valid.to(scores.dtype)
        advantages = centered.unsqueeze(-1) * response_mask.to(scores.dtype)
    return advantages, advantages


# The trainers import names from this module and may have waited on it (verl imported first from here).
retry_plugin_registration()
