"""Held-out (and RL-prompt) splits with no target document shared across a side."""

from __future__ import annotations

import pytest

from gta_verl.cpu.warm_start import SFTSettings, settings_key
from gta_verl.data.split import split_disjoint_targets, split_sft_rl_heldout


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
