"""verl's ``use_remove_padding`` on CPU: rollouts packed into one sequence score as they do padded.

verl's FSDP engine concatenates a micro-batch's real tokens into one row, passes position ids that restart
at 0 for each rollout and no attention mask, with ``use_cache=False``. Without flash-attn that is exact only
because transformers' sdpa mask builder reads the restarting position ids as sequence boundaries; these
tests hold the two model families the project trains (Qwen2, Gemma-3 with its sliding-window layers) to
it, on rollouts longer than the window.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig, Qwen2Config

LENGTHS = (7, 5, 9)  # the sliding window below is 4: every rollout but the second outgrows it


def _qwen2() -> Qwen2Config:
    return Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip


def _gemma3() -> Gemma3TextConfig:
    return Gemma3TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=64, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip


def _token_log_probs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[L, V]`` logits of one rollout → ``[L - 1]`` log-probabilities of its next tokens."""
    return logits[:-1].log_softmax(-1).gather(-1, ids[1:, None])[:, 0]


@pytest.mark.parametrize("config", [_qwen2, _gemma3], ids=["qwen2", "gemma3"])
def test_packed_rollouts_score_as_padded_ones(config) -> None:
    torch.manual_seed(0)
    cfg = config()
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg).eval()
    rollouts = [torch.randint(1, 64, (n,)) for n in LENGTHS]
    width = max(LENGTHS)
    ids = torch.zeros(len(LENGTHS), width, dtype=torch.long)
    mask = torch.zeros(len(LENGTHS), width, dtype=torch.long)
    for i, r in enumerate(rollouts):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    packed_ids = torch.cat(rollouts)[None]  # [1, 7 + 5 + 9 = 21]
    positions = torch.cat([torch.arange(n) for n in LENGTHS])[None]  # 0..6, 0..4, 0..8
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        packed = model(input_ids=packed_ids, position_ids=positions, use_cache=False).logits[0]
    start = 0
    for i, r in enumerate(rollouts):
        want = _token_log_probs(padded[i, : len(r)], r)
        got = _token_log_probs(packed[start : start + len(r)], r)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        start += len(r)
    # the check has teeth: the third rollout scored as a continuation of the first two differs
    joined = model(input_ids=packed_ids, use_cache=False).logits[0]
    third_joined = _token_log_probs(joined[12:], rollouts[2])
    assert not torch.allclose(third_joined, _token_log_probs(packed[12:], rollouts[2]))
