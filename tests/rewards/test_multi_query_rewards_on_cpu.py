"""Rewards of multi-query turns: every rule counts a turn's union of shown documents.

The agent loop records, per search turn, the union of its queries' shown passages
(``gta/turn_doc_ids``, ``gta/turn_texts``) and the turn's queries joined by `` ## ``
(``gta/turn_queries``). Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import pytest

from gta_verl.data.schema import EF_ANSWER, EF_NUM_SEARCHES, EF_TURN_DOC_IDS, EF_TURN_QUERIES, EF_TURN_TEXTS
from gta_verl.rewards.path_router import PathRouterConfig
from gta_verl.rewards.path_router_manager import score_path_router
from gta_verl.rewards.scoring import ScoringRequest, score_trajectory_guided
from gta_verl.rewards.trajectory import TrajectoryRewardConfig, trajectory_reward

S3 = ["d1", "d2", "d3"]


def test_per_turn_terms_count_the_union():
    # turn 1 = q1 [d1, x] ∪ q2 [d2, d1] = [d1, x, d2]: Δ_1 = {d1, d2} → +0.25·2 = 0.5
    # turn 2 = q1 [d1] ∪ q2 [y]          = [d1, y]:     Δ_2 = ∅ (d1 ∈ C_2) → miss −0.10
    # turn 3 = [d3]:                                      Δ_3 = {d3} → +0.25
    # correct, C_T = {d1, d2, d3} ⊇ S → +2;  R = 0.5 − 0.1 + 0.25 + 2 = 2.65
    r = trajectory_reward([["d1", "x", "d2"], ["d1", "y"], ["d3"]], S3, "Paris", ["Paris"])
    assert r.search_rewards == pytest.approx((0.5, -0.1, 0.25))
    assert r.total == pytest.approx(2.65)
    assert r.newly_retrieved == (("d1", "d2"), (), ("d3",))


def test_target_doc_cov_and_zero_target_turns_count_the_union():
    # turn 1 = [x] ∪ [d2] = [x, d2]: Δ = {d2}, so NOT a zero-target turn although query 1 found nothing
    # turn 2 = [y] ∪ [z]  = [y, z]:  Δ = ∅ → one zero-target turn
    # C_T = {d2}: TargetDocCov = 1/3; wrong answer −1; R = 0.25 − 0.1 − 1 = −0.85
    r = trajectory_reward([["x", "d2"], ["y", "z"]], S3, "Lyon", ["Paris"])
    assert r.zero_target_turns == 1
    assert r.target_doc_cov == pytest.approx(1 / 3)
    assert r.total == pytest.approx(-0.85)


def test_coverage_bonus_counts_the_union():
    # S = {d1, d2, d3, d4}; turn 1 union [d1, d2, x], turn 2 union [d3]; γ = 1
    # Φ: 0 → 2/4 → 3/4, F = (0.5, 0.25); wrong answer −1 → R = 0.75 − 1 = −0.25
    cfg = TrajectoryRewardConfig(step_shaping="coverage_bonus")
    r = trajectory_reward([["d1", "d2", "x"], ["d3"]], ["d1", "d2", "d3", "d4"], "Lyon", ["Paris"], cfg)
    assert r.search_rewards == (0.5, 0.25) and r.total == -0.25


def _request(turn_texts, turn_queries, answer="Paris"):
    return ScoringRequest(
        response_text="",
        answers=("Paris",),
        target_doc_ids=(),
        support_texts=("x y", "z w"),
        extra_fields={
            EF_TURN_TEXTS: turn_texts,
            EF_TURN_QUERIES: turn_queries,
            EF_TURN_DOC_IDS: [[] for _ in turn_texts],
            EF_NUM_SEARCHES: len(turn_texts),
            EF_ANSWER: answer,
        },
    )


def test_path_router_p_counts_the_union():
    # one turn whose two queries showed "x y", "z w" and "q r" (the union)
    request = _request([["x y", "z w", "q r"]], ["a ## b"])
    # best_passage: each gold passage is matched exactly by one shown passage → P = (1 + 1)/2 = 1.0
    _, info = score_path_router(request, PathRouterConfig(), max_queries=2)
    assert info["P"] == 1.0
    # bag: one bag of 6 tokens; per gold (2 tokens): precision 2/6, recall 1 →
    #   F1 = 2·(1/3)·1 / (1/3 + 1) = 0.5, P = (0.5 + 0.5)/2 = 0.5
    _, info = score_path_router(request, PathRouterConfig(overlap="bag"), max_queries=2)
    assert info["P"] == pytest.approx(0.5)


def test_path_router_redundancy_counts_every_query():
    # turns "born p ## born q" and "born q": with K = 2 the queries are born p, born q, born q
    # → one repeat → r_d = −0.05;
    # searched and answered → r_e = +0.1;  r_s = 0.1 − 0.05 = 0.05
    request = _request([["x y"], ["z w"]], ["born p ## born q", "born q"])
    _, info = score_path_router(request, PathRouterConfig(), max_queries=2)
    assert info["r_s"] == pytest.approx(0.05)
    # with K = 1 the records are the two queries "born p ## born q" and "born q": no repeat, r_s = 0.1
    _, info = score_path_router(request, PathRouterConfig(), max_queries=1)
    assert info["r_s"] == pytest.approx(0.1)
    # r_e / r_l count search turns: num_searches stays the number of turns
    assert info["num_searches"] == 2


def test_scoring_request_reads_the_union_record():
    request = ScoringRequest(
        response_text="",
        answers=("Paris",),
        target_doc_ids=("d1", "d2"),
        extra_fields={EF_TURN_DOC_IDS: [["d1", "x", "d2"]], EF_ANSWER: "Paris", EF_NUM_SEARCHES: 1},
    )
    # one turn with both targets: 0.25·2 + 2 = 2.5
    reward, info = score_trajectory_guided(request)
    assert reward == pytest.approx(2.5) and info["complete_chain"] == 1.0
