"""Evaluation metrics: pure functions over :class:`~gta_verl.data.types.RolloutRecord` s.

Notation (GTA-RAG §4 eqs 22–23, PathRouter §4.1):
    * x: a question; one record = one rollout τ of the policy on x (``n_samples``
      rollouts per question are pooled, i.e. every metric is an avg@n).
    * S(x): the *set* of gold/target documents (``record.target_doc_ids``,
      duplicates removed).
    * R(q_t): the ids the retriever returned for the t-th search (``turn_doc_ids[t]``).
    * C(x) = ∪_t R(q_t): every document retrieved over the whole trajectory.
    * C_t = S(x) ∩ ∪_{u<t} R(q_u): target documents retrieved before turn t.

Undefined values: a metric that needs S(x) (coverage, zero-target turns, SF-F1)
is NaN for a record without gold documents, and such records are *omitted*
from that metric's aggregate (its ``n_*`` count says how many were used). PathRouter's
P needs gold evidence *texts*; without them P, the route and UAR membership are
undefined the same way. An aggregate over zero defined records is NaN.
A rollout that never answered (``answer is None``) scores EM = F1 = 0.

Fractions are returned in [0, 1]; reports multiply by 100 as the papers do.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gta_verl.data.types import RolloutRecord
from gta_verl.rewards import path_router as pr
from gta_verl.rewards.qa import exact_match, f1
from gta_verl.rewards.trajectory import zero_target_queries

NAN = math.nan

#: Keys of :func:`aggregate` in report order.
SUMMARY_KEYS: tuple[str, ...] = (
    "n",
    "n_questions",
    "em",
    "f1",
    "answered",
    "n_with_targets",
    "target_doc_cov",
    "complete_traj_cov",
    "zero_target_turns",
    "zero_target_turns_per_q",
    "zero_target_queries",
    "zero_target_queries_per_q",
    "search_turns",
    "sf_f1",
    "n_with_evidence",
    "n_correct",
    "uar",
    "retrieval_errors",
    "retrieval_error_rate",
    "invalid_actions",
    "response_tokens",
)


# ---------------------------------------------------------------- per record
def retrieved_docs(record: RolloutRecord) -> set[str]:
    """C(x) = ∪_t R(q_t): every document id retrieved in the trajectory (duplicates collapse)."""
    return {d for turn in record.turn_doc_ids for d in turn}


def target_hits(record: RolloutRecord) -> tuple[int, int]:
    """Return (|C(x) ∩ S(x)|, |S(x)|) — the numerator and denominator of TargetDocCov."""
    targets = set(record.target_doc_ids)
    return len(retrieved_docs(record) & targets), len(targets)


def zero_target_turns(turn_doc_ids: Sequence[Sequence[str]], target_doc_ids: Iterable[str]) -> float:
    """Number of search turns that retrieve no previously unseen target document.

    Turn t is zero-target iff Δ_t = (R(q_t) ∩ S) \\ C_t = ∅ (GTA-RAG eq. 15's Δ_t),
    so a failed search (no hits), a repeat of an already-found target, and a
    search returning only non-targets all count.

    Returns:
        The count as a float, or NaN when S is empty (undefined without targets).
    """
    targets = set(target_doc_ids)
    if not targets:
        return NAN
    seen: set[str] = set()
    zero = 0
    for ids in turn_doc_ids:
        new = (set(ids) & targets) - seen
        if not new:
            zero += 1
        seen |= new
    return float(zero)


def zero_target_queries_of(record: RolloutRecord) -> float:
    """Zero-target queries of a rollout (:func:`gta_verl.rewards.trajectory.zero_target_queries`).

    Reads ``turn_query_doc_ids`` (several queries per search); without it every turn is one query,
    so the count is :func:`zero_target_turns` (GTA-RAG Table 3's). NaN when S is empty.
    """
    if not record.target_doc_ids:
        return NAN
    per_query = record.turn_query_doc_ids or tuple((ids,) for ids in record.turn_doc_ids)
    return float(zero_target_queries(per_query, record.target_doc_ids))


def supporting_doc_f1(retrieved: Iterable[str], gold: Iterable[str]) -> float:
    """SF-F1: document-level F1 of the retrieved set C against the gold set S.

    precision = |C∩S| / |C|, recall = |C∩S| / |S|, SF-F1 = 2·p·r / (p + r)
    (0 when C∩S = ∅, in particular when nothing was retrieved).

    Returns:
        SF-F1 in [0, 1], or NaN when S is empty.
    """
    c, s = set(retrieved), set(gold)
    if not s:
        return NAN
    hit = len(c & s)
    if hit == 0:
        return 0.0
    p, r = hit / len(c), hit / len(s)
    return 2 * p * r / (p + r)


@dataclass(frozen=True)
class RecordMetrics:
    """Every per-rollout quantity the aggregates need (NaN = undefined, see module doc)."""

    qid: str
    data_source: str
    hops: int
    em: float
    """EM(ŷ, y*) ∈ {0, 1}, max over aliases (the reward's function)."""
    f1: float
    """Token F1(ŷ, y*) ∈ [0, 1], max over aliases."""
    answered: bool
    correct: bool
    """PathRouter C_i = 1[EM > 0 ∨ F1 ≥ θ_C]."""
    path_overlap: float
    """PathRouter P_i = (1/|S_gt|) Σ_s F1(retrieved(τ), s); NaN without gold texts."""
    route: str
    """PathRouter route name (``C+P+``…, :data:`~gta_verl.rewards.path_router.ROUTE_NAMES`),
    ``""`` when P is undefined (no gold evidence texts: evaluation omits such rollouts
    from routes and UAR instead of counting them P↑ as training does)."""
    n_targets: int
    n_targets_hit: int
    complete_chain: float
    """1[S ⊆ C] as 0/1, NaN when S is empty."""
    zero_target_turns: float
    zero_target_queries: float
    """Queries (several per search) that showed no unseen target; = ``zero_target_turns`` with one
    query per search. NaN when S is empty."""
    sf_f1: float
    num_searches: int
    retrieval_errors: int
    invalid_actions: int
    response_tokens: int


def score_record(record: RolloutRecord, config: pr.PathRouterConfig | None = None) -> RecordMetrics:
    """Compute :class:`RecordMetrics` for one rollout.

    Args:
        record: The rollout.
        config: PathRouter θ_C, θ_P and P reading (defaults: 0.5, 0.4, ``best_passage``,
            as in training; :class:`~gta_verl.rewards.path_router.PathRouterConfig`).
    """
    cfg = config or pr.PathRouterConfig()
    answered = record.answer is not None and bool(str(record.answer).strip())
    em = float(exact_match(record.answer, record.gold_answers))  # None/blank -> 0
    f1_score = float(f1(record.answer, record.gold_answers))
    correct = bool(pr.correctness(record.answer, record.gold_answers, cfg.theta_c))
    if any(str(t).strip() for t in record.gold_texts):
        p = float(pr.path_overlap(record.retrieved_texts, record.gold_texts, cfg.overlap))
        route = pr.ROUTE_NAMES[int(pr.route(int(correct), p, cfg))]
    else:
        p, route = NAN, ""
    hit, n_targets = target_hits(record)
    return RecordMetrics(
        qid=record.qid or record.question,  # questions without ids are still counted once
        data_source=record.data_source,
        hops=int(record.hops),
        em=em,
        f1=f1_score,
        answered=answered,
        correct=correct,
        path_overlap=p,
        route=route,
        n_targets=n_targets,
        n_targets_hit=hit,
        complete_chain=float(hit == n_targets) if n_targets else NAN,
        zero_target_turns=zero_target_turns(record.turn_doc_ids, record.target_doc_ids),
        zero_target_queries=zero_target_queries_of(record),
        sf_f1=supporting_doc_f1(retrieved_docs(record), record.target_doc_ids),
        num_searches=record.num_searches,
        retrieval_errors=int(record.retrieval_errors),
        invalid_actions=int(record.invalid_actions),
        response_tokens=int(record.response_tokens),
    )


# ---------------------------------------------------------------- aggregates
def _mean(values: Iterable[float]) -> float:
    """Mean over the defined (non-NaN) values; NaN if there are none."""
    vals = [v for v in values if not math.isnan(v)]
    return sum(vals) / len(vals) if vals else NAN


def target_doc_coverage(metrics: Sequence[RecordMetrics]) -> float:
    """TargetDocCov = Σ_x |C(x) ∩ S(x)| / Σ_x |S(x)| (GTA-RAG eq. 22), over records with S ≠ ∅."""
    den = sum(m.n_targets for m in metrics)
    return sum(m.n_targets_hit for m in metrics) / den if den else NAN


def complete_trajectory_coverage(metrics: Sequence[RecordMetrics]) -> float:
    """CompleteTrajCov = mean_x 1[S(x) ⊆ C(x)] (GTA-RAG eq. 23), over records with S ≠ ∅."""
    return _mean(m.complete_chain for m in metrics)


def unsupported_answer_rate(
    metrics: Sequence[RecordMetrics], config: pr.PathRouterConfig | None = None
) -> float:
    """UAR = |{i : C_i = 1 ∧ P_i < θ_P}| / |{i : C_i = 1}| (PathRouter §4.1, lower is better).

    Only records whose P is defined (gold texts present) take part; NaN if no
    such record answered correctly.
    """
    cfg = config or pr.PathRouterConfig()
    correct = [m for m in metrics if m.correct and not math.isnan(m.path_overlap)]
    if not correct:
        return NAN
    return sum(m.path_overlap < cfg.theta_p for m in correct) / len(correct)


def route_distribution(metrics: Sequence[RecordMetrics]) -> dict[str, float]:
    """Share of each PathRouter route among records with a defined route: n_route / Σ n.

    Every route of :data:`gta_verl.rewards.path_router.ROUTE_NAMES` (``C+P+``, ``C+P-``,
    ``C-P+``, ``C-P-``) appears (0.0 when unused); empty dict if no record has a route.
    """
    routed = [m.route for m in metrics if m.route]
    if not routed:
        return {}
    return {name: routed.count(name) / len(routed) for name in pr.ROUTE_NAMES}


def aggregate(
    metrics: Sequence[RecordMetrics], config: pr.PathRouterConfig | None = None
) -> dict[str, float]:
    """Pool rollouts into one summary (keys :data:`SUMMARY_KEYS` + ``route/<name>``).

    ``em``, ``f1``, ``answered``, ``sf_f1``, ``search_turns`` ("Turns"), ``invalid_actions``
    and ``response_tokens`` are means over rollouts (SF-F1 over rollouts with S ≠ ∅);
    ``zero_target_turns``, ``zero_target_queries`` and ``retrieval_errors`` are totals (Table 3
    reports the total count; with one query per search the two zero-target counts are equal);
    ``retrieval_error_rate`` = Σ errors / Σ searches.
    """
    n = len(metrics)
    searches = sum(m.num_searches for m in metrics)
    with_targets = [m for m in metrics if m.n_targets]
    zt = [m.zero_target_turns for m in with_targets]
    zq = [m.zero_target_queries for m in with_targets]
    out: dict[str, float] = {
        "n": float(n),
        "n_questions": float(len({(m.data_source, m.qid) for m in metrics})),
        "em": _mean(m.em for m in metrics),
        "f1": _mean(m.f1 for m in metrics),
        "answered": _mean(float(m.answered) for m in metrics),
        "n_with_targets": float(len(with_targets)),
        "target_doc_cov": target_doc_coverage(with_targets),
        "complete_traj_cov": complete_trajectory_coverage(with_targets),
        "zero_target_turns": float(sum(zt)) if zt else NAN,
        "zero_target_turns_per_q": _mean(zt),
        "zero_target_queries": float(sum(zq)) if zq else NAN,
        "zero_target_queries_per_q": _mean(zq),
        "search_turns": _mean(float(m.num_searches) for m in metrics),
        "sf_f1": _mean(m.sf_f1 for m in metrics),
        "n_with_evidence": float(sum(not math.isnan(m.path_overlap) for m in metrics)),
        "n_correct": float(sum(m.correct for m in metrics)),
        "uar": unsupported_answer_rate(metrics, config),
        "retrieval_errors": float(sum(m.retrieval_errors for m in metrics)),
        "retrieval_error_rate": sum(m.retrieval_errors for m in metrics) / searches if searches else NAN,
        "invalid_actions": _mean(float(m.invalid_actions) for m in metrics),
        "response_tokens": _mean(float(m.response_tokens) for m in metrics),
    }
    for name, share in route_distribution(metrics).items():
        out[f"route/{name}"] = share
    return out


def group_by(
    metrics: Sequence[RecordMetrics], key: Callable[[RecordMetrics], Hashable]
) -> dict[Hashable, list[RecordMetrics]]:
    """Split records by ``key`` (e.g. ``lambda m: m.data_source``), keys sorted."""
    groups: dict[Hashable, list[RecordMetrics]] = defaultdict(list)
    for m in metrics:
        groups[key(m)].append(m)
    return {k: groups[k] for k in sorted(groups, key=lambda k: (str(type(k)), k))}


def average_over_groups(summaries: Mapping[Hashable, Mapping[str, float]]) -> dict[str, float]:
    """Unweighted mean of per-group summaries: avg_k = (1/|D|) Σ_{d∈D} metric_k(d).

    The papers' "Average" column averages datasets, not questions, so a small
    dataset weighs as much as a large one. Per key, groups where the metric is
    undefined (NaN or absent) are skipped; counts (``n*``) and totals are summed.
    """
    keys: list[str] = []
    for s in summaries.values():
        keys += [k for k in s if k not in keys]
    summed = {
        "n",
        "n_questions",
        "n_with_targets",
        "n_with_evidence",
        "n_correct",
        "zero_target_turns",
        "zero_target_queries",
        "retrieval_errors",
    }
    out: dict[str, float] = {}
    for k in keys:
        vals = [float(s[k]) for s in summaries.values() if k in s and not math.isnan(float(s[k]))]
        if k in summed:
            out[k] = float(sum(vals)) if vals else NAN
        else:
            out[k] = sum(vals) / len(vals) if vals else NAN
    return out


@dataclass(frozen=True)
class EvalSummary:
    """All aggregates of one evaluation: per dataset, their unweighted average, per hop count, pooled."""

    per_dataset: dict[str, dict[str, float]]
    average: dict[str, float]
    per_hops: dict[int, dict[str, float]]
    overall: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        return {
            "per_dataset": self.per_dataset,
            "average": self.average,
            "per_hops": {str(k): v for k, v in self.per_hops.items()},
            "overall": self.overall,
        }


def summarize(metrics: Sequence[RecordMetrics], config: pr.PathRouterConfig | None = None) -> EvalSummary:
    """Aggregate per dataset, average datasets unweighted, and stratify by hop count (0 = unknown)."""
    by_dataset = group_by(metrics, lambda m: m.data_source or "unknown")
    per_dataset = {str(k): aggregate(v, config) for k, v in by_dataset.items()}
    per_hops = {int(k): aggregate(v, config) for k, v in group_by(metrics, lambda m: int(m.hops)).items()}
    return EvalSummary(
        per_dataset=per_dataset,
        average=average_over_groups(per_dataset),
        per_hops=per_hops,
        overall=aggregate(metrics, config),
    )
