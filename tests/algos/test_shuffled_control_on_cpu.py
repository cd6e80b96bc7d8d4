"""``gta_shuffled_grpo``: GRPO on within-group shuffled scores (the learning experiment's control)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gta_verl.algos.shuffled_control import compute_shuffled_grpo_advantage, group_permutation


def test_permutation_moves_rows_only_within_their_group_and_is_seeded():
    index = np.array(["g1", "g1", "g1", "g2", "g2", "g3"], dtype=object)
    perm = group_permutation(index)
    assert sorted(perm[:3]) == [0, 1, 2] and sorted(perm[3:5]) == [3, 4] and perm[5] == 5
    assert (group_permutation(index) == perm).all()  # same ids, same permutation
    # Across 50 distinct 4-row groups some permutation is not the identity (the control shuffles at all).
    many = np.array([f"u{k}" for k in range(50) for _ in range(4)], dtype=object)
    assert (group_permutation(many) != np.arange(200)).any()


def test_advantages_by_hand(monkeypatch):
    from gta_verl.algos import shuffled_control

    # A fixed permutation (row 0 takes row 2's score, row 1 row 0's, row 2 row 1's), so the arithmetic is
    # checked apart from the seeded permutation (its contract is the test above).
    monkeypatch.setattr(shuffled_control, "group_permutation", lambda index: np.array([2, 0, 1]))
    # One group, scores 1, 2, 3 on the last response token, Dr. GRPO: mean (1 + 2 + 3) / 3 = 2;
    # row 0: 3 − 2 = +1, row 1: 1 − 2 = −1, row 2: 2 − 2 = 0, on every mask-1 token.
    rewards = torch.zeros(3, 4)
    rewards[:, -1] = torch.tensor([1.0, 2.0, 3.0])
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.float32)
    index = np.array(["uid-a"] * 3, dtype=object)
    adv, ret = compute_shuffled_grpo_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    expected = torch.tensor([[1.0, 1.0, 0.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    assert torch.equal(adv, expected) and torch.equal(ret, adv)
    # With std scaling: the unbiased std of (1, 2, 3) is 1, so +1 / (1 + 1e-6) on row 0.
    adv_std, _ = compute_shuffled_grpo_advantage(rewards, mask, index)
    assert adv_std[:, 1].tolist() == pytest.approx([1 / (1 + 1e-6), -1 / (1 + 1e-6), 0.0])


def test_a_group_of_one_keeps_its_score():
    # verl's grpo: a group of one has mean 0 and std 1, so A = R / (1 + ε).
    adv, _ = compute_shuffled_grpo_advantage(
        torch.tensor([[0.0, 0.5]]), torch.ones(1, 2), np.array(["solo"], dtype=object)
    )
    assert adv[0].tolist() == pytest.approx([0.5 / (1 + 1e-6)] * 2)
