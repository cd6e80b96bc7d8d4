"""The learning probe's S_policy / S_obs, by hand (gta_verl.eval.learning_probe)."""

from __future__ import annotations

import pytest

from gta_verl.eval.learning_probe import probe, response_logprobs, sequence_advantage


def test_probe_hand_computed():
    # rollout 1: A = +1, tokens [policy, obs, policy], log-prob change [+0.2, +0.1, +0.4]
    #   policy mean = (0.2 + 0.4) / 2 = 0.3; obs mean = 0.1
    # rollout 2: A = −1, tokens [policy, policy], change [−0.1, −0.3] → policy mean −0.2; no obs token
    before = [[-1.0, -2.0, -3.0], [-1.0, -1.0]]
    after = [[-0.8, -1.9, -2.6], [-1.1, -1.3]]
    masks = [[1, 0, 1], [1, 1]]
    res = probe([1.0, -1.0], before, after, masks)
    # S_policy = (1·0.3 + (−1)·(−0.2)) / 2 = 0.25; S_obs = 1·0.1 / 1 (only rollout 1 has an observation)
    assert res.policy_shift == pytest.approx(0.25)
    assert res.obs_shift == pytest.approx(0.1)
    assert (res.n_rollouts, res.n_positive, res.n_negative) == (2, 1, 1)
    # the same change under flipped advantages scores the opposite sign
    assert probe([-1.0, 1.0], before, after, masks).policy_shift == pytest.approx(-0.25)


def test_sequence_advantage_is_the_first_policy_token():
    assert sequence_advantage([0.0, 0.7, 0.7, 0.0], [0, 1, 1, 0]) == 0.7
    assert sequence_advantage([0.3], [0]) == 0.0  # no policy token: nothing was generated


def test_probe_rejects_ragged_inputs():
    with pytest.raises(ValueError, match="one row per rollout"):
        probe([1.0], [[0.0]], [], [[1]])


def test_response_logprobs_against_a_plain_forward():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    ).eval()
    prompt, resp = [3, 4, 5], [6, 7]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + resp])).logits[0]
    # token 6 is predicted at position 2 (the last prompt token), token 7 at position 3
    want = [torch.log_softmax(logits[2], -1)[6].item(), torch.log_softmax(logits[3], -1)[7].item()]
    assert response_logprobs(model, prompt, resp) == pytest.approx(want, abs=1e-5)


def test_observation_positions_from_the_protocol_tags():
    from gta_verl.eval.learning_probe import observation_positions

    OPEN, CLOSE = 7, 8
    # policy 1 2, then <info> 5 5 </info>, policy 3, then an <info> cut by the budget
    ids = [1, 2, OPEN, 5, 5, CLOSE, 3, OPEN, 5]
    assert observation_positions(ids, OPEN, CLOSE) == [1, 1, 0, 0, 0, 0, 1, 0, 0]


def test_grpo_advantages_hand_computed():
    from gta_verl.eval.learning_probe import grpo_advantages

    # group "a": rewards 1, 0, 0, 3 → mean 1; unbiased std = sqrt((0 + 1 + 1 + 4) / 3) = sqrt(2) ≈ 1.41421
    # Â = (r − 1) / 1.41421 → 0, −0.70711, −0.70711, 1.41421; group "b" has one rollout → 0
    got = grpo_advantages([1.0, 0.0, 0.0, 3.0, 2.0], ["a", "a", "a", "a", "b"])
    assert got == pytest.approx([0.0, -0.70711, -0.70711, 1.41421, 0.0], abs=1e-4)


class _TagIds:
    """The two tag ids the check reads: ``<info>`` → 7, ``</info>`` → 8."""

    def convert_tokens_to_ids(self, token):
        from gta_verl.protocol import INFO_CLOSE, INFO_OPEN

        return {INFO_OPEN: 7, INFO_CLOSE: 8}[token]


def test_unmasked_observation_tokens_lists_info_tokens_in_the_loss():
    from gta_verl.eval.learning_probe import unmasked_observation_tokens

    # rollout 0: [q, \n, <info>, d, </info>, \n, a] with the loop's mask: the block and its newlines 0
    # rollout 1: the same ids with the mask dropped (all 1): positions 2, 3, 4 are inside the block
    ids = [5, 1, 7, 9, 8, 1, 6]
    kept = [1, 0, 0, 0, 0, 0, 1]
    dump = {"responses": [ids, ids], "response_mask": [kept, [1] * 7]}
    assert unmasked_observation_tokens(dump, _TagIds()) == [(1, 2), (1, 3), (1, 4)]
    # a newline the loop left unmasked is outside the protocol's block: not an observation token
    assert (
        unmasked_observation_tokens({"responses": [ids], "response_mask": [[1, 1, 0, 0, 0, 1, 1]]}, _TagIds())
        == []
    )
