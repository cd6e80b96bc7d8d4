"""Validation: every query must retrieve its target document; rule checks carry reasons."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gta_verl.data.types import Trajectory, TrajectoryTurn
from gta_verl.synth.validate import ValidationConfig, check_rules, validate_trajectories


def _traj(
    kb, titles, queries, answer="Hawaii", question="Which state has as capital the city where Obama was born?"
):
    ids = [kb.passages[[p.title for p in kb.passages].index(t)].doc_id for t in titles]
    turns = tuple(
        TrajectoryTurn(f"step {i}", q, d) for i, (q, d) in enumerate(zip(queries, ids, strict=True))
    )
    return Trajectory(question=question, answer=answer, turns=turns, path_doc_ids=tuple(ids))


@pytest.fixture()
def passages(tiny_kb):
    return {p.doc_id: p for p in tiny_kb.passages}


def test_accepts_executable_and_rejects_unretrievable(tiny_kb, lexical_retriever, passages):
    good = _traj(tiny_kb, ["Barack Obama", "Honolulu"], ["Barack Obama born", "Honolulu capital"])
    bad = _traj(tiny_kb, ["Barack Obama", "Honolulu"], ["Barack Obama born", "Kingston Ulster County city"])
    ok, miss = validate_trajectories([good, bad], lexical_retriever, passages)
    assert ok.ok and ok.turn_hits == (True, True)
    assert not miss.ok and miss.rules_ok and miss.reason == "retrieval:miss_turn_2"
    assert miss.turn_hits == (True, False)
    assert lexical_retriever.calls == 4  # one retrieval per turn


def test_rules_run_before_retrieval(tiny_kb, lexical_retriever, passages):
    leaked = _traj(
        tiny_kb,
        ["Barack Obama", "Honolulu"],
        ["Barack Obama born", "Honolulu capital"],
        question="Is Hawaii the state whose capital is Obama's birthplace?",
    )
    (r,) = validate_trajectories([leaked], lexical_retriever, passages)
    assert r.reason == "rule:answer_in_question" and not r.rules_ok and lexical_retriever.calls == 0


def test_validation_off_keeps_rule_passing(tiny_kb, passages):
    t = _traj(tiny_kb, ["Barack Obama", "Honolulu"], ["Barack Obama born", "zzz"])
    (r,) = validate_trajectories([t], None, passages, ValidationConfig(check_retrieval=False))
    assert r.ok and r.turn_hits == ()
    with pytest.raises(ValueError, match="retriever"):
        validate_trajectories([t], None, passages)


def test_each_rule_has_its_reason(tiny_kb, passages):
    base = _traj(tiny_kb, ["Barack Obama", "Honolulu"], ["Barack Obama born", "Honolulu capital"])
    assert check_rules(base, passages) is None
    cases = {
        "rule:empty_answer": replace(base, answer=" the "),
        "rule:long_answer": replace(
            base, answer="the capital city of the state of Hawaii in the middle of the Pacific Ocean"
        ),
        "rule:answer_not_in_last_doc": replace(base, answer="Illinois"),
        "rule:duplicate_queries": replace(
            base, turns=(base.turns[0], replace(base.turns[1], query="barack obama BORN"))
        ),
        "rule:empty_query": replace(base, turns=(base.turns[0], replace(base.turns[1], query="  "))),
        "rule:turns_ne_hops": replace(base, turns=base.turns[:1]),
        "rule:target_order": replace(base, turns=base.turns[::-1]),
        "rule:unknown_doc": replace(base, path_doc_ids=("dnope", base.path_doc_ids[1])),
        "rule:pasted_document_text": replace(
            base, question="Barack Obama was born in Honolulu. He was the 44th president of which place?"
        ),
    }
    for reason, traj in cases.items():
        assert check_rules(traj, passages, ValidationConfig(paste_ngram=8)) == reason, reason


def test_real_retriever_accepts_and_rejects_on_musique(musique_kb, musique_retriever, musique_qa):
    passages = {p.doc_id: p for p in musique_kb.passages}
    qa = next(q for q in musique_qa if len(q.supporting_doc_ids) == 2)
    d1, d2 = (passages[d] for d in qa.supporting_doc_ids)
    answer = qa.answers[0]
    good = Trajectory(
        question=qa.question,
        answer=answer,
        turns=(
            TrajectoryTurn("", d1.title + " " + d1.text[:80], d1.doc_id),
            TrajectoryTurn("", d2.title + " " + d2.text[:80], d2.doc_id),
        ),
        path_doc_ids=(d1.doc_id, d2.doc_id),
    )
    bad = replace(
        good, turns=(good.turns[0], replace(good.turns[1], query="recipe for banana bread with walnuts"))
    )
    cfg = ValidationConfig(paste_ngram=64)
    r_good, r_bad = validate_trajectories([good, bad], musique_retriever, passages, cfg)
    if r_good.reason and r_good.reason.startswith("rule:"):
        pytest.skip(f"picked MuSiQue example fails a rule ({r_good.reason}); retrieval not exercised")
    assert r_good.ok, r_good
    assert r_bad.reason == "retrieval:miss_turn_2"
