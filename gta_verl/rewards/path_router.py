"""PathRouter's path-aware routing and reward — pure Python, no torch, no verl.

Paper: PathRouter (arXiv 2606.16409) §3.2 and §3.4.

* Answer correctness  ``C_i = 1[EM(a_i, a*) > 0  or  F1(a_i, a*) >= θ_C]``.
* Evidence-path overlap ``P_i = 1/|S_gt| · Σ_{s ∈ S_gt} F1(retrieved(τ_i), s)`` — token F1
  (SQuAD normalization) against each gold evidence passage s. ``retrieved(τ_i)`` is read per
  ``gta.path_router.overlap``: ``best_passage`` (default) takes, for each s, the best F1 of
  any one passage τ_i was shown — "did the retrieved evidence cover s" (Fig. 1, §3.2), equal
  to the bag reading when exactly the gold passages are retrieved and never lowered by
  retrieving more; ``bag`` is the literal reading (one bag of tokens of everything shown),
  whose precision falls with every extra passage (a rollout that found both gold passages
  plus 10 others gets P ≈ 0.05 < θ_P).
* Route ∈ {C↑P↑, C↑P↓, C↓P↑, C↓P↓} from (C_i, P_i ≥ θ_P); the trainer multiplies the
  group-normalized GRPO advantage by ``w_route`` (``Ã_i = w_route · Â_i``).
* Reward ``R(τ_i) = r_a + α·r_p + r_s`` with r_a = answer F1, r_p = P_i and r_s the
  shaping terms (exploration bonus, lazy / timeout / redundancy penalties).
* ``distill_select`` = 1 for evidence-poor trajectories (P_i < θ_P): only they get the
  gold-evidence teacher's top-K KL (§3.3); 1 for all under the "uniform KL" ablation.

Works on Stage-I synthetic data (gold evidence = the target documents' texts) and on
natural QA with gold supporting passages. Without any gold evidence (e.g. NQ rows with
no support texts) P is undefined: such trajectories route on C alone (P counted as ↑),
get r_p = 0 and are never selected for the teacher (it would have nothing to add).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import Any

from gta_verl.data.schema import (
    RI_ACC,
    RI_C,
    RI_DISTILL_SELECT,
    RI_HAS_GOLD_EVIDENCE,
    RI_P,
    RI_ROUTE,
    RI_ROUTE_WEIGHT,
)
from gta_verl.rewards.qa import exact_match, f1, normalize_answer
from gta_verl.strict_config import StrictConfig, node_at

__all__ = [
    "KL_SCHEDULES",
    "OVERLAPS",
    "ROUTE_NAMES",
    "EXPLORATION_RULES",
    "LAZY_RULES",
    "REDUNDANCY_RULES",
    "ROUTINGS",
    "PathRouterConfig",
    "PathRouterKLConfig",
    "PathRouterReward",
    "Route",
    "correctness",
    "covered_repeats",
    "path_overlap",
    "path_router_config_from_trainer",
    "path_router_reward",
    "route",
    "route_weight",
    "shaping_reward",
]

ROUTINGS = ("2d", "answer_only", "path_only")
#: When r_e is paid: ``searched`` (gta-verl's default: >= 1 search and a non-empty answer) or
#: ``multi_turn_correct`` (Table 5: "multi-turn retrieval on correctly answered questions": >= 2 searches
#: and C = 1).
EXPLORATION_RULES = ("searched", "multi_turn_correct")
#: When r_l is paid: ``no_search`` (default: the answer action with no search) or
#: ``single_search_low_coverage`` (Table 5: "single-turn stops with insufficient evidence coverage": the
#: answer action after <= 1 search while P < θ_P; a row without gold evidence, whose coverage is unknown,
#: only when there was no search).
LAZY_RULES = ("no_search", "single_search_low_coverage")
#: What r_d is paid for: ``repeated_query`` (default: each repeated normalized query) or ``covered_evidence``
#: (Table 5: "re-retrieving covered evidence": each search whose shown documents include a target document
#: already shown by an earlier search and no target document not shown before; see :func:`covered_repeats`).
REDUNDANCY_RULES = ("repeated_query", "covered_evidence")
OVERLAPS = ("best_passage", "bag")
BASE_REWARDS = ("path_router", "trajectory_guided")
KL_SCHEDULES = ("linear", "cosine", "constant")


class Route(IntEnum):
    """The four PathRouter trajectory categories (ids are logged as ``route``)."""

    C_UP_P_UP = 0  # correct and evidence-rich: faithful success
    C_UP_P_DOWN = 1  # correct but evidence-poor: shortcut / parametric memory
    C_DOWN_P_UP = 2  # wrong but evidence-rich: evidence-seeking failure
    C_DOWN_P_DOWN = 3  # wrong and evidence-poor: joint failure


#: Metric-friendly names, indexed by ``Route`` value (``path_router/route_share/<name>``).
ROUTE_NAMES = ("C+P+", "C+P-", "C-P+", "C-P-")


@dataclass(frozen=True)
class PathRouterKLConfig(StrictConfig):
    """Selective gold-evidence teacher KL (§3.3) settings.

    Attributes:
        enabled: Add the teacher KL term at all (False = "w/o TKL" ablation). Default True.
            verl's ``distillation.enabled`` must match (the recipes set both from one knob).
        selective: Only evidence-poor trajectories (P < θ_P) get the KL (the paper's design,
            Table 7). False = "uniform KL" ablation: every trajectory is selected.
        topk: K_vocab, the teacher's top-K ids kept per position; must equal verl's
            ``distillation.distillation_loss.topk``. Default 32 (verl's OPD default; the
            paper's Table 5, as transcribed in a public digest, gives 128: the paper preset).
        lambda_max: λ after warmup, the KL coefficient. Default 0.1: the KL of a same-size
            frozen teacher on reasoning/query tokens is O(0.1–1) nats while GRPO's
            surrogate is O(|Â|)≈1, so 0.1 keeps the KL a guide rather than the objective
            (the paper reports constant-λ over-exploration).
        schedule: "linear" or "cosine" warmup from 0 to ``lambda_max`` over
            ``warmup_steps``, or "constant" (λ = lambda_max from step 0; ablation).
            Default "linear" (Table 4: warmup beats constant).
        warmup_steps: Steps of the warmup. Default 20: the route shares settle within the
            first ~20 steps (paper Fig. 5), after which the KL set is meaningful.
    """

    WHERE = "gta.path_router.kl"

    enabled: bool = True
    selective: bool = True
    topk: int = 32
    lambda_max: float = 0.1
    schedule: str = "linear"
    warmup_steps: int = 20

    def __post_init__(self) -> None:
        if self.schedule not in KL_SCHEDULES:
            raise ValueError(f"gta.path_router.kl.schedule={self.schedule!r}; use one of {KL_SCHEDULES}")
        if self.topk < 1:
            raise ValueError(f"gta.path_router.kl.topk={self.topk} must be >= 1")
        if self.lambda_max < 0:
            raise ValueError(f"gta.path_router.kl.lambda_max={self.lambda_max} must be >= 0")
        if self.warmup_steps < 0:
            raise ValueError(f"gta.path_router.kl.warmup_steps={self.warmup_steps} must be >= 0")


@dataclass(frozen=True)
class PathRouterConfig(StrictConfig):
    """PathRouter settings (the ``gta.path_router`` node of the recipe YAML).

    Attributes:
        theta_c: θ_C, answer-F1 threshold for C=1 (paper: 0.5).
        theta_p: θ_P, evidence-overlap threshold for P↑ and for KL selection. Our default
            0.4 goes with ``overlap=best_passage``: on bundled-KB retrieval outputs
            (``benchmarks/retrieval/p_distribution.py``, docs/benchmarks/p_distribution.md) rollouts shown no
            gold passage have best-passage P in [0.09, 0.30] and rollouts shown all of it
            P ≥ 0.585, so the paper's 0.1 would route 99% of gold-missed rollouts P↑. The
            paper's 0.1 (stable in [0.05, 0.2], Table 8) is for its own P; use it with
            ``overlap=bag`` (there 0.1 puts 19% of gold-missed rollouts P↑, 99% of gold-found).
        overlap: how ``retrieved(τ_i)`` enters P: ``best_passage`` (default: per gold
            passage, the best F1 of any one shown passage) or ``bag`` (the literal reading:
            one bag of tokens of all shown passages; falls as a rollout searches more).
        alpha: α, weight of r_p = P in R (Table 5, as transcribed in a public digest: 0.5, the
            paper preset ``gta_verl/config/preset/path_router_paper.yaml``; our 1.0 puts
            evidence overlap on the same scale as answer F1).
        exploration_bonus: r_e, added once when the trajectory searched at least once and
            answered. Default 0.1 — small next to r_a ∈ [0, 1], and paid once so that
            spamming searches earns nothing.
        lazy_penalty: r_l, added when the agent answered without any search (parametric
            shortcut). Default -0.2: a correct lazy answer (r_a=1, P≈0) still beats a wrong
            answer, but loses to a correct evidence-backed one.
        timeout_penalty: r_o, added when the action budget was exhausted (or the response
            truncated) without an answer. Default -0.2, so running out of budget is worse
            than answering wrongly after searching.
        redundancy_penalty: r_d per repeated (normalized) search query. Default -0.05.
        redundancy_max_count: at most this many repeats are penalized (caps r_d at
            -0.2 by default, so one loop cannot dominate R).
        exploration_rule: when r_e is paid (:data:`EXPLORATION_RULES`). Default ``searched``;
            the paper preset's ``multi_turn_correct`` pays it for >= 2 searches and C = 1.
        lazy_rule: when r_l is paid (:data:`LAZY_RULES`). Default ``no_search``; the paper
            preset's ``single_search_low_coverage`` pays it for an answer after <= 1 search with P < θ_P.
        redundancy_rule: what r_d counts (:data:`REDUNDANCY_RULES`). Default ``repeated_query``;
            the paper preset's ``covered_evidence`` counts searches that re-show covered target documents
            and show no new one.
        no_answer_reward: R_0, the paper's base reward (Table 5: -1), read as the reward of a trajectory
            that never took the answer action: R = R_0 + r_s there instead of r_a + α·r_p + r_s. Default
            None: no base reward (such a trajectory gets α·P + r_s, as any other).
        route_weights: w_route for (C↑P↑, C↑P↓, C↓P↑, C↓P↓). Default (1.0, 0.5, 0.5, 1.0):
            halve the reinforcement of shortcut successes and halve the penalty on
            evidence-seeking failures; keep faithful successes and joint failures as GRPO.
        route_scaling: False = "no route scaling" ablation (every weight 1.0, plain GRPO).
        routing: "2d" (paper), or the 1-D ablations "answer_only" (P ignored: every
            trajectory counts as P↑, so the route is C↑P↑ or C↓P↑) and "path_only"
            (C ignored: C↑P↑ or C↑P↓).
        base_reward: which scalar R the ``path_router`` manager returns: "path_router"
            (R = r_a + α·r_p + r_s, the paper) or "trajectory_guided" (GTA-RAG's R_traj,
            eqs 15–18, from ``gta.reward`` — the GTA + PathRouter combination). Routing,
            route weights and KL selection are the same either way.
        kl: :class:`PathRouterKLConfig`.
    """

    WHERE = "gta.path_router"

    theta_c: float = 0.5
    theta_p: float = 0.4
    overlap: str = "best_passage"
    alpha: float = 1.0
    exploration_bonus: float = 0.1
    lazy_penalty: float = -0.2
    timeout_penalty: float = -0.2
    redundancy_penalty: float = -0.05
    redundancy_max_count: int = 4
    route_weights: tuple[float, float, float, float] = (1.0, 0.5, 0.5, 1.0)
    route_scaling: bool = True
    routing: str = "2d"
    base_reward: str = "path_router"
    exploration_rule: str = "searched"
    lazy_rule: str = "no_search"
    redundancy_rule: str = "repeated_query"
    no_answer_reward: float | None = None
    kl: PathRouterKLConfig = field(default_factory=PathRouterKLConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "route_weights", _checked_route_weights(self.route_weights))
        if isinstance(self.kl, Mapping):
            object.__setattr__(self, "kl", PathRouterKLConfig(**dict(self.kl)))
        if not 0.0 <= self.theta_c <= 1.0:
            raise ValueError(f"gta.path_router.theta_c={self.theta_c} must be in [0, 1]")
        if not 0.0 <= self.theta_p <= 1.0:
            raise ValueError(f"gta.path_router.theta_p={self.theta_p} must be in [0, 1]")
        if self.alpha < 0:
            raise ValueError(f"gta.path_router.alpha={self.alpha} must be >= 0")
        for name, value, known in (
            ("overlap", self.overlap, OVERLAPS),
            ("routing", self.routing, ROUTINGS),
            ("base_reward", self.base_reward, BASE_REWARDS),
            ("exploration_rule", self.exploration_rule, EXPLORATION_RULES),
            ("lazy_rule", self.lazy_rule, LAZY_RULES),
            ("redundancy_rule", self.redundancy_rule, REDUNDANCY_RULES),
        ):
            if value not in known:
                raise ValueError(f"gta.path_router.{name}={value!r}; use one of {known}")
        if self.no_answer_reward is not None and not math.isfinite(float(self.no_answer_reward)):
            raise ValueError(
                f"gta.path_router.no_answer_reward={self.no_answer_reward} must be finite or null"
            )
        if self.redundancy_max_count < 0:
            raise ValueError(f"gta.path_router.redundancy_max_count={self.redundancy_max_count} must be >= 0")

    @classmethod
    def _from_checked(cls, values: dict[str, Any], where: str) -> PathRouterConfig:
        if values.get("route_weights") is not None:
            values["route_weights"] = list(values["route_weights"])
        if values.get("kl") is not None:
            values["kl"] = PathRouterKLConfig.from_mapping(values["kl"], where=f"{where}.kl")
        return cls(**values)

    @property
    def effective_weights(self) -> tuple[float, float, float, float]:
        """``route_weights``, or all ones under the "no route scaling" ablation."""
        return self.route_weights if self.route_scaling else (1.0, 1.0, 1.0, 1.0)


def _checked_route_weights(route_weights: Any) -> tuple[float, float, float, float]:
    """``route_weights`` as 4 floats, each finite and >= 0; ValueError naming the setting otherwise."""
    weights = tuple(float(w) for w in route_weights)
    if len(weights) != 4:
        raise ValueError(
            f"gta.path_router.route_weights needs 4 values (C+P+, C+P-, C-P+, C-P-), got {weights}"
        )
    if not all(math.isfinite(w) and w >= 0 for w in weights):
        raise ValueError(f"gta.path_router.route_weights must be finite and >= 0, got {weights}")
    return (weights[0], weights[1], weights[2], weights[3])


def path_router_config_from_trainer(config: Any) -> PathRouterConfig:
    """``PathRouterConfig`` from the full trainer config's ``gta.path_router`` node.

    Accepts an OmegaConf ``DictConfig`` or plain dicts; a missing node gives the defaults.
    """
    return PathRouterConfig.from_mapping(node_at(config, "gta", "path_router"))


def correctness(prediction: str | None, golds: Iterable[str] | str, theta_c: float = 0.5) -> int:
    """C_i = 1[EM(a_i, a*) > 0 ∨ F1(a_i, a*) ≥ θ_C] (§3.2). A missing answer is wrong.

    Examples:
        >>> correctness("Paris", ["paris"]), correctness("Paris France", ["Paris"], 0.5)
        (1, 1)
        >>> correctness("the city of Paris France", ["Paris"], 0.5)
        0
    """
    golds = [golds] if isinstance(golds, str) else list(golds)
    return int(exact_match(prediction, golds) > 0 or f1(prediction, golds) >= theta_c)


def _bag(text: str) -> Counter[str]:
    return Counter(normalize_answer(text).split())


def _bag_f1(pred: Counter[str], gold: Counter[str]) -> float:
    num_same = sum((pred & gold).values())
    if num_same == 0:
        return 0.0
    precision = num_same / sum(pred.values())
    recall = num_same / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def path_overlap(
    retrieved_texts: Sequence[str], gold_texts: Sequence[str], overlap: str = "best_passage"
) -> float:
    """P_i = mean over gold passages s of token-F1(retrieved evidence of τ_i, s) (§3.2).

    ``overlap="best_passage"`` (default): for each s the best F1 of any one retrieved
    passage, ``P = 1/|S| Σ_s max_r F1(r, s)`` — adding passages can only raise it.
    ``overlap="bag"``: F1 of one bag of tokens of the *distinct* retrieved passages
    against each s (a passage seen twice counts once) — every extra passage lowers its
    precision. The two agree when the only passage retrieved is the only gold passage;
    with two gold passages retrieved exactly, ``bag`` already scores each below 1. Gold
    passages with no tokens after normalization are ignored. Returns 0.0 when nothing was
    retrieved or there is no gold evidence — use ``has_gold`` to tell them apart.

    Examples:
        >>> path_overlap(["x y z w"], ["x y"])  # F1 = 2·(2/4)·(2/2)/(2/4+2/2) = 2/3
        0.6666666666666666
        >>> path_overlap(["x y", "z w"], ["x y", "z w"])  # (1 + 1) / 2
        1.0
        >>> path_overlap(["x y", "z w"], ["x y", "z w"], overlap="bag")  # (2/3 + 2/3) / 2
        0.6666666666666666
    """
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap={overlap!r}; use one of {OVERLAPS}")
    gold = [_bag(g) for g in gold_texts if str(g).strip()]
    gold = [g for g in gold if g]
    if not gold:
        return 0.0
    distinct = list(dict.fromkeys(str(t) for t in retrieved_texts))
    if overlap == "bag":
        pred = _bag(" ".join(distinct))
        return sum(_bag_f1(pred, g) for g in gold) / len(gold) if pred else 0.0
    bags = [b for b in (_bag(t) for t in distinct) if b]
    if not bags:
        return 0.0
    return sum(max(_bag_f1(b, g) for b in bags) for g in gold) / len(gold)


def route(c: int, p: float, cfg: PathRouterConfig, has_gold: bool = True) -> Route:
    """The (effective) route of a trajectory with correctness ``c`` and overlap ``p``.

    "answer_only" routing, or a row without gold evidence, counts every trajectory as P↑;
    "path_only" counts every trajectory as C↑.
    """
    p_up = (p >= cfg.theta_p) or cfg.routing == "answer_only" or not has_gold
    c_up = bool(c) or cfg.routing == "path_only"
    if c_up:
        return Route.C_UP_P_UP if p_up else Route.C_UP_P_DOWN
    return Route.C_DOWN_P_UP if p_up else Route.C_DOWN_P_DOWN


def route_weight(r: Route | int, cfg: PathRouterConfig) -> float:
    """w_route for route ``r`` (1.0 under the "no route scaling" ablation)."""
    return float(cfg.effective_weights[int(r)])


def _count_repeats(queries: Sequence[str]) -> int:
    seen: set[str] = set()
    repeats = 0
    for q in queries:
        key = normalize_answer(str(q))
        if key in seen:
            repeats += 1
        seen.add(key)
    return repeats


def covered_repeats(turn_doc_ids: Sequence[Sequence[str]], target_doc_ids: Sequence[str]) -> int:
    """Searches that re-retrieve covered evidence (Table 5's r_d, the paper preset's ``covered_evidence``).

    Search t, showing documents D_t, re-retrieves covered evidence when it shows a target document that an
    earlier search already showed and no target document that none did:
    ``D_t ∩ S ≠ ∅``, ``D_t ∩ S ⊆ C_{t−1}`` with ``C_{t−1} = S ∩ (D_1 ∪ … ∪ D_{t−1})``. A search that finds
    nothing of S is not counted here (it covers nothing, old or new: eq 17's miss is its own term). Without
    target ids (S = ∅) nothing counts.

    Examples:
        >>> covered_repeats([["a", "x"], ["a"], ["a", "b"], ["b", "y"], ["z"]], ["a", "b"])  # turns 2 and 4
        2
    """
    targets = {str(t) for t in target_doc_ids}
    covered: set[str] = set()
    count = 0
    for shown in turn_doc_ids:
        hits = {str(d) for d in shown} & targets
        if hits and hits <= covered:
            count += 1
        covered |= hits
    return count


def shaping_reward(
    num_searches: int,
    answered: bool,
    budget_exhausted: bool,
    queries: Sequence[str],
    cfg: PathRouterConfig,
    answer_action: bool | None = None,
    correct: bool = False,
    evidence_poor: bool = False,
    covered_repeat_count: int = 0,
) -> float:
    """r_s = r_e + r_l + r_o + r_d (§3.4; values and rules in :class:`PathRouterConfig`).

    * exploration bonus r_e: ``searched`` — searched at least once **and** gave a non-empty answer;
      ``multi_turn_correct`` — searched at least twice and the answer is correct (C = 1);
    * lazy penalty r_l: ``no_search`` — took the answer action (empty or not) with no search;
      ``single_search_low_coverage`` — took the answer action after at most one search while the evidence
      was poor (``evidence_poor``: P < θ_P with gold evidence; without gold evidence only with no search);
    * timeout penalty r_o: budget exhausted / truncated without taking the answer action;
    * redundancy penalty r_d: ``repeated_query`` — per repeated normalized query; ``covered_evidence`` — per
      search that re-retrieved covered evidence (``covered_repeat_count``, :func:`covered_repeats`); capped at
      ``redundancy_max_count``.

    The empty answer ``<answer></answer>`` is an answer action with nothing in it: it ends the episode, so
    it takes the lazy penalty without a search, but earns no exploration bonus — it never pays better than a
    wrong guess (docs/path_router.md, "The empty answer").

    Args:
        answered: A non-empty answer was given.
        answer_action: The answer action was taken (default: ``answered``).
        correct: C = 1 (read by ``multi_turn_correct``).
        evidence_poor: the evidence coverage is insufficient (read by ``single_search_low_coverage``).
        covered_repeat_count: searches that re-retrieved covered evidence (read by ``covered_evidence``).

    Examples:
        >>> cfg = PathRouterConfig()
        >>> round(shaping_reward(2, True, False, ["a", "A."], cfg), 4)  # 0.1 - 0.05
        0.05
        >>> shaping_reward(0, True, False, [], cfg)
        -0.2
        >>> shaping_reward(0, False, False, [], cfg, answer_action=True)  # empty answer, no search
        -0.2
    """
    acted = answered if answer_action is None else bool(answer_action) or answered
    r = 0.0
    if cfg.exploration_rule == "multi_turn_correct":
        explored = answered and correct and num_searches >= 2
    else:
        explored = answered and num_searches > 0
    if explored:
        r += cfg.exploration_bonus
    if cfg.lazy_rule == "single_search_low_coverage":
        lazy = acted and (num_searches == 0 or (num_searches <= 1 and evidence_poor))
    else:
        lazy = acted and num_searches == 0
    if lazy:
        r += cfg.lazy_penalty
    if budget_exhausted and not acted:
        r += cfg.timeout_penalty
    repeats = covered_repeat_count if cfg.redundancy_rule == "covered_evidence" else _count_repeats(queries)
    r += cfg.redundancy_penalty * min(repeats, cfg.redundancy_max_count)
    return r


@dataclass(frozen=True)
class PathRouterReward:
    """Everything the ``path_router`` manager reports for one trajectory."""

    score: float  # R = r_a + α·r_p + r_s
    r_a: float  # answer F1
    r_p: float  # P (0 without gold evidence)
    r_s: float
    em: float
    f1: float
    c: int
    p: float
    route: Route
    route_weight: float
    distill_select: float
    num_searches: int
    has_gold: bool

    def extra_info(self) -> dict[str, float | int]:
        """Scalar ``reward_extra_info`` (verl stacks and averages these; keep them numeric)."""
        d = asdict(self)
        return {
            RI_ACC: float(self.em),
            "f1": float(self.f1),
            RI_C: int(self.c),
            RI_P: float(self.p),
            RI_ROUTE: int(self.route),
            RI_ROUTE_WEIGHT: float(self.route_weight),
            RI_DISTILL_SELECT: float(self.distill_select),
            "num_searches": int(self.num_searches),
            RI_HAS_GOLD_EVIDENCE: int(self.has_gold),
            "r_a": float(d["r_a"]),
            "r_p": float(d["r_p"]),
            "r_s": float(d["r_s"]),
        }


def path_router_reward(
    prediction: str | None,
    golds: Sequence[str],
    retrieved_texts: Sequence[str],
    gold_texts: Sequence[str],
    queries: Sequence[str] = (),
    num_searches: int | None = None,
    budget_exhausted: bool = False,
    cfg: PathRouterConfig | None = None,
    turn_doc_ids: Sequence[Sequence[str]] = (),
    target_doc_ids: Sequence[str] = (),
) -> PathRouterReward:
    """R(τ_i) = r_a + α·r_p + r_s plus the routing diagnostics (§3.2, §3.4).

    With ``no_answer_reward`` = R_0 set (the paper preset: −1), a trajectory that never took the answer
    action gets R = R_0 + r_s instead.

    Args:
        prediction: the extracted final answer, or None when the agent never answered.
        golds: gold answer aliases a*.
        retrieved_texts: every passage text τ_i was shown, all turns, in order (the agent
            loop records only passages shown, as shown: ``gta/turn_texts``).
        gold_texts: gold evidence passages S_gt (Stage-I: target documents' texts).
        queries: the search queries issued (for the redundancy penalty).
        num_searches: number of searches; defaults to ``len(queries)``.
        budget_exhausted: the action budget / response length ran out.
        cfg: :class:`PathRouterConfig` (defaults when None).
        turn_doc_ids: the documents each search showed (``covered_evidence`` redundancy).
        target_doc_ids: S(x), the row's target documents (``covered_evidence`` redundancy).
    """
    cfg = cfg or PathRouterConfig()
    n_search = len(queries) if num_searches is None else int(num_searches)
    answered = prediction is not None and bool(str(prediction).strip())
    em, f1_score = exact_match(prediction, golds), f1(prediction, golds)
    c = int(em > 0 or f1_score >= cfg.theta_c)
    has_gold = any(str(g).strip() for g in gold_texts)
    p = path_overlap(retrieved_texts, gold_texts, cfg.overlap) if has_gold else 0.0
    evidence_poor = has_gold and p < cfg.theta_p
    covered = (
        covered_repeats(turn_doc_ids, target_doc_ids) if cfg.redundancy_rule == "covered_evidence" else 0
    )
    r_s = shaping_reward(
        n_search,
        answered,
        budget_exhausted,
        queries,
        cfg,
        answer_action=prediction is not None,
        correct=bool(c),
        evidence_poor=evidence_poor,
        covered_repeat_count=covered,
    )
    r = route(c, p, cfg, has_gold=has_gold)
    select = cfg.kl.enabled and has_gold and (evidence_poor or not cfg.kl.selective)
    if cfg.no_answer_reward is not None and prediction is None:
        score = float(cfg.no_answer_reward) + r_s
    else:
        score = f1_score + cfg.alpha * p + r_s
    return PathRouterReward(
        score=score,
        r_a=f1_score,
        r_p=p,
        r_s=r_s,
        em=em,
        f1=f1_score,
        c=c,
        p=p,
        route=r,
        route_weight=route_weight(r, cfg),
        distill_select=1.0 if select else 0.0,
        num_searches=n_search,
        has_gold=has_gold,
    )
