"""LLM generator over a real local OpenAI-protocol HTTP server; tolerant reply parsing."""

from __future__ import annotations

import json

import pytest

from gta_verl.llm.openai_chat import ChatClient
from gta_verl.synth.generators.llm_prompt import (
    LLMPromptBuilder,
    ParseFailure,
    build_synthesis_messages,
    parse_synthesis_reply,
    select_distractors,
)
from gta_verl.synth.generators.openai_gen import LLMSamplingConfig, OpenAIGenerator
from gta_verl.synth.paths import build_path_index
from tests.support.openai_server import openai_stub_server

GOOD = {
    "question": "Of which state is the birthplace of the 44th U.S. president the capital?",
    "answer": "Hawaii",
    "trajectory": [
        {
            "reasoning": "I need the birthplace of the 44th president.",
            "search_query": "44th president birthplace",
            "target_document": "P1",
        },
        {
            "reasoning": "He was born in Honolulu; now which state is Honolulu the capital of?",
            "search_query": "Honolulu capital of",
            "target_document": "P2",
        },
    ],
    "final_reasoning": "Honolulu is the capital of Hawaii.",
}


def test_prompt_shows_chain_in_order_and_distractors(tiny_kb, obama_honolulu):
    import numpy as np

    index = build_path_index(tiny_kb)
    distractors = select_distractors(index, obama_honolulu, 3, np.random.default_rng(0))
    assert len(distractors) == 3 and not set(distractors) & set(obama_honolulu.doc_indices)
    messages = build_synthesis_messages(obama_honolulu, tiny_kb, distractors)
    system, user = messages[0], messages[-1]  # the worked example's pair is between them
    assert system["role"] == "system" and "JSON" in system["content"] and user["role"] == "user"
    body = user["content"]
    assert body.index("[P1] Barack Obama") < body.index("[P2] Honolulu") < body.index("[X1]")
    assert "P1 -> P2 via: honolulu" in body and "exactly 2 turns" in body


def test_well_formed_malformed_and_truncated_replies_over_http(tiny_kb, obama_honolulu):
    good = json.dumps(GOOD)
    fenced = (
        "Sure! Here it is:\n```json\n"
        + good.replace('"P2"}', '"P2",}').replace('"search_query"', '"query"')
        + "\n```\nHope this helps."
    )
    truncated = good[: good.index('"answer"') + 14]  # cut inside the answer value
    replies = [good, fenced, "I cannot help with that.", '{"question": "x" "answer": }', truncated, 500]
    with openai_stub_server(replies) as (base_url, requests):
        gen = OpenAIGenerator(
            ChatClient(base_url, "stub", max_retries=0), LLMSamplingConfig(concurrency=1, temperature=0.0)
        )
        outs = gen.generate([obama_honolulu] * 6, tiny_kb)
    assert len(requests) == 6 and requests[0]["model"] == "stub" and requests[0]["temperature"] == 0.0
    assert [o.reason for o in outs] == [
        None,
        None,
        "parse:no_json",
        "parse:invalid_json",
        "parse:truncated",
        "generate:llm_error",
    ]
    assert [o.stage for o in outs] == ["ok", "ok", "parse", "parse", "parse", "generate"]
    traj = outs[0].trajectory
    assert traj.answer == "Hawaii" and traj.generator == "openai"
    assert [t.target_doc_id for t in traj.turns] == list(obama_honolulu.doc_ids)
    assert outs[1].trajectory.turns[1].query == "Honolulu capital of"


def test_truncation_after_required_fields_is_salvaged(tiny_kb, obama_honolulu):
    good = json.dumps(GOOD)
    cut = good[: good.index("Honolulu is the capital") + 5]  # inside final_reasoning
    traj = parse_synthesis_reply(cut, obama_honolulu, tiny_kb, "openai")
    assert traj.answer == "Hawaii" and len(traj.turns) == 2 and traj.final_reasoning == ""
    cut_turn = good[: good.index('"Honolulu capital of"')]  # second turn incomplete
    with pytest.raises(ParseFailure, match="parse:truncated"):
        parse_synthesis_reply(cut_turn, obama_honolulu, tiny_kb, "openai")


@pytest.mark.parametrize(
    "reply, reason",
    [
        ("", "parse:empty_reply"),
        ('{"answer": "Hawaii", "trajectory": []}', "parse:missing_question"),
        ('{"question": "q?", "trajectory": [{"query": "a", "target": "P1"}]}', "parse:missing_answer"),
        ('{"question": "q?", "answer": "a", "steps": []}', "parse:missing_trajectory"),
        (
            '{"question": "q?", "answer": "a", "steps": [{"query": "a", "target": "X1"}]}',
            "parse:distractor_target",
        ),
        (
            '{"question": "q?", "answer": "a", "steps": [{"query": "a", "target": "P7"}]}',
            "parse:unknown_target",
        ),
        ('{"question": "q?", "answer": "a", "steps": [{"reasoning": "r"}]}', "parse:missing_query"),
    ],
)
def test_parse_failure_reasons(tiny_kb, obama_honolulu, reply, reason):
    with pytest.raises(ParseFailure) as exc:
        parse_synthesis_reply(reply, obama_honolulu, tiny_kb, "openai")
    assert exc.value.args[0] == reason


def test_key_variants_and_target_forms(tiny_kb, obama_honolulu):
    reply = json.dumps(
        {
            "Question": "q?",
            "Final Answer": "Hawaii",
            "aliases": ["State of Hawaii"],
            "turns": [
                {"thought": "t1", "search": "a", "doc": 1},
                {"Thought": "t2", "Query": "b", "Target Document": "Honolulu"},
            ],
        }
    )
    traj = parse_synthesis_reply(reply, obama_honolulu, tiny_kb, "vllm")
    assert traj.answer == "Hawaii" and traj.answer_aliases == ("State of Hawaii",)
    assert [t.target_doc_id for t in traj.turns] == list(obama_honolulu.doc_ids)
    assert [t.reasoning for t in traj.turns] == ["t1", "t2"]


def test_builder_is_deterministic(tiny_kb, obama_honolulu):
    b = LLMPromptBuilder()
    assert b.messages([obama_honolulu], tiny_kb) == LLMPromptBuilder().messages([obama_honolulu], tiny_kb)


def test_vllm_generator_import_guard():
    try:
        import vllm  # noqa: F401 - only probes whether vLLM is installed
    except ImportError:
        from gta_verl.synth.generators.vllm_gen import VLLMGenerator

        with pytest.raises(ImportError, match="gta-verl\\[vllm\\]"):
            VLLMGenerator("some/model")
    else:
        pytest.skip("vLLM is installed; the import guard is not exercised")


def test_stop_strings_and_timeout_reach_the_server(tiny_kb, obama_honolulu):
    """A base model behind the transcript template writes the next example after its JSON: the stop string
    ends the reply there, and a CPU server's minutes-long replies need a longer timeout than 60 s."""
    from gta_verl.synth.generators.registry import make_generator

    with openai_stub_server([json.dumps(GOOD)]) as (base_url, requests):
        gen = make_generator(
            "openai",
            llm_base_url=base_url,
            llm_model="stub",
            llm_timeout=900.0,
            stop=("\nInput:",),
            max_tokens=320,
        )
        outs = gen.generate([obama_honolulu], tiny_kb)
    assert outs[0].reason is None
    assert requests[0]["stop"] == ["\nInput:"] and requests[0]["max_tokens"] == 320
    assert gen.client.config.timeout == 900.0
    with openai_stub_server([json.dumps(GOOD)]) as (base_url, requests):
        OpenAIGenerator(ChatClient(base_url, "stub")).generate([obama_honolulu], tiny_kb)
    assert "stop" not in requests[0]  # no stop strings: the field is not sent (servers may reject [])
    with pytest.raises(ValueError, match="empty stop string"):
        LLMSamplingConfig(stop=("",))


def test_synth_cli_reads_stop_timeout_and_path_budget():
    from gta_verl.cli import build_parser
    from gta_verl.synth.cli import _config, _generator

    args = build_parser().parse_args(
        [
            "synth", "--kb", "k", "--out", "o", "--generator", "openai", "--llm-base-url",
            "http://127.0.0.1:1/v1", "--llm-model", "m", "--llm-stop", "\\nInput:", "--llm-stop", "END",
            "--llm-timeout", "600", "--max-paths-factor", "3",
        ]
    )  # fmt: skip
    gen = _generator(args)
    assert gen.sampling.stop == ("\nInput:", "END") and gen.client.config.timeout == 600.0
    assert _config(args).max_paths_factor == 3
