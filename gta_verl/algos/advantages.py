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

Groups of one get μ = 0, σ = 1, as in verl's ``grpo``. A row whose reward could not be computed (its
manager wrote ``reward_error`` = 1; gta's trainers pass the flags in :class:`AdvantageContext`) gets A = 0
and is left out of its group's μ and σ, as TRL's GRPO drops such rows from the group.

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

import contextlib
import contextvars
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gta_verl.data.schema import EF_REWARD_EXTRA_INFO, RI_REWARD_ERROR
from gta_verl.verl_compat import register_adv_est, retry_plugin_registration

__all__ = [
    "TURN_GRPO_NAME",
    "AdvantageContext",
    "advantage_context",
    "checked_std_norm",
    "compute_turn_grpo_advantage",
    "current_advantage_context",
    "excluded_rows",
    "group_rows",
    "group_stats",
    "grpo_row_advantages",
    "reward_error_flags",
    "reward_to_go",
]

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


@dataclass(frozen=True)
class AdvantageContext:
    """What verl does not hand a registered estimator, set by gta's trainers around verl's advantage step.

    Attributes:
        seed: the run's seed (``data.seed``; the shuffled control's permutations depend on it).
        step: the training step (``global_steps``).
        excluded: one flag per batch row, True for a row whose reward could not be computed (its manager wrote
            ``reward_error`` = 1): it gets advantage 0 and is left out of its group's mean and std. None: no
            row is excluded.
    """

    seed: int = 0
    step: int = 0
    excluded: tuple[bool, ...] | None = None


_CONTEXT: contextvars.ContextVar[AdvantageContext | None] = contextvars.ContextVar(
    "gta_advantage_context", default=None
)


@contextlib.contextmanager
def advantage_context(context: AdvantageContext) -> Iterator[AdvantageContext]:
    """Make ``context`` what :func:`current_advantage_context` returns inside the ``with`` block."""
    token = _CONTEXT.set(context)
    try:
        yield context
    finally:
        _CONTEXT.reset(token)


def current_advantage_context() -> AdvantageContext:
    """The context a gta trainer set; outside one (verl's classic trainer, a test): seed 0, step 0, no row
    excluded."""
    return _CONTEXT.get() or AdvantageContext()


def excluded_rows(n_rows: int) -> torch.Tensor:
    """The current context's excluded-row flags as a bool tensor of ``n_rows`` (all False without any).

    Raises:
        ValueError: the context's flags are for another number of rows (they would exclude the wrong rows).
    """
    flags = current_advantage_context().excluded
    if flags is None:
        return torch.zeros(n_rows, dtype=torch.bool)
    if len(flags) != n_rows:
        raise ValueError(f"{len(flags)} excluded-row flags for a batch of {n_rows} rows")
    return torch.tensor(list(flags), dtype=torch.bool)


def reward_error_flags(extra_fields: Sequence[Mapping[str, Any] | None]) -> list[bool]:
    """Per row: True where the reward manager wrote ``reward_error`` = 1 in ``reward_extra_info`` (the row's
    reward could not be computed and its 0 is a placeholder)."""
    flags = []
    for ef in extra_fields:
        info = (ef or {}).get(EF_REWARD_EXTRA_INFO) or {}
        value = info.get(RI_REWARD_ERROR, 0.0)
        flags.append(bool(float(value if value is not None else 0.0) > 0))
    return flags


def _id_kind(key: Any) -> str:
    if isinstance(key, (bool, np.bool_)):
        return "bool"
    if isinstance(key, (str, np.str_)):
        return "str"
    if isinstance(key, numbers.Integral):
        return "int"
    return type(key).__name__


def group_rows(index: Sequence[Any] | np.ndarray) -> list[list[int]]:
    """The rows of each group, groups in the order their first row appears (a group's position in the batch).

    Group ids must all be strings (verl's ``uid``) or all integers. Mixed kinds are refused, not reconciled:
    keyed by ``str`` the ids 1 and "1" would be one group, keyed by value two, and the two readings would
    disagree about which rows share a mean. Floats are refused too: NaN is not equal to itself, so NaN ids
    would each form a group of one under one reading and one group under another.

    Raises:
        ValueError: a float, None, bool or other id, or ids of more than one kind.
    """
    keys = np.asarray(index, dtype=object).tolist()
    kinds = {_id_kind(k) for k in keys}
    bad = kinds - {"str", "int"}
    if bad or len(kinds) > 1:
        example = next((k for k in keys if _id_kind(k) in bad), keys[0] if keys else None)
        raise ValueError(
            "group ids (verl's uid) must be all strings or all integers, got "
            f"{', '.join(sorted(kinds))} (e.g. {example!r}); rows would be grouped inconsistently"
        )
    groups: dict[Any, list[int]] = {}
    for row, key in enumerate(keys):
        groups.setdefault(str(key) if kinds == {"str"} else int(key), []).append(row)
    return list(groups.values())


def group_stats(
    totals: torch.Tensor, index: Sequence[Any] | np.ndarray, valid: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row group mean and std of ``totals`` over the group's valid rows.

    A group with one valid row gets mean 0, std 1, as verl's groups of one; so does every invalid row
    (``valid`` False: its advantage is zeroed by the caller). ``valid`` None: every row is valid.
    """
    mean = torch.zeros_like(totals)
    std = torch.ones_like(totals)
    ok = [True] * len(totals) if valid is None else [bool(v) for v in valid.tolist()]
    for rows in group_rows(index):
        kept = [r for r in rows if ok[r]]
        if len(kept) > 1:
            idx = torch.tensor(kept, device=totals.device)
            values = totals[idx]
            mean[idx] = values.mean()
            std[idx] = values.std()  # unbiased, as torch.std in verl's grpo
    return mean, std


def grpo_row_advantages(
    scores: torch.Tensor,
    index: Sequence[Any] | np.ndarray,
    valid: torch.Tensor | None = None,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """GRPO's per-row advantage with invalid rows out of their groups (GTA-RAG eq 21, verl's ``grpo``):

        Â_i = (R_i − mean_{j ∈ g, valid} R_j) / (std_{j ∈ g, valid} R_j + ε)   (valid i)
        Â_i = 0                                                                 (invalid i)

    Args:
        scores: R per row, shape (bs,).
        index: group id per row.
        valid: bool per row (None: all valid).
        norm_adv_by_std_in_grpo: divide by std + ε (False: centering only).
        epsilon: ε.

    Returns:
        Â, shape (bs,).
    """
    mean, std = group_stats(scores, index, valid)
    centered = scores - mean
    if norm_adv_by_std_in_grpo:
        centered = centered / (std + epsilon)
    if valid is not None:
        centered = centered * valid.to(centered.dtype)
    return centered


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
    valid = ~excluded_rows(token_level_rewards.shape[0]).to(token_level_rewards.device)
    with torch.no_grad():
        rtg = reward_to_go(token_level_rewards)
        mean, std = group_stats(token_level_rewards.sum(dim=-1), index, valid)
        centered = rtg - mean.unsqueeze(-1)
        if norm_adv_by_std_in_grpo:
            centered = centered / (std.unsqueeze(-1) + epsilon)
        advantages = centered * mask * valid.to(mask.dtype).unsqueeze(-1)
        returns = rtg * mask
    return advantages, returns


# The trainers import names from this module and may have waited on it (verl imported first from here).
retry_plugin_registration()
