"""Hand-computed cases of the question selection by reward spread (experiments.learning.spread)."""

import pytest


def test_spread_score_hand_computed():
    from experiments.learning.spread import spread_score

    assert spread_score(1.0, 1, 2) == pytest.approx(1.5)  # 1 + 1/2
    assert spread_score(0.0, 2, 4) == pytest.approx(0.5)  # 0 + 2/4
    assert spread_score(0.0, 0, 0) == 0.0  # no targets: EM alone


def _record(turns, answer, em, hit):
    return {
        "turn_doc_ids": turns,
        "target_doc_ids": ["d1", "d2"],
        "answer": answer,
        "gold_answers": ["Paris"],
        "em": em,
        "n_targets_hit": hit,
        "n_targets": 2,
    }


def test_rollout_score_proxy_and_trajectory_hand_computed():
    from experiments.learning.spread import rollout_score

    wrong = _record([["d1", "x"], ["y"]], "Lyon", 0.0, 1)
    # proxy: EM 0 + 1/2 targets found = 0.5
    assert rollout_score(wrong, "proxy") == pytest.approx(0.5)
    # trajectory (eq 18): d1 new hit +0.25, second search finds no target −0.10, wrong answer −1 → −0.85
    assert rollout_score(wrong, "trajectory") == pytest.approx(-0.85)
    # one search fewer, same documents found and same answer: the proxy cannot tell them apart, the reward can
    fewer = _record([["d1", "x"]], "Lyon", 0.0, 1)
    assert rollout_score(fewer, "proxy") == pytest.approx(0.5)
    assert rollout_score(fewer, "trajectory") == pytest.approx(0.25 - 1.0)  # −0.75
    # both found in two searches, correct: 0.25 + 0.25 + 2 = 2.5
    full = _record([["d1"], ["d2"]], "Paris", 1.0, 2)
    assert rollout_score(full, "trajectory") == pytest.approx(2.5)
    with pytest.raises(ValueError, match="score must be one of"):
        rollout_score(full, "em")


def test_questions_with_spread_ranks_by_variance_then_mean():
    from experiments.learning.spread import questions_with_spread

    scores = [
        ("a", 0.0),
        ("a", 0.0),
        ("a", 0.0),  # var 0, mean 0
        ("b", 0.0),
        ("b", 1.0),
        ("b", 0.0),  # mean 1/3; var = ((1/3)²·2 + (2/3)²)/2 = (2/9 + 4/9)/2 = 1/3
        ("c", 1.0),
        ("c", 1.0),
        ("c", 1.0),  # var 0, mean 1
        ("d", 0.5),
        ("d", 1.5),
        ("d", 1.0),  # mean 1; var = (0.25 + 0.25 + 0)/2 = 0.25
        ("e", 1.0),
        ("e", 0.0),
        ("e", 1.0),  # mean 2/3; var = ((1/3)²·2 + (2/3)²)/2 = 1/3, ties b
    ]
    # b and e tie on variance 1/3: e's mean 2/3 > b's 1/3; then d (0.25); then c (var 0, mean 1) over a
    assert questions_with_spread(scores, 5) == ["e", "b", "d", "c", "a"]
    assert questions_with_spread(scores, 2) == ["e", "b"]
    # full ties keep first appearance
    assert questions_with_spread([("x", 0.0), ("y", 0.0)], 2) == ["x", "y"]


def test_questions_with_spread_refuses_too_few_questions():
    from experiments.learning.spread import questions_with_spread

    with pytest.raises(ValueError, match="1 distinct questions scored, 2 asked for"):
        questions_with_spread([("a", 1.0), ("a", 0.0)], 2)
    with pytest.raises(ValueError, match="k must be >= 1"):
        questions_with_spread([("a", 1.0)], 0)
