"""trajectory_reward / em_reward against the hand-computed table (eqs 15–19)."""

from __future__ import annotations

import doctest
import pickle

import pytest

from gta_verl import protocol
from gta_verl.protocol import final_answer
from gta_verl.rewards import path_router, placement, qa, trajectory
from gta_verl.rewards.trajectory import TrajectoryRewardConfig, em_reward, trajectory_reward
from tests.rewards.cases import CASES


def test_table_has_enough_cases():
    assert len(CASES) >= 12
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_trajectory_reward_table(case):
    r = trajectory_reward(case.turn_doc_ids, case.targets, final_answer(case.response), case.answers)
    assert r.total == pytest.approx(case.total)
    assert r.search_rewards == pytest.approx(case.search_rewards)
    assert r.answer_reward == case.answer_reward
    assert r.em == case.em
    assert r.complete_chain is case.complete
    assert r.target_doc_cov == pytest.approx(case.cov)
    assert r.zero_target_turns == case.zero_turns
    assert r.num_searches == len(case.turn_doc_ids)
    assert r.total == pytest.approx(r.search_reward_sum + r.answer_reward)
    assert r.has_targets is bool(case.targets)
    assert em_reward(final_answer(case.response), case.answers) == case.em


def test_newly_retrieved_tracks_delta():
    r = trajectory_reward([["d2", "d1"], ["d1", "d3"], []], ["d1", "d2", "d3"], "x", ["y"])
    assert r.newly_retrieved == (("d2", "d1"), ("d3",), ())


def test_custom_values():
    cfg = TrajectoryRewardConfig(
        hit_per_doc=1.0, miss=-0.5, wrong=-2.0, correct_incomplete=3.0, correct_complete=5.0
    )
    # turn 1: 2 new docs → 2.0; turn 2: miss −0.5; correct and complete → 5.
    assert trajectory_reward([["a", "b"], ["a"]], ["a", "b"], "y", ["y"], cfg).total == pytest.approx(6.5)
    # incomplete and correct → 3; one hit 1.0.
    assert trajectory_reward([["a"]], ["a", "b"], "y", ["y"], cfg).total == pytest.approx(4.0)


def test_accepts_numpy_arrays():
    np = pytest.importorskip("numpy")
    turns = [np.array(["d1", "x"], dtype=object), np.array([], dtype=object)]
    r = trajectory_reward(turns, np.array(["d1"]), "Paris", np.array(["Paris"]))
    assert r.total == pytest.approx(0.25 - 0.1 + 2.0)


def test_rejects_string_turn():
    with pytest.raises(TypeError, match="list of doc ids"):
        trajectory_reward(["d1"], ["d1"], "a", ["a"])


@pytest.mark.parametrize("bad", [{"miss": float("nan")}, {"wrong": "x"}, {"hit_per_doc": True}])
def test_config_validation(bad):
    with pytest.raises(ValueError, match="finite number"):
        TrajectoryRewardConfig(**bad)


def test_config_from_mapping_rejects_unknown():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['hit'\] under gta.reward"):
        TrajectoryRewardConfig.from_mapping({"hit": 1.0})
    assert TrajectoryRewardConfig.from_mapping({"miss": -0.2}).miss == -0.2


def test_results_and_score_fn_pickle():
    r = trajectory_reward([["d1"]], ["d1"], "x", ["x"])
    assert pickle.loads(pickle.dumps(r)) == r
    fn = pickle.loads(pickle.dumps(qa.compute_score))
    assert fn("x", "<answer>Oslo</answer>", {"target": ["oslo"]})["score"] == 1.0


@pytest.mark.parametrize("module", [qa, trajectory, placement, path_router, protocol])
def test_doctests(module):
    # attempted > 0: a module without examples would pass vacuously (scoring has none).
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_the_empty_answer_is_a_wrong_answer():
    """EM("") = 0, so r_ans = wrong = -1 — the same as a wrong guess and as no answer."""
    # one search hitting the only target: 0.25; plus r_ans -1 -> -0.75 for all three
    for prediction in ("", "Berlin", None):
        r = trajectory_reward([["d1"]], ["d1"], prediction, ["Paris"])
        assert r.answer_reward == -1.0 and r.total == pytest.approx(0.25 - 1.0)
