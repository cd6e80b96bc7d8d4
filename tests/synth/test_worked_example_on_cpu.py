"""The synthesis prompt's worked example: an earlier user/assistant turn that a base model continues.

Gemma-3-270M (a base model) behind the transcript template wrote no parseable reply to the bare request;
the example shows it a whole ``Input: <path> Output: <JSON>`` pair. The example's reply must be what the
parser expects (it is parsed here against its own path) and its request what a real request over that
path looks like (rebuilt here from a KB of its documents).
"""

from __future__ import annotations

import json
import re

import pytest

from gta_verl.llm.openai_chat import ChatClient
from gta_verl.llm.vllm_server import TRANSCRIPT_CHAT_TEMPLATE, TRANSCRIPT_STOP
from gta_verl.synth.generators.llm_prompt import (
    SYSTEM_PROMPT,
    LLMPromptBuilder,
    LLMPromptConfig,
    build_synthesis_messages,
    parse_synthesis_reply,
    worked_example_messages,
)
from gta_verl.synth.generators.openai_gen import LLMSamplingConfig, OpenAIGenerator
from gta_verl.synth.paths import build_path, build_path_index
from gta_verl.synth.validate import check_rules
from tests.support.openai_server import openai_stub_server
from tests.synth.conftest import build_tiny_kb

EXAMPLE_REQUEST = """Chain documents (2, in order):

[P1] The Old Man and the Sea
The Old Man and the Sea is a short novel written by the American author Ernest Hemingway in 1951 in Cuba, \
and published in 1952. It was the last major work of fiction by Hemingway that was published during his \
lifetime.

[P2] Ernest Hemingway
Ernest Miller Hemingway (July 21, 1899 - July 2, 1961) was an American novelist and short-story writer. \
He was born and raised in Oak Park, Illinois, and won the Nobel Prize in Literature in 1954.

Connections between consecutive chain documents:
- P1 -> P2 via: ernest hemingway

Distractor documents:

[X1] The Sun Also Rises
The Sun Also Rises is a 1926 novel by Ernest Hemingway about a group of American and British expatriates \
who travel from Paris to the Festival of San Fermin in Pamplona.

Write the JSON object now. The trajectory must have exactly 2 turns, targeting P1 to P2 in order."""

EXAMPLE_REPLY = (
    '{"question":"In which town was the author of The Old Man and the Sea born?","answer":"Oak Park",'
    '"trajectory":[{"reasoning":"I need the author of The Old Man and the Sea first.",'
    '"search_query":"The Old Man and the Sea author","target_document":"P1"},'
    '{"reasoning":"P1 says Ernest Hemingway wrote it. Now I need his birthplace.",'
    '"search_query":"Ernest Hemingway birthplace","target_document":"P2"}],'
    '"final_reasoning":"Ernest Hemingway wrote The Old Man and the Sea (P1) and was born in Oak Park (P2)."}'
)


def _example_kb_and_path():
    """A KB of the example's three documents and its path P1 -> P2 over ``ernest hemingway``."""
    request = worked_example_messages()[0]["content"]
    docs = re.findall(r"\[(?:P|X)\d\] (.+)\n(.+)", request)
    assert [title for title, _ in docs] == [
        "The Old Man and the Sea",
        "Ernest Hemingway",
        "The Sun Also Rises",
    ]
    triples = [
        [("the old man and the sea", "written by", "ernest hemingway")],
        [("ernest hemingway", "born in", "oak park")],
        [("the sun also rises", "novel by", "ernest hemingway")],
    ]
    kb = build_tiny_kb([(t, x, trs) for (t, x), trs in zip(docs, triples, strict=True)], synonyms=())
    return kb, build_path(build_path_index(kb), [0, 1], [["ernest hemingway"]])


def test_request_sends_the_example_pair_before_the_real_input(tiny_kb, obama_honolulu):
    with openai_stub_server([EXAMPLE_REPLY]) as (base_url, requests):
        outs = OpenAIGenerator(ChatClient(base_url, "stub"), LLMSamplingConfig(concurrency=1)).generate(
            [obama_honolulu], tiny_kb
        )
        OpenAIGenerator(
            ChatClient(base_url, "stub"),
            LLMSamplingConfig(concurrency=1),
            LLMPromptConfig(worked_example=False),
        ).generate([obama_honolulu], tiny_kb)
    with_example, without = requests[0]["messages"], requests[1]["messages"]
    assert [m["role"] for m in with_example] == ["system", "user", "assistant", "user"]
    assert with_example[0]["content"] == SYSTEM_PROMPT
    assert with_example[1]["content"] == EXAMPLE_REQUEST
    assert with_example[2]["content"] == EXAMPLE_REPLY
    assert with_example[3]["content"].startswith("Chain documents (2, in order):\n\n[P1] Barack Obama\n")
    # turning it off sends the request alone, exactly as before the example existed
    assert [m["role"] for m in without] == ["system", "user"]
    assert without == [with_example[0], with_example[3]]
    # the example's reply sent back as the answer (what Gemma-3-270M did greedily) is no trajectory
    assert outs[0].stage == "parse" and outs[0].reason == "parse:copied_example"


def test_example_reply_parses_into_a_valid_trajectory_over_its_own_path():
    kb, path = _example_kb_and_path()
    reply = worked_example_messages()[1]["content"]
    traj = parse_synthesis_reply(reply, path, kb, "openai")
    assert traj.question == "In which town was the author of The Old Man and the Sea born?"
    assert traj.answer == "Oak Park" and traj.hops == 2
    assert [t.target_doc_id for t in traj.turns] == list(path.doc_ids)
    assert [t.query for t in traj.turns] == ["The Old Man and the Sea author", "Ernest Hemingway birthplace"]
    assert traj.final_reasoning.endswith("born in Oak Park (P2).")
    assert traj.bridge_entities == (("ernest hemingway",),)
    # the rules every generated trajectory must pass (answer in P2, not in the question, no pasted text …)
    assert check_rules(traj, {p.doc_id: p for p in kb.passages}) is None
    # one line of compact JSON, keys in the order the system prompt's schema line shows them
    assert reply == json.dumps(json.loads(reply), ensure_ascii=False, separators=(",", ":"))
    schema = SYSTEM_PROMPT.splitlines()[-1]
    assert list(dict.fromkeys(re.findall(r'"(\w+)":', reply))) == re.findall(r'"(\w+)":', schema)
    assert json.loads(reply)["answer"] in kb.passages[1].text


def test_example_request_is_what_a_real_request_over_its_path_looks_like():
    kb, path = _example_kb_and_path()
    real = build_synthesis_messages(path, kb, [2], LLMPromptConfig(worked_example=False))
    assert real[-1] == worked_example_messages()[0]
    # and the builder still honours max_doc_chars inside the example
    short = worked_example_messages(LLMPromptConfig(max_doc_chars=100))[0]["content"]
    assert "[P1] The Old Man and the Sea\nThe Old Man and the Sea is a short novel written by the" in short
    assert "published in 1952" not in short


def test_transcript_template_renders_example_then_real_input_ending_on_output(tiny_kb, obama_honolulu):
    jinja2 = pytest.importorskip("jinja2")
    messages = LLMPromptBuilder().messages([obama_honolulu], tiny_kb)[0]
    text = jinja2.Template(TRANSCRIPT_CHAT_TEMPLATE).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=True
    )
    real = messages[-1]["content"]
    assert text == (
        f"<bos>{SYSTEM_PROMPT}\n\n"
        f"Input:\n{EXAMPLE_REQUEST}\nOutput: {EXAMPLE_REPLY}\n\n"
        f"Input:\n{real}\nOutput: "
    )
    assert text.endswith(f"Input:\n{real}\nOutput: ")
    # the example ends where a base model's reply is cut: right before the next "Input:"
    assert text.index(TRANSCRIPT_STOP[0]) < text.index(EXAMPLE_REPLY) < text.rindex(TRANSCRIPT_STOP[0])
    assert text.count(TRANSCRIPT_STOP[0]) == 2


def test_synth_cli_turns_the_example_off():
    from gta_verl.cli import build_parser
    from gta_verl.synth.cli import _generator

    base = "synth --kb k --out o --generator openai --llm-base-url http://127.0.0.1:1/v1".split()
    assert _generator(build_parser().parse_args([*base, "--llm-model", "m"])).prompts.config.worked_example
    off = build_parser().parse_args([*base, "--llm-model", "m", "--no-worked-example"])
    assert _generator(off).prompts.config.worked_example is False
