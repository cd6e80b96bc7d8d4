"""verl reward-loop manager ``path_router`` (PathRouter §3.2, §3.4).

Select with ``reward.reward_manager.source=register reward.reward_manager.name=path_router``;
settings come from the trainer config's ``gta.path_router`` node
(:class:`gta_verl.rewards.path_router.PathRouterConfig`).

Per finished rollout it returns ``reward_score`` = R and ``reward_extra_info`` with the
scalars ``acc`` (EM), ``f1``, ``C``, ``P``, ``route`` (0..3 = C+P+, C+P-, C-P+, C-P-),
``route_weight``, ``distill_select`` (1 = gets the teacher KL), ``num_searches``,
``has_gold_evidence``, ``r_a``, ``r_p``, ``r_s``. The agent loop's ``as_dict`` multiplies
its reasoning+query mask by ``distill_select`` (→ ``distill_mask``), the teacher worker
skips unselected samples, and the ``gta_path_router_sync`` trainer multiplies the GRPO
advantage by ``route_weight``.

With ``gta.path_router.base_reward=trajectory_guided`` (the GTA + PathRouter combination)
R is GTA-RAG's R_traj (eqs 15–18, ``gta.reward``) and the trajectory-guided diagnostics
(``target_doc_cov``, per-turn rewards JSON, …) are reported too; the routing fields are
the same.
"""

from __future__ import annotations

from typing import Any

from gta_verl.data.schema import (
    EF_BUDGET_EXHAUSTED,
    EF_TRUNCATED,
    EF_TURN_QUERIES,
    EF_TURN_TEXTS,
    parse_flag,
    parse_turn_queries,
    parse_turn_texts,
)
from gta_verl.protocol import checked_max_queries, split_queries
from gta_verl.rewards.managers import GTARewardManager
from gta_verl.rewards.path_router import (
    PathRouterConfig,
    path_router_config_from_trainer,
    path_router_reward,
)
from gta_verl.rewards.scoring import ScoringRequest, score_trajectory_guided
from gta_verl.rewards.trajectory import TrajectoryRewardConfig
from gta_verl.strict_config import node_at
from gta_verl.verl_compat import register_reward_manager

__all__ = ["PathRouterRewardManager", "retrieved_texts", "score_path_router"]


def retrieved_texts(request: ScoringRequest) -> list[str]:
    """Every passage text the rollout retrieved (``gta/turn_texts``, all turns, in order)."""
    return [t for turn in parse_turn_texts(request.extra_fields.get(EF_TURN_TEXTS)) for t in turn]


def _queries(request: ScoringRequest, max_queries: int = 1) -> list[str]:
    """Every query issued: a turn with several (``gta.agent.max_queries_per_turn`` > 1) gives each."""
    turns = parse_turn_queries(request.extra_fields.get(EF_TURN_QUERIES))
    return [q for turn in turns for q in split_queries(turn, max_queries)]


def _budget_exhausted(request: ScoringRequest) -> bool:
    ef = request.extra_fields
    return parse_flag(ef.get(EF_BUDGET_EXHAUSTED), EF_BUDGET_EXHAUSTED) or parse_flag(
        ef.get(EF_TRUNCATED), EF_TRUNCATED
    )


def score_path_router(
    request: ScoringRequest,
    cfg: PathRouterConfig,
    trajectory_cfg: TrajectoryRewardConfig | None = None,
    max_queries: int = 1,
) -> tuple[float, dict[str, Any]]:
    """(R, reward_extra_info) of one rollout; pure (no verl objects).

    Gold evidence S_gt is ``ground_truth.support_texts`` (Stage-I rows carry the target
    documents' texts; natural-QA rows the gold supporting passages). P reads every passage
    shown (a multi-query turn recorded the union of its queries' passages); the redundancy
    penalty r_d counts repeats over every query, ``max_queries`` (K of
    ``gta.agent.max_queries_per_turn``) telling how a turn's record splits into queries;
    r_e and r_l count search turns.
    """
    result = path_router_reward(
        prediction=request.prediction,
        golds=request.answers,
        retrieved_texts=retrieved_texts(request),
        gold_texts=request.support_texts,
        queries=_queries(request, max_queries),
        num_searches=request.num_searches,
        budget_exhausted=_budget_exhausted(request),
        cfg=cfg,
        turn_doc_ids=request.turn_doc_ids,
        target_doc_ids=request.target_doc_ids,
    )
    if cfg.base_reward == "trajectory_guided":
        score, info = score_trajectory_guided(request, trajectory_cfg or TrajectoryRewardConfig())
        return float(score), {**info, **result.extra_info()}
    return float(result.score), result.extra_info()


@register_reward_manager("path_router")
class PathRouterRewardManager(GTARewardManager):
    """PathRouter's path-aware reward + routing diagnostics (see module docstring)."""

    def read_settings(self, config: Any) -> None:
        self.path_router_config = path_router_config_from_trainer(config)
        # K alone, read from the loop's own node: the split rule is the protocol's, not the agent package's.
        self.max_queries = checked_max_queries(node_at(config, "gta", "agent", "max_queries_per_turn"))

    def score(self, request: ScoringRequest) -> tuple[float, dict[str, Any]]:
        return score_path_router(request, self.path_router_config, self.reward_config, self.max_queries)
