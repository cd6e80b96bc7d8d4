"""gta/* step metrics from hand-built TransferQueue extra_fields (hand-computed expectations)."""

from __future__ import annotations

import pytest

from gta_verl.algos.step_metrics import evidence_step_metrics, kl_token_frac
from gta_verl.data import schema


def _traj(errors, searches, invalid, answer, info):
    return {
        schema.EF_RETRIEVAL_ERRORS: errors,
        schema.EF_NUM_SEARCHES: searches,
        schema.EF_INVALID_ACTIONS: invalid,
        schema.EF_ANSWER: answer,
        "reward_extra_info": info,
    }


STAGE1 = [
    _traj(0, 2, 0, "Nolan", {"acc": 1.0, "target_doc_cov": 1.0, "complete_chain": 1.0, "has_targets": 1.0}),
    _traj(1, 3, 1, None, {"acc": 0.0, "target_doc_cov": 0.5, "complete_chain": 0.0, "has_targets": 1.0}),
    # no target documents: excluded from TargetDocCov and the complete-chain rate
    _traj(0, 1, 0, "x", {"acc": 0.0, "target_doc_cov": 0.0, "complete_chain": 0.0, "has_targets": 0.0}),
]


def test_stage1_metrics():
    m = evidence_step_metrics(STAGE1)
    # acc: (1 + 0 + 0) / 3
    assert m["gta/acc"] == pytest.approx(1 / 3)
    # TargetDocCov over rows with targets: (1.0 + 0.5) / 2 = 0.75; complete chain: (1 + 0) / 2
    assert m["gta/target_doc_cov"] == pytest.approx(0.75)
    assert m["gta/complete_chain_rate"] == pytest.approx(0.5)
    # errors: 0 + 1 + 0 = 1 of 2 + 3 + 1 = 6 searches; searches/traj 6 / 3 = 2; invalid 1 / 3
    assert m["gta/retrieval_errors"] == 1.0
    assert m["gta/retrieval_error_rate"] == pytest.approx(1 / 6)
    assert m["gta/num_searches"] == pytest.approx(2.0)
    assert m["gta/invalid_actions"] == pytest.approx(1 / 3)
    # answers: 2 of 3
    assert m["gta/answer_rate"] == pytest.approx(2 / 3)
    # PathRouter keys are absent under the Stage-I reward, not logged as 0
    assert not any(k.startswith(("gta/route_share", "gta/P", "gta/kl_")) for k in m)


def test_padding_rows_are_dropped():
    m = evidence_step_metrics(STAGE1, keep=[True, False, True])
    # errors 0 + 0; acc (1 + 0) / 2; TargetDocCov only row 0 (row 2 has no targets) = 1.0
    assert m["gta/retrieval_errors"] == 0.0
    assert m["gta/acc"] == pytest.approx(0.5)
    assert m["gta/target_doc_cov"] == pytest.approx(1.0)
    assert evidence_step_metrics(STAGE1, keep=[False] * 3) == {}


def test_path_router_metrics():
    def pr(route, p, gold, select):
        return _traj(
            0, 1, 0, "a", {"route": route, "P": p, "has_gold_evidence": gold, "distill_select": select}
        )

    rows = [pr(0, 0.8, 1.0, 0.0), pr(1, 0.0, 1.0, 1.0), pr(1, 0.2, 1.0, 1.0), pr(3, 0.9, 0.0, 0.0)]
    m = evidence_step_metrics(rows)
    # routes 0, 1, 1, 3 → shares C+P+ 1/4, C+P- 2/4, C-P+ 0, C-P- 1/4
    assert [m[f"gta/route_share/{r}"] for r in ("C+P+", "C+P-", "C-P+", "C-P-")] == [0.25, 0.5, 0.0, 0.25]
    # P over rows with gold evidence: (0.8 + 0.0 + 0.2) / 3 = 1/3 (row 3 has none)
    assert m["gta/P"] == pytest.approx(1 / 3)
    # selected for the KL: (0 + 1 + 1 + 0) / 4
    assert m["gta/kl_select_frac"] == pytest.approx(0.5)


def test_kl_token_frac():
    # 12 distilled tokens of 48 response tokens = 0.25; no tokens → 0
    assert kl_token_frac(12, 48) == {"gta/kl_token_frac": 0.25}
    assert kl_token_frac(0, 0) == {"gta/kl_token_frac": 0.0}


def test_answer_rate_of_tool_agent_rows():
    # verl's tool_agent writes no gta/answer: the manager's has_answer decides (2 of 3 answered);
    # a row of our loop keeps its recorded answer (None = no answer, whatever has_answer says).
    tool_rows = [
        {schema.EF_NUM_SEARCHES: 1, "reward_extra_info": {"has_answer": 1.0}},
        {schema.EF_NUM_SEARCHES: 0, "reward_extra_info": {"has_answer": 0.0}},
        {schema.EF_NUM_SEARCHES: 2, "reward_extra_info": {"has_answer": 1.0}},
    ]
    assert evidence_step_metrics(tool_rows)["gta/answer_rate"] == pytest.approx(2 / 3)
    mixed = [_traj(0, 1, 0, None, {"has_answer": 1.0}), tool_rows[0]]
    assert evidence_step_metrics(mixed)["gta/answer_rate"] == pytest.approx(1 / 2)


def test_signal_step_metrics_by_hand():
    from gta_verl.algos.step_metrics import signal_step_metrics

    # Group g1: rollout 0 has A = +0.5 on its policy token; group g2: every advantage 0 on policy tokens,
    # rollout 3's 0.7 sits on an observation token (mask 0) and so is no signal; group g3 one rollout −0.2.
    uids = ["g1", "g1", "g2", "g2", "g3"]
    adv = [[0.5, 0.5], [0.0, 0.0], [0.0, 0.0], [0.0, 0.7], [-0.2]]
    mask = [[1, 1], [1, 1], [1, 1], [1, 0], [1]]
    got = signal_step_metrics(uids, adv, mask)
    # groups with signal: g1, g3 of 3 → 2/3; rollouts: #0 and #4 of 5 → 0.4
    assert got == {"gta/groups_with_signal": 2 / 3, "gta/rollouts_with_signal": 0.4}
    assert signal_step_metrics([], [], []) == {}
    with pytest.raises(ValueError, match="2 uids, 1 advantage rows"):
        signal_step_metrics(["a", "b"], [[0.0]], [[1]])
