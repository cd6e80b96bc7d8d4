"""Step terms replacing eq 16 (gta.reward.step_shaping), against hand arithmetic.

``coverage_bonus``: F_t = γ·Φ(s_t) − Φ(s_{t−1}), Φ(s_T) kept. ``potential``: F_t = Φ(s_t) − Φ(s_{t−1})
plus F_end = 0 − Φ(s_T) (Φ = 0 at the terminal state). Every expected value below is worked out
in the comment next to it from Φ = |C ∩ S| / |S|; the code under test never computes one.
Target sets have 2 or 4 documents so that every Φ is an exact binary fraction.
"""

from __future__ import annotations

import doctest
import json

import pytest
from omegaconf import OmegaConf

from gta_verl.config import GTAConfig, reward_config_from_trainer
from gta_verl.data.schema import EF_ANSWER, EF_TURN_DOC_IDS
from gta_verl.protocol import final_answer
from gta_verl.rewards import shaping
from gta_verl.rewards.scoring import ScoringRequest, score_exact_match, score_trajectory_guided
from gta_verl.rewards.shaping import coverage_bonus_step_rewards, potential_shaping, target_potential
from gta_verl.rewards.trajectory import TrajectoryRewardConfig, trajectory_reward
from tests.rewards.cases import CASES

COVERAGE = TrajectoryRewardConfig(step_shaping="coverage_bonus")
POTENTIAL = TrajectoryRewardConfig(step_shaping="potential")
S2 = ["d1", "d2"]
S4 = ["d1", "d2", "d3", "d4"]


def test_defaults_are_the_paper():
    assert TrajectoryRewardConfig().step_shaping == "additive"
    assert TrajectoryRewardConfig().shaping_gamma == 1.0
    # the five eq 16–17 values stay first and positional
    assert TrajectoryRewardConfig(0.25, -0.10, -1.0, 1.0, 2.0) == TrajectoryRewardConfig()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_additive_default_is_unchanged(case):
    explicit = TrajectoryRewardConfig(step_shaping="additive")
    r = trajectory_reward(
        case.turn_doc_ids, case.targets, final_answer(case.response), case.answers, explicit
    )
    assert r.search_rewards == pytest.approx(case.search_rewards)
    assert r.total == pytest.approx(case.total)


def test_potential_values():
    # |S| = 4: Φ(s_0) = 0.
    assert target_potential(0, 4) == 0.0
    # one of four found: 1/4.
    assert target_potential(1, 4) == 0.25
    # no targets: Φ ≡ 0.
    assert target_potential(0, 0) == 0.0
    with pytest.raises(ValueError, match="found <= num_targets"):
        target_potential(3, 2)


def test_step_rewards_gamma_one():
    # |S| = 4, turns find 1, 0, 2, 1 new targets.
    # Φ: 0 → 1/4 → 1/4 → 3/4 → 1.
    # F: 1/4 − 0 = 0.25; 1/4 − 1/4 = 0; 3/4 − 1/4 = 0.5; 1 − 3/4 = 0.25.
    assert coverage_bonus_step_rewards([1, 0, 2, 1], 4) == (0.25, 0.0, 0.5, 0.25)


def test_step_rewards_gamma_below_one():
    # |S| = 2, γ = 0.5, turns find 1, 0, 1.
    # Φ: 0 → 1/2 → 1/2 → 1.
    # F_1 = 0.5·0.5 − 0   = 0.25
    # F_2 = 0.5·0.5 − 0.5 = −0.25
    # F_3 = 0.5·1   − 0.5 = 0.0
    assert coverage_bonus_step_rewards([1, 0, 1], 2, gamma=0.5) == (0.25, -0.25, 0.0)


def test_trajectory_reward_coverage_bonus_gamma_one():
    # S = {d1, d2}; turn 1 shows d1 and x, turn 2 shows d1 again (no new target), turn 3 d2.
    # Φ: 0 → 1/2 → 1/2 → 1, F = (0.5, 0.0, 0.5); Σ F = 1.0 = final coverage.
    # Correct and complete: r_ans = +2 (eq 17 unchanged) → R = 1.0 + 2 = 3.0.
    r = trajectory_reward([["d1", "x"], ["d1"], ["d2"]], S2, "Paris", ["Paris"], COVERAGE)
    assert r.search_rewards == (0.5, 0.0, 0.5)
    assert r.answer_reward == 2.0
    assert r.total == 3.0
    # evidence metrics are the same as under eq 16: coverage 1, one zero-target turn.
    assert r.target_doc_cov == 1.0 and r.complete_chain is True and r.zero_target_turns == 1


def test_trajectory_reward_coverage_bonus_gamma_below_one():
    # S = {d1, d2, d3, d4}, γ = 0.5; turn 1 shows d1 d2, turn 2 nothing new, turn 3 shows d3.
    # Φ: 0 → 2/4 → 2/4 → 3/4.
    # F_1 = 0.5·0.5  − 0   = 0.25
    # F_2 = 0.5·0.5  − 0.5 = −0.25
    # F_3 = 0.5·0.75 − 0.5 = −0.125
    # Wrong answer: r_ans = −1 → R = 0.25 − 0.25 − 0.125 − 1 = −1.125.
    cfg = TrajectoryRewardConfig(step_shaping="coverage_bonus", shaping_gamma=0.5)
    r = trajectory_reward([["d1", "d2"], ["x"], ["d3"]], S4, "Lyon", ["Paris"], cfg)
    assert r.search_rewards == (0.25, -0.25, -0.125)
    assert r.total == -1.125


def test_no_targets_scores_zero_per_turn():
    # S = ∅: Φ ≡ 0, so F_t = γ·0 − 0 = 0 for every turn; r_ans = +2 (vacuously complete).
    r = trajectory_reward([["x"], ["y"]], [], "Paris", ["Paris"], COVERAGE)
    assert r.search_rewards == (0.0, 0.0) and r.total == 2.0 and r.has_targets is False


def test_coverage_bonus_telescopes_so_extra_searches_never_pay():
    # Four rollouts, all ending with S = {d1, d2} found and the same (wrong) answer (r_ans = −1):
    #   one_search : [d1 d2]                     Φ 0 → 1
    #   two_hits   : [d1] [d2]                   Φ 0 → 1/2 → 1
    #   with_misses: [d1] [x] [x] [d2]           Φ 0 → 1/2 → 1/2 → 1/2 → 1
    #   repeats    : [d1] [d1] [d2] [d2] [d1]    Φ 0 → 1/2 → 1/2 → 1 → 1 → 1
    paths = {
        "one_search": [["d1", "d2"]],
        "two_hits": [["d1"], ["d2"]],
        "with_misses": [["d1"], ["x"], ["x"], ["d2"]],
        "repeats": [["d1"], ["d1"], ["d2"], ["d2"], ["d1"]],
    }
    # γ = 1: Σ F = Φ(s_T) − Φ(s_0) = 1 − 0 = 1 on every path → R = 1 − 1 = 0 for all four.
    potential = {k: trajectory_reward(p, S2, "Lyon", ["Paris"], COVERAGE).total for k, p in paths.items()}
    assert potential == {k: 0.0 for k in paths}
    # eq 16 instead depends on the path (0.25 per new target, −0.10 per miss, r_ans −1):
    #   one_search : 0.5 − 1                        = −0.5
    #   two_hits   : 0.25 + 0.25 − 1                = −0.5
    #   with_misses: 0.25 − 0.1 − 0.1 + 0.25 − 1    = −0.7
    #   repeats    : 0.25 − 0.1 + 0.25 − 0.1 − 0.1 − 1 = −0.8
    additive = {k: trajectory_reward(p, S2, "Lyon", ["Paris"]).total for k, p in paths.items()}
    assert additive == pytest.approx(
        {"one_search": -0.5, "two_hits": -0.5, "with_misses": -0.7, "repeats": -0.8}
    )


def test_appending_a_search_never_raises_the_coverage_bonus_sum():
    # γ = 0.5, S = {d1, d2}: base path [d1] [d2]: Φ 0 → 1/2 → 1,
    #   F = (0.5·0.5 − 0, 0.5·1 − 0.5) = (0.25, 0.0), Σ = 0.25.
    # one more (empty) search after it: F_3 = 0.5·1 − 1 = −0.5, Σ = −0.25 < 0.25.
    # a miss in between: [d1] [x] [d2]: F = (0.25, 0.5·0.5 − 0.5, 0.5·1 − 0.5) = (0.25, −0.25, 0.0), Σ = 0.0.
    cfg = TrajectoryRewardConfig(step_shaping="coverage_bonus", shaping_gamma=0.5)
    base = trajectory_reward([["d1"], ["d2"]], S2, None, ["Paris"], cfg)
    longer = trajectory_reward([["d1"], ["d2"], []], S2, None, ["Paris"], cfg)
    detour = trajectory_reward([["d1"], ["x"], ["d2"]], S2, None, ["Paris"], cfg)
    assert base.search_reward_sum == 0.25
    assert longer.search_rewards == (0.25, 0.0, -0.5) and longer.search_reward_sum == -0.25
    assert detour.search_rewards == (0.25, -0.25, 0.0) and detour.search_reward_sum == 0.0


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"step_shaping": "pbrs"}, "step_shaping='pbrs'"),
        ({"shaping_gamma": 0.0}, r"shaping_gamma=0.0 must be in \(0, 1\]"),
        ({"shaping_gamma": 1.5}, r"shaping_gamma=1.5 must be in \(0, 1\]"),
        ({"shaping_gamma": float("nan")}, "finite number"),
    ],
)
def test_config_validation(bad, message):
    with pytest.raises(ValueError, match=message):
        TrajectoryRewardConfig(**bad)


def test_config_from_gta_node_and_reward_kwargs():
    assert GTAConfig.from_dict({"reward": {"step_shaping": "potential"}}).reward.step_shaping == "potential"
    cfg = OmegaConf.create(
        {
            "gta": {"reward": {"step_shaping": "potential"}},
            "reward": {"reward_kwargs": {"shaping_gamma": 0.5}},
        }
    )
    with pytest.raises(
        ValueError, match="only γ = 1"
    ):  # potential shaping needs γ = 1 (undiscounted returns)
        reward_config_from_trainer(cfg)
    cfg.gta.reward.step_shaping = "coverage_bonus"
    rc = reward_config_from_trainer(cfg)
    assert (rc.step_shaping, rc.shaping_gamma, rc.hit_per_doc) == ("coverage_bonus", 0.5, 0.25)


def _request(turns, prediction):
    return ScoringRequest(
        response_text="",
        answers=("Paris",),
        target_doc_ids=("d1", "d2"),
        extra_fields={EF_TURN_DOC_IDS: turns, EF_ANSWER: prediction},
    )


def test_scorers_report_the_paid_coverage_bonus_terms():
    # turns [d1] [x] [d2], γ = 1: F = (0.5, 0.0, 0.5); correct & complete +2 → R = 3.0.
    request = _request([["d1"], ["x"], ["d2"]], "Paris")
    reward, info = score_trajectory_guided(request, COVERAGE)
    assert reward == 3.0 and info["traj_reward"] == 3.0
    assert json.loads(info["turn_rewards_json"]) == [0.5, 0.0, 0.5]
    assert info["search_reward_sum"] == 1.0 and info["zero_target_turns"] == 1
    # Stage II pays R_EM = 1 and no search term; traj_reward is the shaped R_traj for comparison.
    reward, info = score_exact_match(request, COVERAGE)
    assert reward == 1.0 and info["search_reward_sum"] == 0.0 and info["traj_reward"] == 3.0


def test_doctests():
    result = doctest.testmod(shaping)
    assert result.attempted > 0 and result.failed == 0


# --- potential-based shaping: Φ = 0 at the terminal state ------------------------------------------
def test_potential_shaping_pays_minus_phi_on_the_last_transition():
    # |S| = 4, turns find 1, 0, 2, 1: Φ 0 → 1/4 → 1/4 → 3/4 → 1, then the terminal state Φ = 0.
    # F = (1/4 − 0, 1/4 − 1/4, 3/4 − 1/4, 1 − 3/4) = (0.25, 0, 0.5, 0.25); F_end = 0 − 1 = −1.
    assert potential_shaping([1, 0, 2, 1], 4) == ((0.25, 0.0, 0.5, 0.25), -1.0)
    # No search at all: Φ(s_0) = 0 is also the last state, F_end = 0 − 0 = 0.
    assert potential_shaping([], 2) == ((), 0.0)


def test_the_two_policy_example_only_the_coverage_bonus_changes_the_order():
    # Policy A searches once and finds both targets, then answers wrongly with probability
    # 1/2 and correctly (complete) with probability 1/2: V(A) = 1/2·(−1) + 1/2·(+2) = 0.5 under eq 17
    # alone (no search term: hit_per_doc = miss = 0). Policy B never searches and answers
    # correctly (incomplete, +1) with probability 4/5, wrongly with 1/5: V(B) = 0.8 − 0.2 = 0.6.
    no_search_term = {"hit_per_doc": 0.0, "miss": 0.0}
    forms = {
        "none": TrajectoryRewardConfig(**no_search_term),
        "coverage_bonus": TrajectoryRewardConfig(**no_search_term, step_shaping="coverage_bonus"),
        "potential": TrajectoryRewardConfig(**no_search_term, step_shaping="potential"),
    }

    def value(cfg, turns, outcomes):
        return sum(p * trajectory_reward(turns, S2, ans, ["Paris"], cfg).total for ans, p in outcomes)

    a = ([["d1", "d2"]], [("Lyon", 0.5), ("Paris", 0.5)])
    b = ([], [("Paris", 0.8), ("Lyon", 0.2)])
    # Without shaping: 0.5 < 0.6, B is better.
    assert value(forms["none"], *a) == pytest.approx(0.5) and value(forms["none"], *b) == pytest.approx(0.6)
    # Coverage bonus: A's every rollout gains Σ F = Φ(s_1) = 1 → 1.5 > 0.6: the order flips.
    assert value(forms["coverage_bonus"], *a) == pytest.approx(1.5)
    assert value(forms["coverage_bonus"], *b) == pytest.approx(0.6)
    # Potential-based: A gains F_1 + F_end = (1 − 0) + (0 − 1) = 0 → 0.5 < 0.6: the order is kept.
    assert value(forms["potential"], *a) == pytest.approx(0.5)
    assert value(forms["potential"], *b) == pytest.approx(0.6)


def test_potential_shaping_leaves_every_return_unchanged_and_moves_credit_between_turns():
    # The four paths of the telescoping test, each with the answer right (r_ans = +2, complete).
    # Σ F_t + F_end = Φ(s_T) − Φ(s_0) − Φ(s_T) = 0, so R = r_ans = 2 on every path.
    paths = [[["d1", "d2"]], [["d1"], ["d2"]], [["d1"], ["x"], ["x"], ["d2"]], [["d1"], ["d1"], ["d2"]]]
    for turns in paths:
        r = trajectory_reward(turns, S2, "Paris", ["Paris"], POTENTIAL)
        assert r.total == 2.0 and r.terminal_shaping == -1.0
    # Per turn, [d1] [x] [d2]: F = (1/2, 0, 1/2), F_end = −1; the manager places F_t on the
    # queries and r_ans + F_end = 2 − 1 = 1 on the last token.
    reward, info = score_trajectory_guided(_request([["d1"], ["x"], ["d2"]], "Paris"), POTENTIAL)
    assert reward == 2.0 and json.loads(info["turn_rewards_json"]) == [0.5, 0.0, 0.5]
    assert info["answer_reward"] == 1.0 and info["search_reward_sum"] == 1.0


def test_potential_shaping_refuses_a_discount():
    # Undiscounted returns: with γ = 1/2 the sum would keep −(1 − γ)·Σ Φ(s_t), a cost on held evidence.
    with pytest.raises(ValueError, match="only γ = 1"):
        TrajectoryRewardConfig(step_shaping="potential", shaping_gamma=0.5)
