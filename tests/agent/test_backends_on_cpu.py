"""Local generation backends: scripted and HF (tiny random Qwen2 + real tokenizer)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from gta_verl.agent.backends import HFServerManager, ScriptedServerManager, cut_at_stop
from gta_verl.agent.tokenizer import tiny_qwen2

STOPS = ["</search>", "</answer>"]


def gen(manager, prompt_ids, rid="r", **params):
    return asyncio.run(manager.generate(rid, prompt_ids=prompt_ids, sampling_params=params))


def test_cut_at_stop() -> None:
    assert cut_at_stop("a <search> q </search> tail </answer>", STOPS) == "a <search> q </search>"
    assert cut_at_stop("x </answer> <search> y </search>", STOPS) == "x </answer>"
    assert cut_at_stop("no stop", STOPS) == "no stop"


def test_scripted_manager_binding_stop_and_max_tokens(qwen_tokenizer) -> None:
    tok = qwen_tokenizer
    sm = ScriptedServerManager(tok, [["s0 turn0", "s0 turn1"], ["s1 <answer> a </answer> junk"]])
    view = sm.for_rollout(0, 1, n_samples=2)  # script 1
    out = gen(view, [1, 2], stop=STOPS, max_tokens=100)
    assert tok.decode(out.token_ids) == "s1 <answer> a </answer>" and out.log_probs == [-0.5] * len(
        out.token_ids
    )
    assert (
        tok.decode(gen(sm, [1], "a", max_tokens=100).token_ids) == "s0 turn0"
    )  # first-seen request → script 0
    assert tok.decode(gen(sm, [1], "a", max_tokens=100).token_ids) == "s0 turn1"
    assert gen(sm, [1], "a", max_tokens=100).token_ids == []  # script exhausted
    assert len(gen(sm, [1], "b", max_tokens=1).token_ids) == 1  # second request → script 1, capped
    assert len(sm.calls) == 5  # views share the call log
    raw = ScriptedServerManager(tok, [["<answer> a </answer> junk"]], honor_stop=False)
    assert tok.decode(gen(raw, [1], stop=STOPS, max_tokens=100).token_ids).endswith("junk")


@pytest.fixture(scope="module")
def tiny():
    return tiny_qwen2(seed=0)


def full_logprobs(model, prompt, ids):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1], -1)
    return lp.gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


def test_hf_greedy_logprobs_match_a_full_forward(qwen_tokenizer, tiny) -> None:
    hf = HFServerManager(tiny, qwen_tokenizer)
    prompt = qwen_tokenizer.encode("Question: who?", add_special_tokens=False)
    out = gen(hf, prompt, temperature=0.0, max_tokens=12, stop=STOPS)
    assert len(out.token_ids) == 12  # a random model never writes a stop string
    assert out.log_probs == pytest.approx(full_logprobs(tiny, prompt, out.token_ids), abs=1e-4)
    # greedy = argmax of the full forward at every step
    with torch.no_grad():
        logits = tiny(input_ids=torch.tensor([prompt + out.token_ids])).logits[0]
    assert logits[len(prompt) - 1 : -1].argmax(-1).tolist() == out.token_ids


def test_hf_sampling_is_seeded_per_rollout(qwen_tokenizer, tiny) -> None:
    hf = HFServerManager(tiny, qwen_tokenizer, seed=7)
    a = gen(hf.for_rollout(0, 1), [151644, 872], temperature=1.0, top_k=50, top_p=0.9, max_tokens=8)
    b = gen(hf.for_rollout(0, 1), [151644, 872], temperature=1.0, top_k=50, top_p=0.9, max_tokens=8)
    c = gen(hf.for_rollout(0, 2), [151644, 872], temperature=1.0, top_k=50, top_p=0.9, max_tokens=8)
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


def test_hf_guided_forces_action_and_scores_it(qwen_tokenizer, tiny) -> None:
    tok = qwen_tokenizer
    hf = HFServerManager(
        tiny,
        tok,
        guide=lambda i, g: [" <search> Paris </search>", None],
        free_tokens=3,
        max_tokens_per_call=5,
    )
    view = hf.for_rollout(0, 0)
    prompt = tok.encode("Q?", add_special_tokens=False)
    out = gen(view, prompt, temperature=1.0, max_tokens=64, stop=STOPS)
    forced = tok.encode(" <search> Paris </search>", add_special_tokens=False)
    assert out.token_ids[3:] == forced and len(out.token_ids) == 3 + len(forced)
    # every token, forced or sampled, carries the model's own log-prob
    assert out.log_probs == pytest.approx(full_logprobs(tiny, prompt, out.token_ids), abs=1e-4)
    # second call: free generation, capped by max_tokens_per_call
    assert len(gen(view, prompt, temperature=1.0, max_tokens=64, stop=STOPS).token_ids) == 5
