"""``experiments.learning.paired``: paired differences on shared questions, hand-computed."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.learning.paired import paired_difference, question_rows, question_values
from gta_verl.data.types import RolloutRecord
from gta_verl.eval.records import EvalRecord


def _q(qid: str, hit: int, n: int, em: float = 0.0, searches: int = 1, source: str = "s") -> dict[str, Any]:
    return {
        "data_source": source,
        "qid": qid,
        "sample_idx": 0,
        "n_targets": n,
        "n_targets_hit": hit,
        "complete_chain": float(n > 0 and hit == n),
        "em": em,
        "f1": em,
        "num_searches": searches,
        "answered": True,
    }


def test_question_values_target_doc_cov_skips_questions_without_targets() -> None:
    rows = [_q("1", 1, 2), _q("2", 0, 0), _q("3", 3, 3)]
    assert question_values(rows, "target_doc_cov") == {("s", "1", 0): (1.0, 2.0), ("s", "3", 0): (3.0, 3.0)}
    # EM is defined for every question, denominator 1
    assert len(question_values(rows, "em")) == 3
    with pytest.raises(ValueError, match="unknown paired metric 'cov'.*target_doc_cov"):
        question_values(rows, "cov")


def test_question_rows_score_what_the_policy_was_shown() -> None:
    shown = RolloutRecord(
        question="Who?",
        gold_answers=("Ann",),
        target_doc_ids=("d1", "d2"),
        turn_queries=("q1", "q2"),
        turn_doc_ids=(("d1", "d9"), ("d9",)),
        answer="ann",
        data_source="musique",
        qid="7",
    )
    row = question_rows([EvalRecord(shown, response_text="long text")])[0]
    # targets {d1, d2}, shown {d1, d9}: 1 of 2 hit, chain incomplete; "ann" = "Ann" after normalization
    assert row == {
        "data_source": "musique",
        "qid": "7",
        "sample_idx": 0,
        "n_targets": 2,
        "n_targets_hit": 1,
        "complete_chain": 0.0,
        "em": 1.0,
        "f1": 1.0,
        "num_searches": 2,
        "answered": 1.0,
    }


def test_target_doc_cov_difference_is_a_ratio_of_sums() -> None:
    a = [[_q("1", 2, 2), _q("2", 1, 1)]]  # A: (2 + 1) / (2 + 1) = 1
    b = [[_q("1", 1, 2), _q("2", 0, 1)]]  # B: (1 + 0) / 3 = 1/3
    d = paired_difference(a, b, "target_doc_cov", n_boot=2_000)
    assert d.n_questions == 2
    assert d.diff == pytest.approx(2 / 3)  # 1 − 1/3
    # A beats B on both questions, so every resample has A = 1 > B: the interval excludes 0
    assert d.p_not_above_0 == 0.0
    assert d.ci_low > 0


def test_ties_give_a_zero_interval() -> None:
    rows = [[_q("1", 1, 2), _q("2", 1, 1)]]
    d = paired_difference(rows, rows, "target_doc_cov", n_boot=500)
    assert (d.diff, d.ci_low, d.ci_high, d.p_not_above_0) == (0.0, 0.0, 0.0, 1.0)


def test_bootstrap_over_two_questions_matches_its_enumeration() -> None:
    # EM: A = (1, 0), B = (0, 0). Resampling 2 of 2 questions with replacement gives
    # {q1, q1} (p 1/4, diff 1), {q1, q2} or {q2, q1} (p 1/2, diff 0.5), {q2, q2} (p 1/4, diff 0).
    a = [[_q("1", 0, 1, em=1.0), _q("2", 0, 1, em=0.0)]]
    b = [[_q("1", 0, 1, em=0.0), _q("2", 0, 1, em=0.0)]]
    d = paired_difference(a, b, "em", n_boot=20_000, seed=3)
    assert d.diff == pytest.approx(0.5)
    # P(diff ≤ 0) = 1/4; 20,000 resamples: SE = √(0.25 × 0.75 / 20,000) ≈ 0.003
    assert d.p_not_above_0 == pytest.approx(0.25, abs=0.015)
    # 2.5 % quantile falls in the 0-mass (first 25 %), 97.5 % in the 1-mass (last 25 %)
    assert (d.ci_low, d.ci_high) == (0.0, 1.0)


def test_seeds_are_paired_by_position_and_averaged() -> None:
    # seed 0: A 2/3 vs B 1/3 → +1/3; seed 1: A 1/3 vs B 2/3 → −1/3; mean 0
    a = [[_q("1", 2, 2), _q("2", 0, 1)], [_q("1", 1, 2), _q("2", 0, 1)]]
    b = [[_q("1", 1, 2), _q("2", 0, 1)], [_q("1", 2, 2), _q("2", 0, 1)]]
    d = paired_difference(a, b, "target_doc_cov", n_boot=200)
    assert d.per_seed == pytest.approx((1 / 3, -1 / 3))
    assert d.diff == pytest.approx(0.0)


def test_only_shared_questions_are_compared_and_searches_are_means() -> None:
    a = [[_q("1", 0, 1, searches=1), _q("2", 0, 1, searches=3), _q("x", 0, 1, searches=9)]]
    b = [[_q("1", 0, 1, searches=2), _q("2", 0, 1, searches=2)]]
    d = paired_difference(a, b, "search_turns", n_boot=200)
    assert (d.n_questions, d.n_unshared) == (2, 1)
    assert d.diff == pytest.approx(0.0)  # (1 + 3) / 2 − (2 + 2) / 2


def test_bad_inputs_are_named() -> None:
    with pytest.raises(ValueError, match="same number"):
        paired_difference([[_q("1", 1, 1)]], [], "em")
    with pytest.raises(ValueError, match="share no question"):
        paired_difference([[_q("1", 1, 1)]], [[_q("2", 1, 1)]], "em")


def test_questions_not_in_every_run_are_counted() -> None:
    # Before: every run was cut to the questions all runs share, and nothing said how many were left out.
    full = [_q("1", 1, 2), _q("2", 1, 1), _q("3", 0, 1)]
    d = paired_difference([full, full], [full, full[:1]], "target_doc_cov", n_boot=10)
    assert (d.n_questions, d.n_unshared) == (1, 2)  # b[1] lacks questions 2 and 3
    # a question without targets is outside TargetDocCov in every run alike: not unshared
    no_target = [_q("1", 1, 2), _q("2", 0, 0)]
    assert paired_difference([no_target], [full[:1]], "target_doc_cov", n_boot=10).n_unshared == 0


def test_seed_level_intervals_by_hand() -> None:
    # Two seeds, two questions, EM. Seed 0: A answers q1 only, B nothing → A − B per question (1, 0), 0.5.
    # Seed 1: both answer both → (0, 0), 0. Per seed (0.5, 0.0), mean 0.25.
    a = [[_q("1", 0, 0, em=1.0), _q("2", 0, 0, em=0.0)], [_q("1", 0, 0, em=1.0), _q("2", 0, 0, em=1.0)]]
    b = [[_q("1", 0, 0, em=0.0), _q("2", 0, 0, em=0.0)], [_q("1", 0, 0, em=1.0), _q("2", 0, 0, em=1.0)]]
    d = paired_difference(a, b, "em", n_boot=20_000)
    assert d.per_seed == (0.5, 0.0) and d.diff == 0.25
    # t over seeds: sd = 0.35355 (ddof 1), se = 0.35355/√2 = 0.25, t_{0.975, 1} = 12.7062 → 0.25 ± 3.17655.
    assert (d.seed_t_low, d.seed_t_high) == pytest.approx((0.25 - 3.17655, 0.25 + 3.17655), abs=1e-4)
    # Questions only: seed 0's resampled mean is 0, 0.5 or 1 (p 1/4, 1/2, 1/4), seed 1's always 0, so the
    # mean over the two seeds is 0, 0.25 or 0.5 → the 95 % interval is [0, 0.5].
    assert (d.ci_low, d.ci_high) == (0.0, 0.5)
    # Two levels: seeds (0, 0) with p 1/4 keep seed 0's value (1 with p 1/16 overall > 2.5 %), so the
    # interval reaches 1; 0 has p 1/4 + 1/4·1/4 + 1/2·1/4 = 0.4375 > 2.5 % → [0, 1].
    assert (d.seed_boot_low, d.seed_boot_high) == (0.0, 1.0)
    one = paired_difference(a[:1], b[:1], "em")
    assert one.seed_t_low != one.seed_t_low  # NaN: one seed says nothing about the seeds' spread
