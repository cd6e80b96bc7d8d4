"""PathRouter routing and reward (gta_verl.rewards.path_router) on hand-computed cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gta_verl.rewards.path_router import (
    PathRouterConfig,
    PathRouterKLConfig,
    Route,
    correctness,
    path_overlap,
    path_router_config_from_trainer,
    path_router_reward,
    route,
    route_weight,
    shaping_reward,
)

CFG = PathRouterConfig()


# ----------------------------------------------------------------------------- C_i
@pytest.mark.parametrize(
    ("pred", "golds", "expected"),
    [
        ("Paris", ["paris"], 1),  # EM after normalization
        ("The Paris.", ["Paris", "Lutetia"], 1),  # article + punctuation dropped
        ("Paris France", ["Paris"], 1),  # F1 = 2·(1/2)·1/(1/2+1) = 0.667 ≥ 0.5
        ("city of Paris France", ["Paris"], 0),  # F1 = 2·(1/4)·1/(1/4+1) = 0.4 < 0.5
        ("Berlin", ["Paris"], 0),
        (None, ["Paris"], 0),  # no answer counts as wrong
        ("", ["Paris"], 0),
    ],
)
def test_correctness(pred, golds, expected):
    assert correctness(pred, golds, 0.5) == expected


def test_correctness_threshold_is_inclusive():
    # F1("x y", "a c") = 2·(1/2)(1/2)/(1) = 0.5 → C = 1 at θ_C = 0.5, 0 at 0.51.
    assert correctness("x y", ["x z"], 0.5) == 1
    assert correctness("x y", ["x z"], 0.51) == 0


# ----------------------------------------------------------------------------- P_i
def test_path_overlap_hand_computed():
    # gold1 {x,y}, gold2 {v}.
    # best_passage: gold1 ← "x y" F1 1; gold2: no passage shares a token → 0. P = (1 + 0)/2 = 0.5.
    assert path_overlap(["x y", "z w"], ["x y", "v"]) == pytest.approx(0.5)
    # bag: {x,y,z,w} vs {x,y}: P=2/4, R=1 → F1=2/3; vs {v}: 0 → (2/3 + 0)/2 = 1/3.
    assert path_overlap(["x y", "z w"], ["x y", "v"], overlap="bag") == pytest.approx(1 / 3)
    # duplicates of a passage count once: same values as retrieving it once
    assert path_overlap(["x y", "x y", "z w"], ["x y", "v"]) == pytest.approx(0.5)
    assert path_overlap(["x y", "x y", "z w"], ["x y", "v"], overlap="bag") == pytest.approx(1 / 3)
    # "a"/"an"/"the" are dropped by the SQuAD normalization: {x} vs {x,y} → 2·1·(1/2)/(3/2) = 2/3
    assert path_overlap(["a x"], ["x y"]) == pytest.approx(2 / 3)
    assert path_overlap(["a x"], ["x y"], overlap="bag") == pytest.approx(2 / 3)
    # SQuAD normalization: case, punctuation and articles do not matter
    assert path_overlap(["The Eiffel Tower, Paris."], ["eiffel tower paris"]) == pytest.approx(1.0)
    # best passage picks the better of two partial matches for one gold {x,y,z}:
    # "x q" → P=1/2, R=1/3 → F1 = 2·(1/6)/(5/6) = 0.4; "x y q" → P=2/3, R=2/3 → F1 = 2/3.
    assert path_overlap(["x q", "x y q"], ["x y z"]) == pytest.approx(2 / 3)


def test_best_passage_never_lowered_by_retrieving_more():
    # Both gold passages {x,y} and {z,w} retrieved exactly: best_passage = (1 + 1)/2 = 1.
    gold = ["x y", "z w"]
    assert path_overlap(gold, gold) == pytest.approx(1.0)
    # + 4 unrelated one-token passages {p1}…{p4}: best_passage still 1.
    more = gold + ["p1", "p2", "p3", "p4"]
    assert path_overlap(more, gold) == pytest.approx(1.0)
    # bag: exact gold → {x,y,z,w} vs {x,y}: P=2/4, R=1 → 2/3, same for {z,w} → 2/3.
    assert path_overlap(gold, gold, overlap="bag") == pytest.approx(2 / 3)
    # bag with 4 more tokens → 8 tokens: P=2/8, R=1 → F1 = 2·(1/4)/(5/4) = 0.4 per gold → 0.4.
    assert path_overlap(more, gold, overlap="bag") == pytest.approx(0.4)
    with pytest.raises(ValueError, match="overlap"):
        path_overlap(gold, gold, overlap="union")


def test_path_overlap_empty_inputs():
    assert path_overlap([], ["x y"]) == 0.0
    assert path_overlap(["x y"], []) == 0.0
    assert path_overlap(["x y"], ["", "  "]) == 0.0
    assert path_overlap(["the a an"], ["x y"]) == 0.0  # nothing left after normalization


# ----------------------------------------------------------------------------- routes
@pytest.mark.parametrize(
    ("c", "p", "expected", "w"),
    [
        (1, 0.40, Route.C_UP_P_UP, 1.0),  # P = θ_P (default 0.4) counts as ↑
        (1, 0.39, Route.C_UP_P_DOWN, 0.5),
        (0, 0.50, Route.C_DOWN_P_UP, 0.5),
        (0, 0.00, Route.C_DOWN_P_DOWN, 1.0),
    ],
)
def test_route_2d(c, p, expected, w):
    r = route(c, p, CFG)
    assert r == expected
    assert route_weight(r, CFG) == w


def test_route_1d_and_no_gold():
    answer_only = PathRouterConfig(routing="answer_only")
    path_only = PathRouterConfig(routing="path_only")
    assert route(1, 0.0, answer_only) == Route.C_UP_P_UP
    assert route(0, 0.0, answer_only) == Route.C_DOWN_P_UP
    assert route(0, 0.5, path_only) == Route.C_UP_P_UP
    assert route(0, 0.0, path_only) == Route.C_UP_P_DOWN
    # without gold evidence the route depends on C only
    assert route(1, 0.0, CFG, has_gold=False) == Route.C_UP_P_UP
    assert route(0, 0.0, CFG, has_gold=False) == Route.C_DOWN_P_UP


def test_no_route_scaling_gives_unit_weights():
    cfg = PathRouterConfig(route_scaling=False)
    assert [route_weight(r, cfg) for r in Route] == [1.0, 1.0, 1.0, 1.0]
    custom = PathRouterConfig(route_weights=(1.0, 0.2, 0.3, 0.9))
    assert [route_weight(r, custom) for r in Route] == [1.0, 0.2, 0.3, 0.9]


# ----------------------------------------------------------------------------- r_s
def test_shaping_terms():
    assert shaping_reward(1, True, False, ["q"], CFG) == pytest.approx(0.1)  # r_e
    assert shaping_reward(0, True, False, [], CFG) == pytest.approx(-0.2)  # r_l
    assert shaping_reward(5, False, True, ["a", "b", "c", "d", "e"], CFG) == pytest.approx(-0.2)  # r_o
    # r_d: "Q1", "q1!" and "the q1" normalize to "q1" → 2 repeats; + r_e
    assert shaping_reward(3, True, False, ["Q1", "q1!", "the q1"], CFG) == pytest.approx(0.1 - 0.1)
    # capped at redundancy_max_count = 4 repeats
    assert shaping_reward(7, False, False, ["x"] * 7, CFG) == pytest.approx(-0.2)
    # no answer, budget not exhausted (e.g. an error stop): nothing
    assert shaping_reward(2, False, False, ["a", "b"], CFG) == 0.0


# ----------------------------------------------------------------------------- R
def test_reward_faithful_success():
    # answer F1 1; best passage "x y" vs gold {x,y} → P = 1; searched once → r_e 0.1 → 2.1
    out = path_router_reward("Paris", ["Paris"], ["x y", "z w"], ["x y"], queries=["q"], cfg=CFG)
    assert out.score == pytest.approx(1.0 + 1.0 + 0.1)
    assert (out.c, out.route, out.route_weight, out.distill_select) == (1, Route.C_UP_P_UP, 1.0, 0.0)
    info = out.extra_info()
    assert info["acc"] == 1.0 and info["f1"] == 1.0 and info["C"] == 1 and info["route"] == 0
    assert info["P"] == pytest.approx(1.0) and info["num_searches"] == 1
    # bag reading: {x,y,z,w} vs {x,y} → P = 2·(2/4)·1/(2/4 + 1) = 2/3 → R = 1 + 2/3 + 0.1
    bag = path_router_reward(
        "Paris", ["Paris"], ["x y", "z w"], ["x y"], queries=["q"], cfg=PathRouterConfig(overlap="bag")
    )
    assert bag.score == pytest.approx(1.0 + 2 / 3 + 0.1) and bag.p == pytest.approx(2 / 3)
    assert all(isinstance(v, (int, float)) for v in info.values())


def test_reward_lazy_shortcut_is_evidence_poor():
    out = path_router_reward("Paris France", ["Paris"], [], ["x y"], queries=[], cfg=CFG)
    # r_a = 2/3, P = 0, r_l = -0.2
    assert out.score == pytest.approx(2 / 3 - 0.2)
    assert out.route == Route.C_UP_P_DOWN and out.route_weight == 0.5
    assert out.em == 0.0 and out.c == 1 and out.distill_select == 1.0


def test_reward_timeout_and_alpha():
    cfg = PathRouterConfig(alpha=0.5)
    out = path_router_reward(
        None, ["Paris"], ["x y"], ["x y"], queries=["q", "q2"], budget_exhausted=True, cfg=cfg
    )
    # r_a 0, P 1 (α=0.5 → 0.5), r_o -0.2
    assert out.score == pytest.approx(0.5 - 0.2)
    assert out.route == Route.C_DOWN_P_UP and out.route_weight == 0.5 and out.distill_select == 0.0


def test_distill_select_switches():
    args = (None, ["Paris"], [], ["x y"])
    assert path_router_reward(*args, cfg=CFG).distill_select == 1.0  # evidence-poor
    rich = ("Paris", ["Paris"], ["x y"], ["x y"])
    assert path_router_reward(*rich, cfg=CFG).distill_select == 0.0
    uniform = PathRouterConfig(kl=PathRouterKLConfig(selective=False))
    assert path_router_reward(*rich, cfg=uniform).distill_select == 1.0
    off = PathRouterConfig(kl=PathRouterKLConfig(enabled=False))
    assert path_router_reward(*args, cfg=off).distill_select == 0.0
    # no gold evidence: nothing for the teacher to add, never selected; r_p = 0
    no_gold = path_router_reward("Paris", ["Paris"], ["x y"], [], queries=["q"], cfg=uniform)
    assert no_gold.distill_select == 0.0 and no_gold.r_p == 0.0 and not no_gold.has_gold


# ----------------------------------------------------------------------------- config
def test_config_validation_messages():
    with pytest.raises(ValueError, match="route_weights needs 4"):
        PathRouterConfig(route_weights=(1.0, 0.5))
    with pytest.raises(ValueError, match="routing"):
        PathRouterConfig(routing="3d")
    with pytest.raises(ValueError, match="theta_p"):
        PathRouterConfig(theta_p=1.5)
    with pytest.raises(ValueError, match="schedule"):
        PathRouterKLConfig(schedule="step")
    with pytest.raises(ValueError, match="base_reward"):
        PathRouterConfig(base_reward="em")
    with pytest.raises(ValueError, match="overlap"):
        PathRouterConfig(overlap="union")


def test_from_mapping_and_trainer_config():
    cfg = PathRouterConfig.from_mapping(
        {"theta_p": 0.2, "route_weights": [1, 0.3, 0.4, 1], "kl": {"topk": 8}}
    )
    assert cfg.theta_p == 0.2 and cfg.route_weights == (1.0, 0.3, 0.4, 1.0) and cfg.kl.topk == 8
    with pytest.raises(ValueError, match="unknown gta.path_router keys"):
        PathRouterConfig.from_mapping({"theta": 0.2})
    with pytest.raises(ValueError, match="unknown gta.path_router.kl keys"):
        PathRouterConfig.from_mapping({"kl": {"lambda": 0.2}})
    assert path_router_config_from_trainer({}) == PathRouterConfig()
    omegaconf = pytest.importorskip("omegaconf")
    node = omegaconf.OmegaConf.create(
        {"gta": {"path_router": {"alpha": 0.5, "kl": {"schedule": "constant"}}}}
    )
    parsed = path_router_config_from_trainer(node)
    assert parsed.alpha == 0.5 and parsed.kl.schedule == "constant"


# ----------------------------------------------------------------------------- real data
def test_musique_gold_evidence_scores_above_distractors():
    """On the bundled MuSiQue questions, retrieving the gold paragraphs is P↑ and beats
    retrieving the same number of distractor paragraphs (Stage-I style gold = doc texts)."""
    import json

    from gta_verl.bundled import MUSIQUE_QA as path
    from gta_verl.data.loaders import read_musique_qa

    examples = {ex.qid: ex for ex in read_musique_qa(path).records}
    raw = json.loads(path.read_text(encoding="utf-8"))
    wins = total = 0
    for rec in raw:
        ex = examples.get(str(rec["id"]))
        if ex is None or not ex.supporting_texts:
            continue
        distract = [
            f"{p['title']}\n{p['paragraph_text']}" for p in rec["paragraphs"] if not p["is_supporting"]
        ]
        gold_p = path_overlap(ex.supporting_texts, ex.supporting_texts)
        bad_p = path_overlap(distract[: len(ex.supporting_texts)], ex.supporting_texts)
        assert gold_p >= CFG.theta_p
        total += 1
        wins += gold_p > bad_p
    assert total >= 90
    assert wins == total


def test_the_empty_answer_never_beats_a_wrong_guess():
    """``<answer></answer>`` is an answer action: it takes the lazy penalty, so it never pays better than a
    wrong guess (a 0.0 would reward answering nothing over answering wrong)."""
    from gta_verl.rewards.path_router import path_router_reward

    gold, no_gold_texts = ["Paris"], []
    # no search: wrong guess = F1 0 + lazy -0.2 = -0.2; empty = F1 0 + lazy -0.2 = -0.2
    wrong = path_router_reward("Berlin", gold, [], no_gold_texts, queries=[], cfg=CFG)
    empty = path_router_reward("", gold, [], no_gold_texts, queries=[], cfg=CFG)
    assert wrong.score == pytest.approx(-0.2) and empty.score == pytest.approx(-0.2)
    # one search: wrong = 0 + exploration 0.1 = 0.1; empty = 0 (no bonus for answering nothing)
    wrong1 = path_router_reward("Berlin", gold, [], no_gold_texts, queries=["q"], cfg=CFG)
    empty1 = path_router_reward("  ", gold, [], no_gold_texts, queries=["q"], cfg=CFG)
    assert wrong1.score == pytest.approx(0.1) and empty1.score == pytest.approx(0.0)
    # never answered and out of budget: timeout -0.2; an empty answer is not a timeout
    timeout = path_router_reward(None, gold, [], no_gold_texts, queries=["q"], budget_exhausted=True, cfg=CFG)
    assert timeout.score == pytest.approx(-0.2)
    assert path_router_reward(
        "", gold, [], no_gold_texts, queries=["q"], budget_exhausted=True, cfg=CFG
    ).score == pytest.approx(0.0)


# ----------------------------------------------------------------------------- the paper preset (Table 5)
def _paper_cfg():
    from omegaconf import OmegaConf

    import gta_verl
    from gta_verl.rewards.path_router import PathRouterConfig

    preset = Path(gta_verl.__file__).parent / "config" / "preset" / "path_router_paper.yaml"
    return PathRouterConfig.from_mapping(OmegaConf.load(preset).gta.path_router)


# Gold evidence: two 4-token passages; the targets d1, d2 are their documents.
GOLD = ["b c d e", "f g h i"]  # no article: SQuAD normalization drops "a"
TARGETS = ["d1", "d2"]


def _paper(prediction, texts, queries, turn_ids, budget_exhausted=False):
    from gta_verl.rewards.path_router import path_router_reward

    return path_router_reward(
        prediction,
        ["Paris"],
        texts,
        GOLD,
        queries=queries,
        budget_exhausted=budget_exhausted,
        cfg=_paper_cfg(),
        turn_doc_ids=turn_ids,
        target_doc_ids=TARGETS,
    )


def test_paper_preset_values():
    cfg = _paper_cfg()
    assert (cfg.alpha, cfg.theta_c, cfg.theta_p, cfg.overlap) == (0.5, 0.5, 0.1, "bag")
    assert cfg.route_weights == (1.0, 0.5, 0.3, 1.0) and cfg.kl.topk == 128 and cfg.no_answer_reward == -1.0


def test_paper_exploration_bonus_needs_two_searches_and_a_correct_answer():
    # Both gold passages shown over 2 searches: bag P = F1 of the 8-token bag against each 4-token passage
    # = 2·(4/8)·(4/4)/(4/8 + 4/4) = 2/3. r_a = 1, r_e = +0.2 → R = 1 + 0.5·2/3 + 0.2 = 1.5333.
    two = _paper("Paris", GOLD, ["q one", "q two"], [["d1"], ["d2"]])
    assert two.r_s == pytest.approx(0.2) and two.score == pytest.approx(1 + 0.5 * 2 / 3 + 0.2)
    # One search showing gold 1: P = (1 + 0)/2 = 0.5 ≥ θ_P, so no lazy penalty, and no r_e (one search):
    # R = 1 + 0.5·0.5 = 1.25. (The default rule would pay r_e = +0.1 here.)
    one = _paper("Paris", ["b c d e"], ["q one"], [["d1"]])
    assert one.r_s == 0.0 and one.score == pytest.approx(1.25)
    # Two searches, wrong answer: no r_e. r_a = 0 → R = 0.5·2/3 = 0.3333.
    wrong = _paper("Rome", GOLD, ["q one", "q two"], [["d1"], ["d2"]])
    assert wrong.r_s == 0.0 and wrong.score == pytest.approx(0.5 * 2 / 3)


def test_paper_lazy_penalty_is_a_stop_after_at_most_one_search_with_poor_coverage():
    # One search showing "x y z" (no gold token): P = 0 < 0.1 → r_l = −0.25; wrong answer → R = −0.25.
    lazy = _paper("Rome", ["x y z"], ["q one"], [["x"]])
    assert lazy.r_s == pytest.approx(-0.25) and lazy.score == pytest.approx(-0.25)
    # No search at all: also lazy, R = −0.25.
    assert _paper("Rome", [], [], []).score == pytest.approx(-0.25)
    # Two searches with the same poor coverage: not a single-turn stop → R = 0.
    assert _paper("Rome", ["x y z", "u v w"], ["q one", "q two"], [["x"], ["u"]]).score == 0.0
    # One search whose passage covers enough: "b c x" against "b c d e": 2 common tokens,
    # F1 = 2·(2/3)·(2/4)/(2/3 + 2/4) = 4/7; against "f g h i" 0 → P = 2/7 = 0.2857 ≥ 0.1: not lazy,
    # R = 0 + 0.5·2/7 = 0.1429.
    covered = _paper("Rome", ["b c x"], ["q one"], [["d1"]])
    assert covered.r_s == 0.0 and covered.score == pytest.approx(0.5 * 2 / 7)


def test_paper_timeout_and_base_reward():
    # No answer action, budget exhausted, 2 searches showing nothing of the gold: R = R_0 + r_o = −1 − 0.5.
    out = _paper(None, ["x y z", "u v w"], ["q one", "q two"], [["x"], ["u"]], budget_exhausted=True)
    assert out.r_s == pytest.approx(-0.5) and out.score == pytest.approx(-1.5)
    # No answer action, budget not exhausted (the response stopped without one): R = R_0 = −1, even with
    # both gold passages shown (α·P is not paid without an answer).
    assert _paper(None, GOLD, ["q one", "q two"], [["d1"], ["d2"]]).score == pytest.approx(-1.0)
    # Under the defaults the first trajectory gets R = 0 + 1.0·0 + r_o(−0.2) = −0.2 (no base reward).
    from gta_verl.rewards.path_router import path_router_reward

    default = path_router_reward(
        None, ["Paris"], ["x y z", "u v w"], GOLD, queries=["q one", "q two"], budget_exhausted=True
    )
    assert default.score == pytest.approx(-0.2)


def test_paper_redundancy_is_re_retrieving_covered_evidence():
    # Searches show [d1, x], [d1], [d1, d2]: search 2 re-shows covered d1 and nothing new → 1 redundant;
    # search 3 adds d2 → not. Repeated query text does not count under this rule ("q" three times).
    # P: distinct shown texts "b c d e", "x", "f g h i" → a 9-token bag; F1 against each gold passage
    # 2·(4/9)·1/(4/9 + 1) = 8/13, so P = 8/13. Correct after 3 searches: r_e = +0.2; r_d = −0.1·1.
    # R = 1 + 0.5·8/13 + 0.2 − 0.1 = 1.4077.
    texts = ["b c d e", "x", "b c d e", "b c d e", "f g h i"]
    out = _paper("Paris", texts, ["q", "q", "q"], [["d1", "x"], ["d1"], ["d1", "d2"]])
    assert out.p == pytest.approx(8 / 13)
    assert out.r_s == pytest.approx(0.2 - 0.1) and out.score == pytest.approx(1 + 0.5 * 8 / 13 + 0.1)


def test_covered_repeats_by_hand():
    from gta_verl.rewards.path_router import covered_repeats

    # [d1]; [d1] (covered, nothing new: 1); [d2] (new); [d1, d2] (both covered: 2); [z] (no target)
    assert covered_repeats([["d1"], ["d1"], ["d2"], ["d1", "d2"], ["z"]], ["d1", "d2"]) == 2
    assert covered_repeats([["d1"], ["d1"]], []) == 0  # no target ids: nothing counts


def test_paper_preset_route_weight_of_an_evidence_seeking_failure():
    # Wrong answer with P = 2/3 ≥ θ_P → C↓P↑, weight w_preserve = 0.3 (defaults: 0.5).
    out = _paper("Rome", GOLD, ["q one", "q two"], [["d1"], ["d2"]])
    assert out.route == 2 and out.route_weight == 0.3


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("exploration_rule", "often"),
        ("lazy_rule", "never"),
        ("redundancy_rule", "x"),
        ("no_answer_reward", math.nan),
    ],
)
def test_unknown_rules_and_a_non_finite_base_reward_are_refused(key, value):
    from gta_verl.rewards.path_router import PathRouterConfig

    with pytest.raises(ValueError, match=key):
        PathRouterConfig(**{key: value})
