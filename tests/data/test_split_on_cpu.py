"""Held-out split with no target document shared across it (issue 19 item 1)."""

from __future__ import annotations

import pytest

from gta_verl.data.split import split_disjoint_targets


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
