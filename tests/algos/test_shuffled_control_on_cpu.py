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
    monkeypatch.setattr(shuffled_control, "group_permutation", lambda index, *_: np.array([2, 0, 1]))
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


# ------------------------------------------------------------------ reproducible by seed
def _batch(uids: list[str]) -> tuple[np.ndarray, torch.Tensor]:
    """20 groups of 4 rows, rewards 0, 1, 2, 3 + 10·group on the last token; ids as given (uuid-like)."""
    index = np.array([u for u in uids for _ in range(4)], dtype=object)
    rewards = torch.zeros(len(index), 2)
    rewards[:, -1] = torch.tensor([float(r % 4 + 10 * (r // 4)) for r in range(len(index))])
    return index, rewards


def _control(index, rewards, seed, step):
    from gta_verl.algos.advantages import AdvantageContext, advantage_context

    with advantage_context(AdvantageContext(seed=seed, step=step)):
        adv, _ = compute_shuffled_grpo_advantage(
            rewards, torch.ones_like(rewards), index, norm_adv_by_std_in_grpo=False
        )
    return adv[:, 0]


def test_two_runs_of_one_seed_shuffle_identically_whatever_verl_names_their_groups():
    import uuid

    # Two runs draw their uids with uuid4, as verl does: the ids differ, the batch layout does not.
    run1, run2 = (
        _batch([str(uuid.uuid4()) for _ in range(20)]),
        _batch([str(uuid.uuid4()) for _ in range(20)]),
    )
    assert (run1[0] != run2[0]).all()
    a1, a2 = _control(*run1, seed=3, step=7), _control(*run2, seed=3, step=7)
    assert torch.equal(a1, a2)
    # Another seed, or another step, shuffles differently (20 groups of 4: some group's draw differs).
    assert not torch.equal(a1, _control(*run1, seed=4, step=7))
    assert not torch.equal(a1, _control(*run1, seed=3, step=8))
    # Each group keeps its reward multiset: Dr. GRPO centring by the group mean 1.5 + 10·g, so group g's
    # advantages are a permutation of (0, 1, 2, 3) − 1.5 = (−1.5, −0.5, 0.5, 1.5).
    for g in range(20):
        assert sorted(a1[4 * g : 4 * g + 4].tolist()) == [-1.5, -0.5, 0.5, 1.5]


def test_permutation_is_the_documented_draw():
    # Group position p permutes its rows with default_rng([seed, step, p]); groups "x" (rows 0, 2) and
    # "y" (rows 1, 3, 4): positions 0 and 1 in the batch.
    index = np.array(["x", "y", "x", "y", "y"], dtype=object)
    px = np.random.default_rng([5, 2, 0]).permutation(2)
    py = np.random.default_rng([5, 2, 1]).permutation(3)
    expected = np.zeros(5, dtype=int)
    expected[[0, 2]] = np.array([0, 2])[px]
    expected[[1, 3, 4]] = np.array([1, 3, 4])[py]
    assert (group_permutation(index, seed=5, step=2) == expected).all()
    with pytest.raises(ValueError, match="seed and step >= 0"):
        group_permutation(index, seed=-1)


# ------------------------------------------------------------------ ids that cannot be grouped
@pytest.mark.parametrize(
    "ids",
    [
        [1, 1, "1", "1"],  # str(1) == "1": once merged into one group, scores moved between the two
        [0, 0, 1.5, 1.5],
        [float("nan")] * 4,  # NaN != NaN: one group under str(), four under ==
        ["a", "a", None, None],
    ],
)
def test_ids_of_mixed_kinds_or_nan_are_refused(ids):
    index = np.array(ids, dtype=object)
    with pytest.raises(ValueError, match="all strings or all integers"):
        group_permutation(index)
    with pytest.raises(ValueError, match="all strings or all integers"):
        compute_shuffled_grpo_advantage(torch.zeros(4, 2), torch.ones(4, 2), index)


def test_integer_ids_group_by_value():
    # numpy and Python integers of one value are one group (rows 0-3), 2 another (rows 4, 5).
    index = np.array([np.int64(1), 1, np.int32(1), 1, 2, 2], dtype=object)
    perm = group_permutation(index, seed=1)
    assert sorted(perm[:4]) == [0, 1, 2, 3] and sorted(perm[4:]) == [4, 5]


def test_an_excluded_row_keeps_zero_and_stays_out_of_the_shuffle():
    from gta_verl.algos.advantages import AdvantageContext, advantage_context

    # One group, scores 1, 2, 9 and row 2 a reward error (scored 0 by its manager; say 9 here to see it
    # is not used). Valid rows 0, 1: mean (1 + 2)/2 = 1.5; the two valid rows receive 1 and 2 in some order,
    # so their Dr. GRPO advantages are {−0.5, +0.5}; row 2 gets 0.
    rewards = torch.tensor([[0.0, 1.0], [0.0, 2.0], [0.0, 9.0]])
    index = np.array(["g"] * 3, dtype=object)
    for seed in range(6):
        with advantage_context(AdvantageContext(seed=seed, excluded=(False, False, True))):
            adv, _ = compute_shuffled_grpo_advantage(
                rewards, torch.ones(3, 2), index, norm_adv_by_std_in_grpo=False
            )
        assert sorted(adv[:2, 0].tolist()) == [-0.5, 0.5] and adv[2].tolist() == [0.0, 0.0]
