"""gta's evidence metrics of one training step, from the TransferQueue ``extra_fields`` — pure.

verl 0.9.1's V1 trainer logs ``reward_extra_info`` only for validation
(``val-aux/<data_source>/<key>/mean@N``); a training step's metrics
(``PPOTrainer._compute_metrics``) never read it, and the classic ``RayPPOTrainer`` only
dumps it. The gta V1 trainers (:mod:`gta_verl.algos.trainer`) therefore add these
``gta/*`` keys to every step, computed here from what the agent loop
(``gta/…`` extra fields) and the reward manager (``extra_fields["reward_extra_info"]``)
wrote per trajectory:

=============================  =====================================================
``gta/acc``                    mean EM (reward_extra_info ``acc``)
``gta/target_doc_cov``         mean TargetDocCov over trajectories with target docs
``gta/complete_chain_rate``    share of those that retrieved every target document
``gta/retrieval_errors``       failed retriever calls in the step (count; 0 = healthy)
``gta/retrieval_error_rate``   failed calls / search calls
``gta/num_searches``           mean search actions per trajectory
``gta/invalid_actions``        mean invalid actions per trajectory
``gta/answer_rate``            share of trajectories that gave an ``<answer>``
``gta/P``                      mean evidence overlap P over rows with gold evidence
``gta/route_share/<route>``    PathRouter route shares (C±P±), summing to 1
``gta/kl_select_frac``         share of trajectories selected for the teacher KL
``gta/kl_token_frac``          distilled tokens / response tokens (KL token ratio)
``gta/groups_with_signal``     share of GRPO groups (``uid``) with a non-zero advantage
``gta/rollouts_with_signal``   share of trajectories with a non-zero advantage
=============================  =====================================================

The last two are the training-time form of ``gta-verl signal``'s gate (:mod:`gta_verl.eval.signal`): a group
whose rewards are all equal has A_i = 0 for every rollout and adds nothing to the policy gradient, so a step
with ``gta/groups_with_signal`` 0 is a step without a policy-gradient update (only KL or weight decay move
the policy).

A key whose inputs are absent from every trajectory (e.g. ``gta/P`` under the Stage-I
reward) is left out rather than logged as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gta_verl.data import schema
from gta_verl.data.schema import plain_value
from gta_verl.rewards.path_router import ROUTE_NAMES

__all__ = ["evidence_step_metrics", "kl_token_frac", "signal_step_metrics"]

PREFIX = "gta/"


def _num(value: Any) -> float | None:
    value = plain_value(value)
    if value is None or isinstance(value, (str, list, dict)):
        return None
    return float(value)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _column(infos: Sequence[Mapping[str, Any]], key: str, rows: Sequence[bool] | None = None) -> list[float]:
    """Values of ``key`` over the rows where it is numeric (and ``rows`` is True)."""
    out = []
    for i, info in enumerate(infos):
        value = _num(info.get(key))
        if value is not None and (rows is None or rows[i]):
            out.append(value)
    return out


def _loop_metrics(extra: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    def counts(key: str) -> list[int]:
        return [schema.parse_count(ef.get(key), key) for ef in extra]

    errors = counts(schema.EF_RETRIEVAL_ERRORS)
    searches = counts(schema.EF_NUM_SEARCHES)
    invalid = counts(schema.EF_INVALID_ACTIONS)
    n = len(extra)
    return {
        "retrieval_errors": float(sum(errors)),
        "retrieval_error_rate": sum(errors) / sum(searches) if sum(searches) else 0.0,
        "num_searches": sum(searches) / n,
        "invalid_actions": sum(invalid) / n,
        "answer_rate": sum(_answered(ef) for ef in extra) / n,
    }


def _answered(ef: Mapping[str, Any]) -> bool:
    """``gta/answer`` when the loop records it; verl's ``tool_agent`` does not, so there the
    reward manager's ``has_answer`` (parsed from the response text) decides."""
    if schema.EF_ANSWER in ef:
        return schema.parse_answer(ef.get(schema.EF_ANSWER)) is not None
    info = plain_value(ef.get(schema.EF_REWARD_EXTRA_INFO)) or {}
    return (_num(info.get(schema.RI_HAS_ANSWER)) or 0.0) > 0


def _reward_metrics(infos: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    has_targets = [
        (_num(i.get(schema.RI_HAS_TARGETS)) or 0.0) > 0 if schema.RI_HAS_TARGETS in i else True for i in infos
    ]
    gold = [(_num(i.get(schema.RI_HAS_GOLD_EVIDENCE)) or 0.0) > 0 for i in infos]
    out: dict[str, float | None] = {
        "acc": _mean(_column(infos, schema.RI_ACC)),
        "target_doc_cov": _mean(_column(infos, schema.RI_TARGET_DOC_COV, has_targets)),
        "complete_chain_rate": _mean(_column(infos, schema.RI_COMPLETE_CHAIN, has_targets)),
        "P": _mean(_column(infos, schema.RI_P, gold)),
        "kl_select_frac": _mean(_column(infos, schema.RI_DISTILL_SELECT)),
    }
    routes = [int(r) for r in _column(infos, schema.RI_ROUTE) if r >= 0]
    if routes:
        for rid, name in enumerate(ROUTE_NAMES):
            out[f"route_share/{name}"] = sum(r == rid for r in routes) / len(routes)
    return out


def evidence_step_metrics(
    extra_fields: Sequence[Mapping[str, Any] | None], keep: Sequence[bool] | None = None
) -> dict[str, float]:
    """``gta/*`` metrics of one step (table in the module docstring).

    Args:
        extra_fields: one dict per trajectory (TQ field ``extra_fields``): the agent loop's
            ``gta/…`` keys and ``reward_extra_info`` (the reward manager's scalars).
        keep: False for verl's padding rows (tag ``is_padding``); default all True.

    Returns:
        ``{"gta/<name>": float}``; empty when no row is kept.
    """
    rows = [dict(ef or {}) for ef in extra_fields]
    if keep is not None:
        rows = [ef for ef, k in zip(rows, keep, strict=True) if k]
    if not rows:
        return {}
    infos = [dict(plain_value(ef.get(schema.EF_REWARD_EXTRA_INFO)) or {}) for ef in rows]
    values: dict[str, float | None] = {**_loop_metrics(rows), **_reward_metrics(infos)}
    return {PREFIX + k: float(v) for k, v in values.items() if v is not None}


def kl_token_frac(distill_tokens: float, response_tokens: float) -> dict[str, float]:
    """``gta/kl_token_frac`` = Σ distill_mask / Σ response_mask over the step (0 if no tokens)."""
    return {
        PREFIX + "kl_token_frac": float(distill_tokens) / float(response_tokens) if response_tokens else 0.0
    }


def signal_step_metrics(
    uids: Sequence[Any], advantages: Sequence[Sequence[float]], masks: Sequence[Sequence[float]]
) -> dict[str, float]:
    """``gta/groups_with_signal`` and ``gta/rollouts_with_signal`` of one step.

    Args:
        uids: the group id of each trajectory (verl's ``uid``: one per prompt, shared by its n rollouts).
        advantages: each trajectory's per-token advantages A_{i,t} (length = its response).
        masks: each trajectory's response mask (1 = a policy token, 0 = an observation or padding).

    A trajectory has signal when some policy token has A_{i,t} ≠ 0; a group when any of its trajectories has.

    >>> signal_step_metrics(["g1", "g1", "g2", "g2"], [[0.5], [-0.5], [0.0], [0.0]], [[1], [1], [1], [1]])
    {'gta/groups_with_signal': 0.5, 'gta/rollouts_with_signal': 0.5}
    """
    if not (len(uids) == len(advantages) == len(masks)):
        raise ValueError(
            f"signal_step_metrics: {len(uids)} uids, {len(advantages)} advantage rows, {len(masks)} masks"
        )
    if not uids:
        return {}
    live = [
        any(float(a) != 0.0 and float(m) > 0 for a, m in zip(adv, mask, strict=False))
        for adv, mask in zip(advantages, masks, strict=True)
    ]
    groups: dict[str, bool] = {}
    for uid, ok in zip(uids, live, strict=True):
        key = str(plain_value(uid))
        groups[key] = groups.get(key, False) or ok
    return {
        PREFIX + "groups_with_signal": sum(groups.values()) / len(groups),
        PREFIX + "rollouts_with_signal": sum(live) / len(live),
    }
