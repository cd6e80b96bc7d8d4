"""Loss wiring: verl's policy loss gives exactly zero gradient to every ``response_mask = 0`` token.

The ``response_mask`` comes from real rollouts of our ``gta_search_agent`` loop (scripted turns, the real
Qwen2.5 tokenizer, tests/agent's in-process ``FakeRetriever``): 1 on the text the policy generated, 0 on
``<info>`` observations and invalid-action messages (and on right padding). Log-probs that require grad go
through verl 0.9.1's registered ``vanilla`` policy loss (``compute_policy_loss_vanilla``, which aggregates
with ``agg_loss``) with advantages from verl's registered ``grpo`` estimator, called as verl's actor calls
them (``verl/workers/utils/losses.py::ppo_loss``: a bool ``response_mask``, ``config.global_batch_info``
filled with the batch's ``dp_size`` / ``batch_num_tokens`` / ``global_batch_size``). The main job's RL stage
is stock ``main_ppo``, so this unit test is where the masking of our agent loop's tokens is checked.

Hand-derived gradients at ratio 1 (``log_prob == old_log_prob``), read off ``compute_policy_loss_vanilla``:
``pg_losses1 = -A·ratio`` and ``pg_losses2 = -A·clamp(ratio, 1-ε, 1+ε)`` tie at ratio 1 (inside the clip
range, so both have slope ``-A·ratio = -A``; ``torch.maximum`` splits a tie's gradient in halves), and for
``A < 0`` the dual-clip bound ``-A·c`` (c = 3) is larger, so ``torch.min`` keeps ``-A``. ``agg_loss`` then
sums ``where(mask, loss, 0)·mask`` and divides: token-mean by ``batch_num_tokens`` N, so
``d loss / d logp_{i,t} = -A_i·m_{i,t} / N``; seq-mean-token-mean (our recipes' mode) by each row's
``n_i + 1e-8`` and then the number of rows B, so ``-A_i·m_{i,t} / ((n_i + 1e-8)·B)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
from gta_verl.data import schema
from gta_verl.data.schema import make_verl_row
from gta_verl.data.types import QAExample
from gta_verl.verl_compat import compute_policy_loss_vanilla, get_adv_estimator_fn, get_policy_loss_fn
from tests.agent.conftest import FakeRetriever, qwen_tokenizer  # noqa: F401 - qwen_tokenizer is a fixture

QUESTION = QAExample("q1", "Who directed the film that won?", ("Nolan",), ("dA", "dB"), 2, "toy")

#: One GRPO group of 4 rollouts: searches (→ observations), turns without an action (→ invalid-action
#: messages) and answers, in different orders and lengths.
GROUP_SCRIPTS = (
    (
        "Let me look. <search> the winning film </search>",
        "I am not sure what to do.",
        "<search> its director </search>",
        "So <answer> Nolan </answer>",
    ),
    ("<search> director </search>", "<answer> Nolan </answer>"),
    ("Thinking without acting.", "<answer> Spielberg </answer>"),
    ("<search> film </search>", "No action here.", "<answer> unknown </answer>"),
)
#: Scalar rewards of the group's rollouts: mean 0, sample std sqrt((9 + 1 + 1 + 9) / 3) = sqrt(20 / 3).
GROUP_REWARDS = (3.0, 1.0, -1.0, -3.0)
GRPO_EPS = 1e-6  # compute_grpo_outcome_advantage's epsilon


def _rollouts(tokenizer, scripts):
    manager = ScriptedServerManager(tokenizer, [list(s) for s in scripts])
    cfg = make_trainer_config(prompt_length=1024, response_length=1024)
    rows = [make_verl_row(QUESTION, 0)]
    return run_agent_rollouts(rows, manager, tokenizer, FakeRetriever(), cfg, n_samples=len(scripts))


def _batch(rollouts, rewards):
    """Right-padded [B, L] tensors as verl's agent loop worker stacks them; reward on the last token."""
    width = max(len(r.response_ids) for r in rollouts)
    mask = torch.zeros(len(rollouts), width)
    old = torch.zeros(len(rollouts), width)
    scores = torch.zeros(len(rollouts), width)
    for i, (r, reward) in enumerate(zip(rollouts, rewards, strict=True)):
        n = len(r.response_ids)
        mask[i, :n] = torch.tensor(r.response_mask, dtype=torch.float32)
        old[i, :n] = torch.tensor(r.response_logprobs, dtype=torch.float32)
        scores[i, n - 1] = reward
    return mask, old, scores


def _grpo(scores, mask):
    index = np.array(["q1"] * scores.size(0), dtype=object)  # one prompt = one group
    adv, _ = get_adv_estimator_fn("grpo")(token_level_rewards=scores, response_mask=mask, index=index)
    return adv


def _actor_config(mask, loss_agg_mode):
    """The fields ``compute_policy_loss_vanilla`` reads, filled the way ``ppo_loss`` fills them (dp = 1)."""
    return OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": 0.2,
            "clip_ratio_high": 0.2,
            "clip_ratio_c": 3.0,
            "loss_agg_mode": loss_agg_mode,
            "global_batch_info": {
                "dp_size": 1,
                "batch_num_tokens": int(mask.sum()),
                "global_batch_size": mask.size(0),
                "loss_scale_factor": None,
            },
        }
    )


def _grad(old, log_prob, adv, mask, loss_agg_mode, config=None):
    """d loss / d log_prob through verl's registered ``vanilla`` loss."""
    log_prob = log_prob.clone().requires_grad_(True)
    loss, metrics = get_policy_loss_fn("vanilla")(
        old_log_prob=old,
        log_prob=log_prob,
        advantages=adv,
        response_mask=mask.bool(),
        loss_agg_mode=loss_agg_mode,
        config=config if config is not None else _actor_config(mask, loss_agg_mode),
    )
    loss.backward()
    return loss, metrics, log_prob.grad


@pytest.fixture(scope="module")
def group(qwen_tokenizer):  # noqa: F811 - the imported fixture
    rollouts = _rollouts(qwen_tokenizer, GROUP_SCRIPTS)
    return rollouts, *_batch(rollouts, GROUP_REWARDS)


def test_vanilla_is_verls_clipped_pg_loss() -> None:
    assert get_policy_loss_fn("vanilla") is compute_policy_loss_vanilla


def test_rollouts_mask_observations_and_invalid_actions(group, qwen_tokenizer) -> None:  # noqa: F811 - the imported fixture
    rollouts, mask, old, _ = group
    kinds = {k for r in rollouts for k, _, _ in r.extra_fields[schema.EF_TURN_SPANS]}
    assert {"observation", "invalid", "reasoning", "query", "answer"} <= kinds
    for i, (r, script) in enumerate(zip(rollouts, GROUP_SCRIPTS, strict=True)):
        for kind, s, e in r.extra_fields[schema.EF_TURN_SPANS]:
            expected = 0.0 if kind in ("observation", "invalid") else 1.0
            assert mask[i, s:e].tolist() == [expected] * (e - s), (i, kind)
        # mask-1 tokens are exactly the tokens the scripted policy produced
        produced = sum(len(qwen_tokenizer.encode(t, add_special_tokens=False)) for t in script)
        assert int(mask[i].sum()) == produced
        assert mask[i, len(r.response_ids) :].sum() == 0  # right padding
    assert (old[mask == 1] == -0.5).all() and (old[mask == 0] == 0.0).all()


def test_grpo_advantages_hand_computed(group) -> None:
    _, mask, _, scores = group
    adv = _grpo(scores, mask)
    std = math.sqrt(20.0 / 3.0)
    for i, reward in enumerate(GROUP_REWARDS):
        expected = torch.full_like(adv[i], reward / (std + GRPO_EPS)) * mask[i]
        torch.testing.assert_close(adv[i], expected, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_zero_gradient_on_mask_0_tokens(group, loss_agg_mode) -> None:
    _, mask, old, scores = group
    adv = _grpo(scores, mask)
    loss, metrics, grad = _grad(old, old, adv, mask, loss_agg_mode)
    assert metrics["actor/ppo_kl"] == 0.0  # ratio 1: log_prob == old_log_prob
    assert torch.equal(grad[mask == 0], torch.zeros(int((mask == 0).sum())))  # exactly 0
    assert (grad[mask == 1] != 0).all()  # every advantage of the group is non-zero
    # hand-derived slope (module docstring)
    seq_adv = torch.tensor(GROUP_REWARDS) / (math.sqrt(20.0 / 3.0) + GRPO_EPS)
    if loss_agg_mode == "token-mean":
        denom = torch.full((mask.size(0),), float(mask.sum()))
    else:
        denom = (mask.sum(-1) + 1e-8) * mask.size(0)
    expected = -(seq_adv / denom)[:, None] * mask
    torch.testing.assert_close(grad, expected, rtol=1e-6, atol=0.0)
    # with ratio 1 the loss is Σ_i -A_i·n_i / denom_i (n_i = row i's mask-1 tokens)
    expected_loss = -(seq_adv * mask.sum(-1) / denom).sum()
    torch.testing.assert_close(loss.detach(), expected_loss, rtol=1e-5, atol=1e-7)


def test_the_mask_alone_zeroes_the_gradient(group) -> None:
    """Advantages on every position and log-probs that moved on mask-0 tokens: still exactly 0 there.

    verl's ``grpo`` already multiplies advantages by the mask, so the test above would pass even if the loss
    ignored the mask; here only the loss's own masking (``agg_loss`` / ``masked_sum``) can zero them.
    """
    _, mask, old, scores = group
    seq_adv = _grpo(scores, mask).sum(-1) / mask.sum(-1)  # A_i
    adv = seq_adv[:, None].expand_as(mask).contiguous()  # also on observations, invalid text, padding
    moved = old - 0.1 - 3.0 * torch.rand(old.shape, generator=torch.Generator().manual_seed(0))
    log_prob = torch.where(mask.bool(), old, moved)  # ratio 1 on mask-1 tokens only
    for mode in ("token-mean", "seq-mean-token-mean"):
        _, _, grad = _grad(old, log_prob, adv, mask, mode)
        assert torch.equal(grad[mask == 0], torch.zeros(int((mask == 0).sum())))
        assert (grad[mask == 1] != 0).all()


def test_one_rollout_token_gradient_by_hand(qwen_tokenizer) -> None:  # noqa: F811 - the imported fixture
    """1 rollout, token-mean, ratio 1: d loss / d logp_t = -A / (number of mask-1 tokens)."""
    script = GROUP_SCRIPTS[0]
    (rollout,) = _rollouts(qwen_tokenizer, [script])
    mask, old, scores = _batch([rollout], [1.5])
    # Group of one: verl's grpo uses mean 0 and std 1, so A = 1.5 / (1 + 1e-6) on every mask-1 token.
    adv = _grpo(scores, mask)
    a = 1.5 / (1.0 + GRPO_EPS)
    # The generated tokens: the four scripted turns (observations and the invalid-action message are the
    # loop's, not the policy's).
    n = sum(len(qwen_tokenizer.encode(t, add_special_tokens=False)) for t in script)
    assert int(mask.sum()) == n
    # agg_loss's own default (no global batch info: N = the mask's sum), as on a single micro-batch.
    config = OmegaConf.create(
        {"clip_ratio": 0.2, "clip_ratio_low": None, "clip_ratio_high": None, "global_batch_info": {}}
    )
    loss, _, grad = _grad(old, old, adv, mask, "token-mean", config)
    ((ans_s, _),) = [(s, e) for k, s, e in rollout.extra_fields[schema.EF_TURN_SPANS] if k == "answer"]
    ((obs_s, _), _) = [(s, e) for k, s, e in rollout.extra_fields[schema.EF_TURN_SPANS] if k == "observation"]
    ((inv_s, _),) = [(s, e) for k, s, e in rollout.extra_fields[schema.EF_TURN_SPANS] if k == "invalid"]
    assert grad[0, ans_s].item() == pytest.approx(-a / n, rel=1e-6)  # first token of "<answer>"
    assert grad[0, obs_s].item() == 0.0 and grad[0, inv_s].item() == 0.0
    assert loss.item() == pytest.approx(-a, rel=1e-6)  # -(1/n)·Σ_t A·ratio_t·m_t with ratio 1
