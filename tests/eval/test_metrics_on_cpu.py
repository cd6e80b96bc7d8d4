"""Evaluation metrics against hand-computed values (GTA-RAG eqs 22–23, PathRouter §4.1)."""

from __future__ import annotations

import math

import pytest

from gta_verl.data.types import RolloutRecord
from gta_verl.eval import metrics as M

PARIS = "Paris is the capital of France"


def _rec(**kw) -> RolloutRecord:
    base = dict(question="q", gold_answers=("Paris",), target_doc_ids=())
    base.update(kw)
    return RolloutRecord(**base)


# A: full chain over 3 turns, the third finds nothing new; correct; evidence-rich.
A = _rec(
    qid="a",
    data_source="musique",
    hops=2,
    target_doc_ids=("d1", "d2"),
    turn_queries=("q1", "q2", "q3"),
    turn_doc_ids=(("d1", "x"), ("d1", "d2", "d2"), ("x",)),
    answer="Paris",
    retrieved_texts=(PARIS,),
    gold_texts=(PARIS, "Berlin is in Germany"),
)
# B: never searched, never answered.
B = _rec(
    qid="b",
    data_source="musique",
    hops=3,
    target_doc_ids=("d1", "d2", "d3"),
    answer=None,
    gold_texts=("a b",),
)
# C: first search failed (empty), second returns the target twice; partially right answer.
C = _rec(
    qid="c",
    data_source="hotpotqa",
    hops=2,
    target_doc_ids=("d4",),
    turn_queries=("q", "q'"),
    turn_doc_ids=((), ("d4", "d4")),
    answer="the Paris France",
    retrieval_errors=1,
    retrieved_texts=("Something unrelated entirely",),
    gold_texts=("Eiffel tower stands tall",),
)
# D: natural question without gold documents or texts.
D = _rec(
    qid="d", data_source="nq", gold_answers=("y",), turn_queries=("q",), turn_doc_ids=(("x",),), answer="x"
)


def test_per_record_values():
    a, b, c, d = (M.score_record(r) for r in (A, B, C, D))
    assert (a.em, a.f1, a.correct, a.answered) == (1.0, 1.0, True, True)
    assert (a.n_targets_hit, a.n_targets, a.complete_chain, a.zero_target_turns) == (2, 2, 1.0, 1.0)
    assert a.sf_f1 == pytest.approx(0.8)  # p = 2/3 (C = {d1, d2, x}), r = 1
    # P = (F1(PARIS, PARIS) + F1(PARIS, "Berlin is in Germany")) / 2 = (1 + 2·.2·.25/.45) / 2
    assert a.path_overlap == pytest.approx((1 + 0.1 / 0.45) / 2)
    assert a.route == "C+P+"

    assert (b.em, b.f1, b.answered, b.correct) == (0.0, 0.0, False, False)
    assert (b.n_targets_hit, b.complete_chain, b.zero_target_turns, b.sf_f1) == (0, 0.0, 0.0, 0.0)
    assert (b.path_overlap, b.route) == (0.0, "C-P-")

    assert c.em == 0.0 and c.f1 == pytest.approx(2 / 3) and c.correct  # F1 >= θ_C = 0.5
    assert (c.n_targets_hit, c.complete_chain, c.zero_target_turns, c.sf_f1) == (1, 1.0, 1.0, 1.0)
    assert c.route == "C+P-"

    assert d.n_targets == 0 and math.isnan(d.complete_chain) and math.isnan(d.zero_target_turns)
    assert math.isnan(d.sf_f1) and math.isnan(d.path_overlap) and d.route == ""


def test_zero_target_turns_edge_cases():
    assert M.zero_target_turns([], ["d1"]) == 0.0
    assert M.zero_target_turns([[], ["d1"], ["d1"]], ["d1"]) == 2.0  # empty, new, repeat
    assert M.zero_target_turns([["d1", "d2"]], ["d1", "d2"]) == 0.0  # two new in one turn
    assert math.isnan(M.zero_target_turns([["d1"]], []))


def test_duplicate_targets_and_documents_count_once():
    r = _rec(target_doc_ids=("d1", "d1", "d2"), turn_doc_ids=(("d1", "d1"), ("d1",)), turn_queries=("a", "b"))
    m = M.score_record(r)
    assert (m.n_targets_hit, m.n_targets, m.complete_chain) == (1, 2, 0.0)
    assert m.sf_f1 == pytest.approx(2 / 3)  # p = 1/1, r = 1/2
    assert m.zero_target_turns == 1.0


def test_supporting_doc_f1():
    assert M.supporting_doc_f1([], ["d1"]) == 0.0
    assert M.supporting_doc_f1(["d1", "d2", "d3", "d4"], ["d1", "d5"]) == pytest.approx(2 * 0.25 * 0.5 / 0.75)
    assert math.isnan(M.supporting_doc_f1(["d1"], []))


def test_aggregate_pooled():
    ms = [M.score_record(r) for r in (A, B, C, D)]
    s = M.aggregate(ms)
    assert s["n"] == 4 and s["n_questions"] == 4 and s["n_with_targets"] == 3
    assert s["em"] == pytest.approx(0.25)
    assert s["f1"] == pytest.approx((1 + 0 + 2 / 3 + 0) / 4)
    assert s["answered"] == pytest.approx(0.75)
    assert s["target_doc_cov"] == pytest.approx(3 / 6)  # (2 + 0 + 1) / (2 + 3 + 1)
    assert s["complete_traj_cov"] == pytest.approx(2 / 3)
    assert s["zero_target_turns"] == 2.0 and s["zero_target_turns_per_q"] == pytest.approx(2 / 3)
    assert s["search_turns"] == pytest.approx(6 / 4)
    assert s["sf_f1"] == pytest.approx((0.8 + 0 + 1) / 3)
    assert s["n_correct"] == 2 and s["uar"] == pytest.approx(0.5)  # C is correct but evidence-poor
    assert s["route/C+P+"] == pytest.approx(1 / 3) and s["route/C-P+"] == 0.0
    assert s["retrieval_errors"] == 1 and s["retrieval_error_rate"] == pytest.approx(1 / 6)


def test_summarize_per_dataset_average_and_hops():
    summ = M.summarize([M.score_record(r) for r in (A, B, C, D)])
    assert list(summ.per_dataset) == ["hotpotqa", "musique", "nq"]
    assert summ.per_dataset["musique"]["em"] == pytest.approx(0.5)
    assert summ.average["em"] == pytest.approx((0.5 + 0 + 0) / 3)  # unweighted over datasets
    # nq has no targets: skipped, not counted as 0
    assert summ.average["target_doc_cov"] == pytest.approx((2 / 5 + 1.0) / 2)
    assert summ.average["n"] == 4
    assert sorted(summ.per_hops) == [0, 2, 3]
    assert summ.per_hops[2]["target_doc_cov"] == pytest.approx(3 / 3)
    assert summ.per_hops[3]["complete_traj_cov"] == 0.0


def test_empty_and_undefined_aggregates():
    s = M.aggregate([])
    assert s["n"] == 0 and math.isnan(s["em"]) and math.isnan(s["target_doc_cov"])
    only_nq = M.aggregate([M.score_record(D)])
    assert math.isnan(only_nq["uar"]) and math.isnan(only_nq["target_doc_cov"])
    assert not any(k.startswith("route/") for k in only_nq)


# E: two queries per search. Turn 1: query "a" shows d1 and x, query "b" shows y; turn 2 shows d2.
E = _rec(
    qid="e",
    data_source="musique",
    target_doc_ids=("d1", "d2"),
    turn_queries=("a ## b", "c"),
    turn_doc_ids=(("d1", "x", "y"), ("d2",)),
    turn_query_doc_ids=((("d1", "x"), ("y",)), (("d2",),)),
    answer="Paris",
)


def test_zero_target_queries_count_the_useless_query_inside_a_productive_turn():
    # Turns: turn 1 finds d1, turn 2 finds d2 → 0 zero-target turns. Queries: "a" finds d1, "b" finds
    # nothing new (y is no target), "c" finds d2 → 1 zero-target query.
    m = M.score_record(E)
    assert (m.zero_target_turns, m.zero_target_queries) == (0.0, 1.0)
    # One query per search (A: no per-query record): the two counts are the same, Table 3's. A's turns
    # [d1 x] [d1 d2 d2] [x]: the third finds nothing new → 1.
    a = M.score_record(A)
    assert a.zero_target_turns == a.zero_target_queries == 1.0
    # Pooled totals over E and A: turns 0 + 1 = 1, queries 1 + 1 = 2; per question 0.5 and 1.0.
    s = M.aggregate([m, a])
    assert (s["zero_target_turns"], s["zero_target_queries"]) == (1.0, 2.0)
    assert (s["zero_target_turns_per_q"], s["zero_target_queries_per_q"]) == (0.5, 1.0)
    # No targets: undefined, as for turns.
    assert math.isnan(M.score_record(_rec(turn_query_doc_ids=((("x",),),))).zero_target_queries)
