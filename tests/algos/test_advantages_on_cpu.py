"""gta_turn_grpo: group-normalized reward-to-go advantages."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from gta_verl.algos.advantages import TURN_GRPO_NAME, compute_turn_grpo_advantage, reward_to_go
from gta_verl.rewards.placement import place_turn_rewards
from gta_verl.verl_compat import compute_grpo_outcome_advantage, get_adv_estimator_fn


def _last_token_batch(seed: int = 0):
    """Rows of different lengths, observation holes (mask 0), reward on each row's last token."""
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 6, 3, 8, 2, 5, 7]
    bs, width = len(lengths), 10
    rewards, mask = torch.zeros(bs, width), torch.zeros(bs, width)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        if n > 4:
            mask[i, 2:4] = 0  # an <info> observation inside the response
        rewards[i, n - 1] = torch.randn((), generator=g)
    index = np.array(["q1", "q1", "q1", "q2", "q2", "q2", "q3"], dtype=object)  # q3: group of one
    return rewards, mask, index


@pytest.mark.parametrize("norm", [True, False])
def test_equals_grpo_when_reward_on_last_token(norm):
    """Advantages equal verl's grpo exactly when each row's reward sits on its last response
    token (then G_{i,t} = R_i at every mask-1 position); returns differ by design."""
    rewards, mask, index = _last_token_batch()
    ours, returns = compute_turn_grpo_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    theirs, _ = compute_grpo_outcome_advantage(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=norm)
    assert torch.equal(ours, theirs)
    assert torch.equal(returns, rewards.sum(-1, keepdim=True) * mask)


def test_equals_grpo_with_reward_on_masked_last_token():
    # Budget exhausted: the response ends with an observation (mask 0) that holds the reward.
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.5], [0.0, 0.0, 0.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    index = np.array([0, 0])
    ours, _ = compute_turn_grpo_advantage(rewards, mask, index)
    theirs, _ = compute_grpo_outcome_advantage(rewards.clone(), mask, index)
    assert torch.equal(ours, theirs)


def test_hand_computed_two_groups():
    # Group A, 2 rollouts, length 4. Row 0: r = [0, 0.25, 0, 2] (R = 2.25);
    # row 1: r = [0, -0.1, 0, -1] (R = -1.1). Mask hides position 2 (observation).
    # Group B, 2 rollouts, length 4: row 2 R = 1 on the last token; row 3 R = 0.
    rewards = torch.tensor(
        [
            [0.0, 0.25, 0.0, 2.0],
            [0.0, -0.1, 0.0, -1.0],
            [0.0, 0.0, 0.0, 1.0],
            [0.0, 0.0, 0.0, 0.0],
        ]
    )
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]] * 4)
    index = np.array(["A", "A", "B", "B"], dtype=object)
    eps = 1e-6
    adv, ret = compute_turn_grpo_advantage(rewards, mask, index, epsilon=eps)
    # Group A: mean = (2.25 − 1.1)/2 = 0.575; unbiased std = |2.25 + 1.1|/√2 = 3.35/√2.
    mu_a, sd_a = 0.575, 3.35 / math.sqrt(2)
    # Reward-to-go row 0: [2.25, 2.25, 2.0, 2.0]; row 1: [-1.1, -1.1, -1.0, -1.0].
    exp0 = [(2.25 - mu_a) / (sd_a + eps), (2.25 - mu_a) / (sd_a + eps), 0.0, (2.0 - mu_a) / (sd_a + eps)]
    exp1 = [(-1.1 - mu_a) / (sd_a + eps), (-1.1 - mu_a) / (sd_a + eps), 0.0, (-1.0 - mu_a) / (sd_a + eps)]
    # Group B: mean 0.5, std = 1/√2 → ±0.5·√2 ≈ ±0.7071 on every unmasked token.
    b = 0.5 / (1 / math.sqrt(2) + eps)
    expected = torch.tensor([exp0, exp1, [b, b, 0.0, b], [-b, -b, 0.0, -b]])
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ret[0], torch.tensor([2.25, 2.25, 0.0, 2.0]))


def test_mask_respected_and_shapes():
    rewards, mask, index = _last_token_batch(seed=3)
    rewards[:, 1] += 0.25  # a turn reward on a (sometimes masked) token
    adv, ret = compute_turn_grpo_advantage(rewards, mask, index)
    assert adv.shape == ret.shape == rewards.shape
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)


def test_placement_changes_only_turn_tokens():
    """Placed turn rewards keep grpo's total per row; tokens after a search turn lose that
    turn's reward from their return-to-go."""
    placed = torch.tensor(
        [
            place_turn_rewards(6, 1.15, [1, 3], [0.25, -0.1]),
            place_turn_rewards(6, -1.0, [], []),
        ]
    )
    mask = torch.ones(2, 6)
    index = np.array([0, 0])
    adv, ret = compute_turn_grpo_advantage(placed, mask, index, norm_adv_by_std_in_grpo=False)
    mu = (1.15 - 1.0) / 2
    torch.testing.assert_close(ret[0], torch.tensor([1.15, 1.15, 0.9, 0.9, 1.0, 1.0]))
    torch.testing.assert_close(adv[0], ret[0] - mu)
    torch.testing.assert_close(adv[1], torch.full((6,), -1.0 - mu))


def test_config_controls_std_normalization():
    rewards, mask, index = _last_token_batch()
    cfg = OmegaConf.create({"norm_adv_by_std_in_grpo": False})
    a, _ = compute_turn_grpo_advantage(rewards, mask, index, config=cfg)
    b, _ = compute_turn_grpo_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    assert torch.equal(a, b)


def test_reward_to_go():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    assert reward_to_go(r).tolist() == [[6.0, 5.0, 3.0]]


def test_input_validation():
    with pytest.raises(ValueError, match="same shape"):
        compute_turn_grpo_advantage(torch.zeros(2, 3), torch.zeros(2, 4), np.array([0, 0]))
    with pytest.raises(ValueError, match="index has 1 entries"):
        compute_turn_grpo_advantage(torch.zeros(2, 3), torch.zeros(2, 3), np.array([0]))


def test_registered_under_name():
    assert get_adv_estimator_fn(TURN_GRPO_NAME) is compute_turn_grpo_advantage


def test_error_rows_leave_their_group_by_hand():
    from gta_verl.algos.advantages import AdvantageContext, advantage_context, grpo_row_advantages

    # Group A: scores 1, 3, 0 with row 2 a reward error; group B: 4, 6. Valid A rows: mean 2, deviations
    # ∓1, unbiased std sqrt((1 + 1)/1) = sqrt(2) → Â = ∓1/(sqrt(2) + ε). B: mean 5, std sqrt(2), the same.
    # With row 2 inside A (as before): mean 4/3, so row 0 would get (1 − 4/3)/std(1, 3, 0) instead.
    scores = torch.tensor([1.0, 3.0, 0.0, 4.0, 6.0])
    index = np.array(["A", "A", "A", "B", "B"], dtype=object)
    valid = torch.tensor([True, True, False, True, True])
    a = 1 / (math.sqrt(2) + 1e-6)
    assert grpo_row_advantages(scores, index, valid).tolist() == pytest.approx([-a, a, 0.0, -a, a])
    assert grpo_row_advantages(scores, index, valid, norm_adv_by_std_in_grpo=False).tolist() == [
        -1.0,
        1.0,
        0.0,
        -1.0,
        1.0,
    ]
    # gta_turn_grpo reads the flags from the trainer's context: the same numbers on every mask-1 token.
    rewards = torch.zeros(5, 2)
    rewards[:, -1] = scores
    with advantage_context(AdvantageContext(excluded=(False, False, True, False, False))):
        adv, _ = compute_turn_grpo_advantage(rewards, torch.ones(5, 2), index, norm_adv_by_std_in_grpo=False)
    assert adv[:, 0].tolist() == [-1.0, 1.0, 0.0, -1.0, 1.0]
    with (
        advantage_context(AdvantageContext(excluded=(True,))),
        pytest.raises(ValueError, match="1 excluded-row"),
    ):
        compute_turn_grpo_advantage(rewards, torch.ones(5, 2), index)
