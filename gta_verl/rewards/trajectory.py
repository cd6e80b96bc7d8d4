"""Trajectory-guided reward of GTA-RAG Stage I (eqs 15–19) and the Stage-II EM reward.

Pure Python on plain data: the per-search-turn retrieved doc ids R(q_t), the target set
S(x), the predicted answer and the gold aliases. The verl reward managers only translate a
``DataProto`` into these arguments (:mod:`gta_verl.rewards.scoring`).

Equations (GTA-RAG §3.5), for search turns t = 1..T:

* C_t = targets retrieved before turn t (C_1 = ∅); C_T below means after the last turn.
* Δ_t = (R(q_t) ∩ S(x)) \\ C_t                                                  (eq 15)
* r_search_t = +hit_per_doc · |Δ_t| if |Δ_t| > 0 else miss   (+0.25 / −0.10)    (eq 16)
* r_ans = wrong if EM(ŷ, y*) = 0 (no answer counts as wrong)            (−1)
          correct_incomplete if EM = 1 and C_T ⊉ S(x)                   (+1)
          correct_complete   if EM = 1 and C_T ⊇ S(x)                   (+2)      (eq 17)
* R_traj(τ) = Σ_t r_search_t + r_ans                                              (eq 18)
* Stage II: R_EM(τ) = 1[EM(ŷ, y*) = 1]                                           (eq 19)

``step_shaping`` (opt-in, :mod:`gta_verl.rewards.shaping`) replaces eq 16 with Φ = |C ∩ S(x)| / |S(x)|:
``potential`` = potential-based shaping (F_t = Φ(s_t) − Φ(s_{t−1}) per turn plus −Φ(s_T) on the
last transition, sum 0: the policies' order is unchanged); ``coverage_bonus`` = the same
differences with Φ(s_T) kept (F_t = γ·Φ(s_t) − Φ(s_{t−1}), sum Φ(s_T) at γ = 1: a terminal
coverage bonus spread over turns). Eqs 15 and 17 and every evidence metric are unchanged.

Empty target set S(x) = ∅ (natural QA without gold evidence): the evidence terms carry no
signal, so every search turn scores 0 (not the −0.10 miss, which would teach "never search"
on data that simply lacks labels), and the answer term keeps eq 17 with C_T ⊇ ∅ vacuously
true (+2 / −1). Within a GRPO group all rollouts share S(x), and a two-valued reward is
invariant to the affine choice after group normalization, so only the search-term choice
matters for training. Coverage is reported as 1.0 / complete (vacuous), zero-target turns
keep their literal definition (every search), and ``has_targets=False`` lets metrics
filter such samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from gta_verl.rewards.qa import exact_match, f1
from gta_verl.rewards.shaping import STEP_SHAPINGS, coverage_bonus_step_rewards, potential_shaping
from gta_verl.strict_config import StrictConfig

__all__ = [
    "TrajectoryReward",
    "TrajectoryRewardConfig",
    "em_reward",
    "trajectory_reward",
    "zero_target_queries",
]


@dataclass(frozen=True)
class TrajectoryRewardConfig(StrictConfig):
    """Reward values of eqs 16–17 (paper defaults) and the opt-in step-reward form."""

    WHERE = "gta.reward"

    hit_per_doc: float = 0.25
    """Reward per newly retrieved target document in a search turn (eq 16)."""
    miss: float = -0.10
    """Reward of a search turn that retrieves no new target document (eq 16)."""
    wrong: float = -1.0
    """Answer reward when EM = 0 or no answer was given (eq 17)."""
    correct_incomplete: float = 1.0
    """Answer reward when EM = 1 but some target document was never retrieved (eq 17)."""
    correct_complete: float = 2.0
    """Answer reward when EM = 1 and every target document was retrieved (eq 17)."""
    step_shaping: str = "additive"
    """Per-search-turn term: ``additive`` (eq 16, the paper), ``potential`` (Φ(s′) − Φ(s), Φ = 0 at
    the terminal state) or ``coverage_bonus`` (γ·Φ(s′) − Φ(s), Φ(s_T) kept)."""
    shaping_gamma: float = 1.0
    """γ ∈ (0, 1] of ``coverage_bonus`` (1 makes its sum the final coverage Φ(s_T)); ``potential``
    takes only 1 (the returns are undiscounted)."""

    def __post_init__(self) -> None:
        if self.step_shaping not in STEP_SHAPINGS:
            raise ValueError(f"gta.reward.step_shaping={self.step_shaping!r}; use one of {STEP_SHAPINGS}")
        for f in fields(self):
            if f.name == "step_shaping":
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(
                    f"TrajectoryRewardConfig.{f.name} must be a finite number, got {value!r}; "
                    f"set gta.reward.{f.name} to a float such as {f.default}"
                )
            object.__setattr__(self, f.name, float(value))
        if not 0.0 < self.shaping_gamma <= 1.0:
            raise ValueError(f"gta.reward.shaping_gamma={self.shaping_gamma} must be in (0, 1]")
        if self.step_shaping == "potential" and self.shaping_gamma != 1.0:
            raise ValueError(
                f"gta.reward.shaping_gamma={self.shaping_gamma} with step_shaping=potential: the returns "
                "are undiscounted, so only γ = 1 leaves the policies' order unchanged; use 1.0, or "
                "step_shaping=coverage_bonus for a discounted coverage bonus"
            )


@dataclass(frozen=True)
class TrajectoryReward:
    """The decomposed Stage-I reward of one rollout."""

    total: float
    """R_traj = Σ search_rewards + answer_reward (eq 18)."""
    search_rewards: tuple[float, ...]
    """r_search_t per search turn, in turn order (eq 16, or F_t of ``step_shaping``)."""
    answer_reward: float
    """r_ans (eq 17)."""
    em: float
    """EM(ŷ, y*) ∈ {0, 1}."""
    f1: float
    """Token F1 of ŷ (max over aliases)."""
    complete_chain: bool
    """C_T ⊇ S(x) (vacuously True when S(x) = ∅)."""
    target_doc_cov: float
    """|C_T ∩ S(x)| / |S(x)| (1.0 when S(x) = ∅)."""
    zero_target_turns: int
    """Search turns with Δ_t = ∅ (retrieved no previously unseen target)."""
    newly_retrieved: tuple[tuple[str, ...], ...]
    """Δ_t per search turn, in the order the documents were returned."""
    has_targets: bool
    """False when S(x) = ∅ (search turns then score 0, see module docstring)."""
    terminal_shaping: float = 0.0
    """F_end = −Φ(s_T) of ``step_shaping=potential`` (paid with r_ans); 0 otherwise."""

    @property
    def num_searches(self) -> int:
        return len(self.search_rewards)

    @property
    def search_reward_sum(self) -> float:
        return float(sum(self.search_rewards))


def _doc_list(ids: Iterable[Any] | None) -> list[str]:
    # parquet / numpy hand back arrays; turn everything into plain str lists.
    if ids is None:
        return []
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, str):
        raise TypeError(f"expected a list of doc ids, got the string {ids!r}")
    return [str(d) for d in ids]


def _answer_reward(em: float, complete: bool, cfg: TrajectoryRewardConfig) -> float:
    if em < 1.0:
        return cfg.wrong
    return cfg.correct_complete if complete else cfg.correct_incomplete


def _search_rewards(
    newly: Sequence[Sequence[str]], num_targets: int, cfg: TrajectoryRewardConfig
) -> tuple[list[float], float]:
    """(r_search_t per turn from Δ_t, terminal term): eq 16 or F_t of ``step_shaping``; 0 when S = ∅.

    Examples:
        Coverage bonus (γ = 1) after d1 then d1 again, S = {d1, d2}: Φ goes 0 → 1/2 → 1/2, so
        F = (1/2, 0) and R = 1/2 + 0 + 1 = 1.5. Potential-based shaping adds F_end = −1/2:
        R = 1 = r_ans.

        >>> cfg = TrajectoryRewardConfig(step_shaping="coverage_bonus")
        >>> r = trajectory_reward([["d1"], ["d1"]], ["d1", "d2"], "Paris", ["Paris"], cfg)
        >>> r.search_rewards, r.total
        ((0.5, 0.0), 1.5)
        >>> cfg = TrajectoryRewardConfig(step_shaping="potential")
        >>> r = trajectory_reward([["d1"], ["d1"]], ["d1", "d2"], "Paris", ["Paris"], cfg)
        >>> r.search_rewards, r.terminal_shaping, r.total
        ((0.5, 0.0), -0.5, 1.0)
    """
    counts = [len(d) for d in newly]
    if cfg.step_shaping == "potential":
        per_turn, terminal = potential_shaping(counts, num_targets)
        return list(per_turn), terminal
    if cfg.step_shaping == "coverage_bonus":
        return list(coverage_bonus_step_rewards(counts, num_targets, cfg.shaping_gamma)), 0.0
    if not num_targets:
        return [0.0] * len(newly), 0.0
    return [cfg.hit_per_doc * len(d) if d else cfg.miss for d in newly], 0.0


def _newly_covered(turn_doc_ids: Sequence[Iterable[str]], targets: set[str]) -> list[tuple[str, ...]]:
    """Δ_t per search turn (eq 15): the targets first retrieved at turn t, in retrieval order.

    >>> _newly_covered([["d1", "x", "d1"], ["d1", "d2"]], {"d1", "d2"})
    [('d1',), ('d2',)]
    """
    covered: set[str] = set()
    newly: list[tuple[str, ...]] = []
    for turn in turn_doc_ids:
        delta: list[str] = []
        for doc in _doc_list(turn):
            if doc in targets and doc not in covered and doc not in delta:
                delta.append(doc)
        covered.update(delta)
        newly.append(tuple(delta))
    return newly


def trajectory_reward(
    turn_doc_ids: Sequence[Iterable[str]],
    target_doc_ids: Iterable[str],
    prediction: str | None,
    gold_answers: Iterable[str] | str,
    config: TrajectoryRewardConfig = TrajectoryRewardConfig(),
) -> TrajectoryReward:
    """Score one rollout with the trajectory-guided reward (eqs 15–18).

    Args:
        turn_doc_ids: R(q_t) per search turn (a failed retrieval is an empty list and
            scores as a miss).
        target_doc_ids: S(x), the target documents (order and duplicates ignored).
        prediction: ŷ, the extracted answer, or None when the rollout never answered.
        gold_answers: y* and its aliases.
        config: reward values.

    Returns:
        The decomposed reward.

    Examples:
        Two-hop chain, both documents found in two searches, correct answer:
        0.25 + 0.25 + 2 = 2.5.

        >>> r = trajectory_reward([["d1", "x"], ["d2"]], ["d1", "d2"], "Paris", ["Paris"])
        >>> r.total, r.search_rewards, r.answer_reward, r.complete_chain
        (2.5, (0.25, 0.25), 2.0, True)

        Re-retrieving d1 is a miss (it is already in C_2); correct but incomplete:
        0.25 − 0.10 + 1 = 1.15.

        >>> round(trajectory_reward([["d1"], ["d1"]], ["d1", "d2"], "Paris", ["Paris"]).total, 4)
        1.15

        The ``step_shaping`` variants: the examples of :func:`_search_rewards`.
    """
    targets = set(_doc_list(target_doc_ids))
    newly = _newly_covered(turn_doc_ids, targets)
    covered = {doc for delta in newly for doc in delta}
    search_rewards, terminal = _search_rewards(newly, len(targets), config)

    complete = covered >= targets
    em = exact_match(prediction, gold_answers)
    answer_reward = _answer_reward(em, complete, config)
    return TrajectoryReward(
        total=float(sum(search_rewards) + answer_reward + terminal),
        search_rewards=tuple(search_rewards),
        answer_reward=answer_reward,
        em=em,
        f1=f1(prediction, gold_answers),
        complete_chain=complete,
        target_doc_cov=(len(covered) / len(targets)) if targets else 1.0,
        zero_target_turns=sum(1 for d in newly if not d),
        newly_retrieved=tuple(newly),
        has_targets=bool(targets),
        terminal_shaping=float(terminal),
    )


def em_reward(prediction: str | None, gold_answers: Iterable[str] | str) -> float:
    """Stage-II reward R_EM = 1[EM(ŷ, y*) = 1] (eq 19).

    Examples:
        >>> em_reward("paris", ["Paris"]), em_reward(None, ["Paris"])
        (1.0, 0.0)
    """
    return exact_match(prediction, gold_answers)


def zero_target_queries(
    query_doc_ids: Sequence[Sequence[Iterable[str]]], target_doc_ids: Iterable[str]
) -> int:
    """Queries whose shown passages held no target document unseen before them.

    With several queries per search (K > 1) a turn is productive when any of its queries is, so
    zero-target *turns* hide a useless extra query; this counts queries, in issue order, with C
    grown query by query (the per-query Δ of eq 15). With one query per turn it equals
    ``zero_target_turns``, the quantity of GTA-RAG's Table 3.

    Args:
        query_doc_ids: Per search turn, the ids shown for each of its queries.
        target_doc_ids: S(x).

    Examples:
        Turn 1: query a shows d1, query b shows x; turn 2: one query shows d1 again. Zero-target
        queries: b and turn 2's (2); zero-target turns: only turn 2 (1).

        >>> zero_target_queries([[["d1"], ["x"]], [["d1"]]], ["d1", "d2"])
        2
    """
    targets = set(_doc_list(target_doc_ids))
    covered: set[str] = set()
    count = 0
    for turn in query_doc_ids:
        for ids in turn:
            new = {d for d in _doc_list(ids) if d in targets} - covered
            count += not new
            covered |= new
    return count
