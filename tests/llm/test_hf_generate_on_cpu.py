"""``hf_cpu`` generation: stop strings, max_tokens, log-probs, prompt log-probs (no Ray).

The model is the tiny random Qwen2 the CPU recipes train (``gta-verl cpu tiny-model``), the
tokenizer the real Qwen2.5 one. Expected values are recomputed here with a plain forward pass of
the same model, never by the code under test.
"""

from __future__ import annotations

import pytest
import torch

from gta_verl.llm.hf_generate import hf_generate, prompt_logprob_rows, token_log_probs


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gta_verl.cpu.tiny_model import build_tiny_model

    path = build_tiny_model(seed=0)
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    return model, tok


@pytest.fixture(scope="module")
def prompt(tiny):
    _, tok = tiny
    return tok.apply_chat_template(
        [{"role": "user", "content": "Who founded the company that made the iPod?"}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )


GREEDY = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def _forward_logprobs(model, prompt_ids, token_ids, temperature=1.0):
    """log_softmax(z_t / T)[y_t] from one forward pass over prompt + response."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
    return (
        torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(token_ids)[:, None]).squeeze(-1)
    )


def test_max_tokens_caps_generation(tiny, prompt):
    model, tok = tiny
    out = hf_generate(model, tok, prompt, {**GREEDY, "max_tokens": 7}, default_max_tokens=64)
    # A random model never emits EOS within 7 greedy tokens here, so the budget is what stops it.
    assert len(out.token_ids) == 7
    assert out.stop_reason == "length"


def test_default_budget_is_response_length(tiny, prompt):
    model, tok = tiny
    out = hf_generate(model, tok, prompt, dict(GREEDY), default_max_tokens=5)
    assert len(out.token_ids) == 5


def test_stop_string_ends_generation_and_stays_in_output(tiny, prompt):
    model, tok = tiny
    free = hf_generate(model, tok, prompt, {**GREEDY, "max_tokens": 12}, default_max_tokens=64)
    # Use the decoded text of the first 4 greedy tokens as the stop string: greedy decoding repeats
    # them, and generation must end right after the 4th token with the stop text in the output.
    stop = tok.decode(free.token_ids[:4])
    assert tok.decode(free.token_ids[:3]).find(stop) < 0  # not already complete after 3 tokens
    out = hf_generate(
        model,
        tok,
        prompt,
        {**GREEDY, "max_tokens": 12, "stop": [stop], "include_stop_str_in_output": True},
        64,
    )
    assert out.token_ids == free.token_ids[:4]
    assert tok.decode(out.token_ids).endswith(stop)
    assert out.stop_reason == "completed"


def test_log_probs_match_a_forward_pass(tiny, prompt):
    model, tok = tiny
    torch.manual_seed(3)
    params = {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "logprobs": True, "max_tokens": 6}
    out = hf_generate(model, tok, prompt, params, default_max_tokens=64)
    expected = _forward_logprobs(model, prompt, out.token_ids, temperature=0.7)
    assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_no_log_probs_unless_asked(tiny, prompt):
    model, tok = tiny
    out = hf_generate(model, tok, prompt, {**GREEDY, "logprobs": False, "max_tokens": 3}, 64)
    assert out.log_probs is None


def test_unknown_sampling_param_is_rejected(tiny, prompt):
    model, tok = tiny
    with pytest.raises(ValueError, match="unsupported sampling params"):
        hf_generate(model, tok, prompt, {**GREEDY, "n": 2}, 64)


def test_token_log_probs_hand_computed():
    # logits row [0, ln 3] → softmax [1/4, 3/4]; T = 1: log p(1) = ln 0.75 = -0.287682
    # T = 0.5: logits / T = [0, 2 ln 3] → softmax [1/10, 9/10]; log p(1) = ln 0.9 = -0.105361
    logits = torch.tensor([[0.0, torch.log(torch.tensor(3.0)).item()]])
    ids = torch.tensor([1])
    assert token_log_probs(logits, ids, 1.0).item() == pytest.approx(-0.287682, abs=1e-5)
    assert token_log_probs(logits, ids, 0.5).item() == pytest.approx(-0.105361, abs=1e-5)
    assert token_log_probs(logits, ids, 0.0).item() == pytest.approx(-0.287682, abs=1e-5)  # greedy → T = 1


def test_prompt_logprob_rows_layout(tiny, prompt):
    model, _ = tiny
    seq = list(prompt[:10])
    rows = prompt_logprob_rows(model, seq, k=3)
    assert len(rows["prompt_ids"]) == len(rows["prompt_logprobs"]) == len(seq)
    assert all(len(r) == 3 for r in rows["prompt_ids"])
    assert rows["prompt_logprobs"][-1] == [0.0, 0.0, 0.0]  # padding row, as verl's vLLM reader
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0], -1)
    top = logp[2].topk(3)  # row 2 scores position 3
    assert rows["prompt_ids"][2] == top.indices.tolist()
    assert torch.allclose(torch.tensor(rows["prompt_logprobs"][2]), top.values, atol=1e-5)
    actual = prompt_logprob_rows(model, seq, k=0)  # k = 0: the actual next token
    assert actual["prompt_ids"][4] == [seq[5]]
    assert actual["prompt_logprobs"][4][0] == pytest.approx(logp[4, seq[5]].item(), abs=1e-5)


# --- batched generation (gta_verl.llm.hf_batch_generate) -------------------------------------------


def _prompts(tok):
    questions = [
        "Who founded the company that made the iPod?",
        "Where is the Eiffel Tower?",
        "When was the University of Oxford founded, and by whom?",
    ]
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for q in questions
    ]


def test_batched_greedy_rows_equal_single_requests(tiny):
    """Left padding changes nothing: each greedy row is the single-request result, log-probs included."""
    from gta_verl.llm.hf_batch_generate import hf_generate_batch

    model, tok = tiny
    prompts = _prompts(tok)
    budgets = [7, 12, 3]  # different per-row budgets in one call
    batch = hf_generate_batch(model, tok, prompts, GREEDY, budgets, 64)
    for p, b, got in zip(prompts, budgets, batch, strict=True):
        want = hf_generate(model, tok, p, {**GREEDY, "max_tokens": b}, 64)
        assert got.token_ids == want.token_ids
        assert len(got.token_ids) == b  # a random model does not stop by itself within 12 tokens
        assert got.stop_reason == want.stop_reason == "length"
        assert torch.allclose(torch.tensor(got.log_probs), torch.tensor(want.log_probs), atol=1e-4)
        # and against a plain forward pass over prompt + response (not the code under test)
        assert torch.allclose(
            torch.tensor(got.log_probs), _forward_logprobs(model, p, got.token_ids), atol=1e-4
        )


def test_batched_row_stops_on_its_own_stop_string(tiny):
    """A stop string ends only the row whose generated text contains it; the row keeps the string."""
    from gta_verl.llm.hf_batch_generate import hf_generate_batch

    model, tok = tiny
    prompts = _prompts(tok)
    free = [hf_generate(model, tok, p, {**GREEDY, "max_tokens": 10}, 64) for p in prompts]
    stop = tok.decode(free[0].token_ids[:3])  # row 0's own first three tokens as the stop string
    batch = hf_generate_batch(model, tok, prompts, {**GREEDY, "stop": [stop]}, [10, 10, 10], 64)
    single = [hf_generate(model, tok, p, {**GREEDY, "max_tokens": 10, "stop": [stop]}, 64) for p in prompts]
    assert [g.token_ids for g in batch] == [g.token_ids for g in single]
    assert stop in tok.decode(batch[0].token_ids) and len(batch[0].token_ids) <= 3
    assert batch[0].stop_reason == "completed"


def test_zero_budget_row_and_batch_keys(tiny):
    from gta_verl.llm.hf_batch_generate import batch_key, hf_generate_batch

    model, tok = tiny
    prompts = _prompts(tok)[:2]
    rows = hf_generate_batch(model, tok, prompts, GREEDY, [0, 2], 64)
    assert rows[0].token_ids == [] and rows[0].stop_reason == "length"
    assert len(rows[1].token_ids) == 2

    assert batch_key({"temperature": 1.0, "stop": ["</search>"]}) == batch_key(
        {"temperature": 1.0, "stop": ["</search>"]}
    )
    assert batch_key({"temperature": 1.0}) != batch_key({"temperature": 0.0})
    assert batch_key({"prompt_logprobs": 0}) is None  # the teacher's forward pass is served alone
    assert batch_key({"seed": 3}) is None
    with pytest.raises(ValueError, match="unsupported sampling params"):
        batch_key({"beam_width": 4})


def test_chunked_batcher_equals_single_requests(tiny):
    """Rows cut into 3-token chunks and re-queued (continuous batching) give the one-call result."""
    import asyncio

    from gta_verl.llm.hf_batch_generate import GenerationBatcher

    model, tok = tiny
    prompts = _prompts(tok)
    budgets = [10, 4, 7]

    async def run():
        batcher = GenerationBatcher(model, tok, 64, max_batch=8, chunk=3)
        outs = await asyncio.gather(
            *[batcher.generate(p, {**GREEDY, "max_tokens": b}) for p, b in zip(prompts, budgets, strict=True)]
        )
        return outs, batcher.batches

    outs, batches = asyncio.run(run())
    # 10 tokens in chunks of 3 → 4 calls for the longest row; the first call carries all three rows
    assert batches[0] == 3 and len(batches) == 4
    for p, b, got in zip(prompts, budgets, outs, strict=True):
        want = hf_generate(model, tok, p, {**GREEDY, "max_tokens": b}, 64)
        assert got.token_ids == want.token_ids and got.stop_reason == want.stop_reason == "length"
        assert torch.allclose(torch.tensor(got.log_probs), torch.tensor(want.log_probs), atol=1e-4)


def test_server_abort_returns_partial_tokens_and_resume_continues(tiny, prompt):
    """verl's partial rollout on hf_cpu: an abort answers the turn in flight with its tokens so far
    ("aborted"), a request sent while paused waits for the resume, and the continuation after the
    resume (same weights, greedy) completes exactly the uninterrupted generation."""
    import asyncio

    from gta_verl.cpu.server import HFRolloutServer
    from gta_verl.cpu.tiny_model import build_tiny_model

    model, tok = tiny
    full = hf_generate(model, tok, prompt, {**GREEDY, "max_tokens": 12}, 64)

    async def run():
        server = HFRolloutServer(str(build_tiny_model(seed=0)), response_length=64, max_batch=8)
        server._batcher.chunk = 2  # an abort lands at the next 2-token chunk boundary
        first = asyncio.create_task(
            server.generate(
                prompt_ids=list(prompt), request_id="r", sampling_params={**GREEDY, "max_tokens": 12}
            )
        )
        while not server._batcher.batches:  # the first chunk is being generated
            await asyncio.sleep(0.005)
        await server.abort_all_requests()
        part = await first
        k = len(part.token_ids)
        resumed = asyncio.create_task(
            server.generate(
                prompt_ids=list(prompt) + part.token_ids,
                request_id="r",
                sampling_params={**GREEDY, "max_tokens": 12 - k},
            )
        )
        await asyncio.sleep(0.2)
        parked = not resumed.done()
        await server.set_global_steps(1)
        await server.resume_generation()
        return part, await resumed, parked

    part, rest, parked = asyncio.run(run())
    assert part.stop_reason == "aborted" and 0 < len(part.token_ids) < 12
    assert parked and part.extra_fields["global_steps"] == 0 and rest.extra_fields["global_steps"] == 1
    assert part.token_ids + rest.token_ids == full.token_ids and rest.stop_reason == full.stop_reason
    assert torch.allclose(
        torch.tensor(part.log_probs + rest.log_probs), torch.tensor(full.log_probs), atol=1e-4
    )
