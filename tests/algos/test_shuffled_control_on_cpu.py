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


def test_advantages_by_hand():
    # One group of 3 with scores 1, 2, 3 (on the last response token), Dr. GRPO (no std scaling):
    # mean = (1 + 2 + 3) / 3 = 2, so grpo's advantages would be −1, 0, +1; the control gives row i the
    # centred score of row perm[i]: (score[perm[i]] − 2), on every mask-1 token of row i.
    rewards = torch.zeros(3, 4)
    rewards[:, -1] = torch.tensor([1.0, 2.0, 3.0])
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.float32)
    index = np.array(["uid-a"] * 3, dtype=object)
    perm = group_permutation(index)
    adv, ret = compute_shuffled_grpo_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    expected = torch.tensor([[1.0, 2.0, 3.0][p] - 2.0 for p in perm]).unsqueeze(-1) * mask
    assert torch.equal(adv, expected) and torch.equal(ret, adv)
    # Same multiset as grpo's per group: {−1, 0, +1}.
    assert sorted(adv[:, 1].tolist()) == [-1.0, 0.0, 1.0]
    # With std scaling: std of (1, 2, 3) = 1 (unbiased), so the values are (x − 2) / (1 + 1e-6).
    adv_std, _ = compute_shuffled_grpo_advantage(rewards, mask, index)
    assert adv_std[:, 1].tolist() == pytest.approx([([1.0, 2.0, 3.0][p] - 2.0) / (1 + 1e-6) for p in perm])


def test_a_group_of_one_keeps_its_score():
    # verl's grpo: a group of one has mean 0 and std 1, so A = R / (1 + ε).
    adv, _ = compute_shuffled_grpo_advantage(
        torch.tensor([[0.0, 0.5]]), torch.ones(1, 2), np.array(["solo"], dtype=object)
    )
    assert adv[0].tolist() == pytest.approx([0.5 / (1 + 1e-6)] * 2)
