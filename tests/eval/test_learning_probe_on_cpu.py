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


def _tiny_qwen2(seed: int, vocab_size: int = 16):
    """A randomly initialised 1-layer Qwen2, seeded."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    return Qwen2ForCausalLM(cfg).eval()


def test_response_logprobs_against_a_plain_forward():
    import torch

    model = _tiny_qwen2(0, vocab_size=32)
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


def test_an_info_tag_the_policy_wrote_itself_is_a_policy_token():
    from gta_verl.eval.learning_probe import observation_positions

    OPEN, CLOSE, S_CLOSE, NL = 7, 8, 9, 4
    # search closer, newline, then the loop's <info> 5 </info> (observation); then the policy writes
    # reasoning 3 with a stray <info> 5 of its own (no search before it): policy tokens, mask 1.
    ids = [1, S_CLOSE, NL, OPEN, 5, CLOSE, NL, 3, OPEN, 5, 2]
    assert observation_positions(ids, OPEN, CLOSE, S_CLOSE, frozenset({NL})) == [
        1,
        1,
        1,
        0,
        0,
        0,
        1,
        1,
        1,
        1,
        1,
    ]
    # Without the search closer's id every <info> opens a block (the tag-only rule).
    assert observation_positions(ids, OPEN, CLOSE) == [1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0]


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


def test_probe_run_scores_step_s_from_the_checkpoint_before_it(tmp_path, monkeypatch):
    """Step s's dump is scored π_{s−1} → π_s: step 1 from the start, step 2 from step 1's checkpoint."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from gta_verl.eval import learning_probe
    from gta_verl.protocol import INFO_CLOSE, INFO_OPEN

    vocab = {f"t{i}": i for i in range(14)} | {INFO_OPEN: 14, INFO_CLOSE: 15}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")))
    models, dirs = [_tiny_qwen2(s) for s in range(3)], []
    for s, model in enumerate(models):
        dirs.append(tmp_path / f"ckpt{s}")
        model.save_pretrained(dirs[-1])
    tok.save_pretrained(dirs[0])
    # Rollout ids: a policy token, an <info> block (14 … 15), a policy token. One group of two per step.
    resp = [[3, 14, 5, 15, 6], [4, 14, 7, 15, 8]]
    for step in (1, 2):
        dump = {"prompts": [[1, 2], [1, 2]], "responses": resp, "uid": ["q", "q"]}
        torch.save(dump, tmp_path / f"{step}.tokens.pt")
    # Rewards 1 and 0 in one group: mean 0.5, unbiased std √(0.25 + 0.25) ≈ 0.70711, Â = ±0.70711.
    monkeypatch.setattr(learning_probe, "rescored_rewards", lambda dump, tokenizer: [1.0, 0.0])
    got = learning_probe.probe_run(tmp_path, dirs)
    assert sorted(got) == [1, 2]
    masks = [[1, 0, 0, 0, 1]] * 2  # the protocol's block: <info> through </info>
    for step, (m0, m1) in ((1, (models[0], models[1])), (2, (models[1], models[2]))):
        before = [learning_probe.response_logprobs(m0, [1, 2], r) for r in resp]
        after = [learning_probe.response_logprobs(m1, [1, 2], r) for r in resp]
        want = learning_probe.probe([0.70711, -0.70711], before, after, masks)
        assert got[step].policy_shift == pytest.approx(want.policy_shift, rel=1e-4)
        assert got[step].obs_shift == pytest.approx(want.obs_shift, rel=1e-4)
        assert (got[step].n_positive, got[step].n_negative) == (1, 1)


def test_misplaced_advantages_are_listed_where_the_probe_sees_nothing():
    from gta_verl.eval.learning_probe import misplaced_advantages

    # Response [p, p, p, <info>, d, </info>, p, p], mask [1 1 1 0 0 0 1 1]; GRPO's A = 0.5 broadcast
    # over the mask-1 tokens: [.5 .5 .5 0 0 0 .5 .5] is correctly placed.
    mask = [1, 1, 1, 0, 0, 0, 1, 1]
    right = [0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.5, 0.5]
    # Shifted one token to the right: position 0 gets 0 (so A_i = 0 at the first policy token), the
    # policy tokens 1, 2 carry 0.5 ≠ 0, the <info> token 3 carries 0.5 ≠ 0 and token 7 carries 0.5 ≠ 0.
    shifted = [0.0, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.5]
    # On the observation positions instead (an inverted mask in the estimator): A_i read at token 0 is
    # 0, and every observation token 3, 4, 5 carries 0.5 ≠ 0.
    on_obs = [0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.0, 0.0]
    # Left unmasked (the estimator ignored the mask): the three observation tokens carry 0.5.
    unmasked = [0.5] * 8
    got = misplaced_advantages([right, shifted, on_obs, unmasked], [mask] * 4)
    assert got == [(1, 1), (1, 2), (1, 3), (1, 7), (2, 3), (2, 4), (2, 5), (3, 3), (3, 4), (3, 5)]
    # A per-token estimator (gta_turn_grpo: reward-to-go) varies over the policy tokens: only the
    # mask-0 rule applies, so [1, .5, .5, 0, 0, 0, .2, .2] is placed right, on_obs still is not.
    to_go = [1.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.2, 0.2]
    assert misplaced_advantages([to_go, on_obs], [mask] * 2, constant=False) == [(1, 3), (1, 4), (1, 5)]
    # The probe itself cannot tell: it re-scores the advantages, so the same π₀ → π₁ change gives the
    # same S_policy whatever verl placed where (here +1 · mean(+0.1, +0.1) = 0.1 > 0).
    res = probe([1.0], [[-1.0, -1.0, -1.0]], [[-0.9, -0.5, -0.9]], [[1, 0, 1]])
    assert res.policy_shift == pytest.approx(0.1)


def test_rescored_rewards_drop_searches_the_policy_never_saw():
    """A verl ``tool_agent`` dump whose second search's tool response was never appended (its
    ``gta/turn_obs_start`` is the response's length): the probe scores what the reward managers score."""
    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.data import schema
    from gta_verl.eval.learning_probe import rescored_rewards
    from gta_verl.rewards.scoring import score_trajectory_guided, scoring_request

    tok = load_qwen_tokenizer()
    ids = tok.encode("<answer> Paris </answer>", add_special_tokens=False)
    rm = {"ground_truth": schema.make_ground_truth(["Paris"], ["d1", "d2"])}
    extra = {
        schema.EF_TURN_QUERIES: ["capital of France", "France"],
        schema.EF_TURN_DOC_IDS: [["d1"], ["d2"]],
        schema.EF_TURN_OBS_START: [2, len(ids)],  # the second search's response would start past the end
    }
    dump = {"responses": [ids], "reward_model": [rm], "extra_fields": [extra]}
    # Shown: search 1 finds d1 (+0.25); search 2 showed nothing, a miss (−0.10); the answer is right but
    # the chain incomplete (C_T = {d1} ⊉ {d1, d2}): +1. R_traj = 0.25 − 0.10 + 1 = 1.15.
    # (Scored from the raw fields, as before: 0.25 + 0.25 + 2 = 2.5, a reward the run was never paid.)
    assert rescored_rewards(dump, tok) == [pytest.approx(1.15)]
    # The same number as the managers' own request builder gives.
    assert score_trajectory_guided(scoring_request(ids, rm, extra, tok))[0] == pytest.approx(1.15)
