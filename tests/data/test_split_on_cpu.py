"""Held-out (and RL-prompt) splits with no target document shared across a side."""

from __future__ import annotations

import random

import pytest

from gta_verl.cpu.warm_start import SFTSettings, settings_key
from gta_verl.data.split import split_by_document_communities, split_disjoint_targets, split_sft_rl_heldout


def test_linked_questions_stay_together_and_no_target_crosses() -> None:
    # q0-q1 share d2, q1-q2 share d3 -> component {0,1,2}; q3 alone; q4-q5 share d9 -> {4,5}
    targets = [["d1", "d2"], ["d2", "d3"], ["d3", "d4"], ["d5", "d6"], ["d7", "d9"], ["d9", "d8"]]
    for seed in range(6):
        train, held = split_disjoint_targets(targets, 0.3, seed)
        assert sorted(train + held) == list(range(6))
        assert not {d for i in train for d in targets[i]} & {d for i in held for d in targets[i]}
        for comp in ({0, 1, 2}, {3}, {4, 5}):
            assert comp <= set(train) or comp <= set(held)
        # 0.3 x 6 = 1.8 rows wanted: components are added until >= 1.8, so 2 or 3 rows (or 1 + 2 = 3)
        assert 2 <= len(held) <= 4


def test_isolated_questions_split_to_the_fraction() -> None:
    targets = [[f"d{i}"] for i in range(10)]
    train, held = split_disjoint_targets(targets, 0.2, seed=1)
    assert len(held) == 2 and len(train) == 8  # 0.2 x 10 = 2 singletons


def test_fraction_is_checked() -> None:
    with pytest.raises(ValueError, match="heldout_fraction"):
        split_disjoint_targets([["a"]], 1.0)


def test_three_way_split_shares_no_target_between_any_two_sides() -> None:
    # 20 singletons and one linked pair (q20, q21 share "x"): 22 rows
    targets = [[f"d{i}"] for i in range(20)] + [["x", "y"], ["x", "z"]]
    for seed in range(5):
        sft, rl, held = split_sft_rl_heldout(targets, 0.2, 0.25, seed)
        assert sorted(sft + rl + held) == list(range(22))
        sides = [{d for i in side for d in targets[i]} for side in (sft, rl, held)]
        assert not sides[0] & sides[1] and not sides[0] & sides[2] and not sides[1] & sides[2]
        assert {20, 21} <= set(sft) or {20, 21} <= set(rl) or {20, 21} <= set(held)
        # held-out: 0.2 x 22 = 4.4 wanted -> 5 or 6 rows; RL: 0.25 x the rest (16-17) = 4.0-4.25 -> 4 to 6
        assert 5 <= len(held) <= 6 and 4 <= len(rl) <= 6


def test_no_rl_fraction_is_the_two_way_split() -> None:
    targets = [[f"d{i}"] for i in range(10)]
    sft, rl, held = split_sft_rl_heldout(targets, 0.2, 0.0, seed=1)
    assert (sft, held) == split_disjoint_targets(targets, 0.2, seed=1) and rl == []


def test_rl_fraction_left_at_zero_keeps_the_warm_start_cache_key() -> None:
    # A warm start built before the knob existed is found again: the default adds nothing to the key.
    assert "rl_fraction" not in settings_key(SFTSettings())
    assert settings_key(SFTSettings(rl_fraction=0.25))["rl_fraction"] == 0.25
    assert not {"split", "val_rows"} & set(settings_key(SFTSettings()))
    assert settings_key(SFTSettings(split="documents", val_rows=256))["split"] == "documents"


def _triangle(prefix: str) -> list[list[str]]:
    return [[f"{prefix}1", f"{prefix}2"], [f"{prefix}2", f"{prefix}3"], [f"{prefix}1", f"{prefix}3"]]


def test_document_split_keeps_communities_whole_and_drops_the_bridge() -> None:
    # Three triangles of documents (a, b, c), each the targets of three questions, plus one question
    # bridging a1-b1. Modularity puts each triangle in its own community. 9 documents: held-out quota
    # 0.3 * 9 = 2.7 is met by the first shuffled triangle (3 docs), RL's 2.7 by the second, SFT gets the
    # third; the bridge (row 9) has targets on two sides and is dropped: 3 + 3 + 3 + 1 = 10 rows.
    targets = _triangle("a") + _triangle("b") + _triangle("c") + [["a1", "b1"]]
    for seed in range(4):
        cut = split_by_document_communities(targets, 0.3, 0.3, seed)
        assert (len(cut.sft), len(cut.rl), len(cut.heldout), cut.dropped) == (3, 3, 3, [9])
        for side in (cut.sft, cut.rl, cut.heldout):
            assert side in ([0, 1, 2], [3, 4, 5], [6, 7, 8])
        assert cut.counts() == {"sft": 3, "rl": 3, "heldout": 3, "dropped_straddling_sides": 1}


def test_document_split_shares_no_target_and_loses_no_row() -> None:
    rng = random.Random(7)
    targets = [rng.sample([f"d{i}" for i in range(60)], rng.choice((2, 3))) for _ in range(400)]
    for seed in (0, 1):
        cut = split_by_document_communities(targets, 0.15, 0.15, seed)
        sides = [cut.sft, cut.rl, cut.heldout]
        assert sorted(cut.sft + cut.rl + cut.heldout + cut.dropped) == list(range(400))
        docs = [{d for i in side for d in targets[i]} for side in sides]
        assert not (docs[0] & docs[1]) and not (docs[0] & docs[2]) and not (docs[1] & docs[2])
        assert cut == split_by_document_communities(targets, 0.15, 0.15, seed)  # a function of the seed


def test_document_split_rejects_fractions_that_leave_no_sft_side() -> None:
    with pytest.raises(ValueError, match="rl_fraction"):
        split_by_document_communities([["a", "b"]], 0.5, 0.5)


def test_evaluation_questions_split_by_documents_seen_in_training(musique_qa) -> None:
    from gta_verl.data.split import split_by_seen_documents

    # Hand case: q0 shares d2 with a training target, q1 shares nothing, q2 has no gold documents.
    assert split_by_seen_documents([["d1", "d2"], ["d3"], []], [["d2", "d9"], ["d8"]]) == ([1, 2], [0])
    # The bundled real MuSiQue questions against a "training set" of the first question's gold
    # documents: the first question is shared, and so is every other question citing one of them.
    qa = musique_qa[:20]
    seen = [list(qa[0].supporting_doc_ids)]
    disjoint, shared = split_by_seen_documents([list(q.supporting_doc_ids) for q in qa], seen)
    assert shared[0] == 0 and sorted(disjoint + shared) == list(range(20))
    assert all(not set(qa[i].supporting_doc_ids) & set(seen[0]) for i in disjoint)
    assert all(set(qa[i].supporting_doc_ids) & set(seen[0]) for i in shared)
