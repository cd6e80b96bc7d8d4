"""Action parsing of newly generated text (pure; Algorithm 1 + verl #935 robustness)."""

from __future__ import annotations

import pytest

from gta_verl.agent.parser import token_index_for_char
from gta_verl.protocol import has_trailing, parse_action


@pytest.mark.parametrize(
    ("text", "kind", "content"),
    [
        ("I need the director. <search> director of Inception </search>", "search", "director of Inception"),
        ("<answer> Christopher Nolan </answer>", "answer", "Christopher Nolan"),
        ("<answer></answer>", "answer", ""),
        # nested / repeated openers: innermost query
        ("<search> a <search> b </search>", "search", "b"),
        # multiple actions (backend ignored the stop string): the first closer wins
        ("<answer> Paris </answer> <answer> Rome </answer>", "answer", "Paris"),
        ("<search> q1 </search><info>x</info><answer> A </answer>", "search", "q1"),
        ("<search> s <answer> A </answer> </search>", "answer", "A"),
        # multi-line query is kept (stripped)
        ("<search>\n line one\n</search>", "search", "line one"),
    ],
)
def test_valid_actions(text: str, kind: str, content: str) -> None:
    action = parse_action(text)
    assert (action.kind, action.content) == (kind, content)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("just thinking, no tags", "no closing"),
        ("", "no closing"),
        ("<search> unterminated query", "no closing"),
        ("stray </search> closer", "without"),
        ("<search>   </search>", "empty search query"),
        ("<answer> x </search>", "without <search>"),
    ],
)
def test_invalid_actions(text: str, reason: str) -> None:
    action = parse_action(text)
    assert action.kind == "invalid" and action.content == ""
    assert reason in action.reason


def test_offsets_and_trailing() -> None:
    text = "think <answer> A </answer> and then more"
    action = parse_action(text)
    assert text[action.action_start : action.end] == "<answer> A </answer>"
    assert has_trailing(text, action)
    assert not has_trailing("<answer> A </answer>\n", parse_action("<answer> A </answer>\n"))
    invalid = parse_action("no action")
    assert invalid.action_start == invalid.end == len("no action")


def test_prompt_example_is_not_parsed() -> None:
    # Only newly generated text is parsed: the prompt's "<answer> Beijing </answer>" example
    # never reaches parse_action (Search-R1 #79); a reasoning-only turn is invalid.
    assert parse_action("Let me think about it.").kind == "invalid"


def test_token_index_for_char_with_real_tokenizer(qwen_tokenizer) -> None:
    text = "Café ✓ <search> q </search> trailing"
    ids = qwen_tokenizer.encode(text, add_special_tokens=False)

    def decode(x):
        return qwen_tokenizer.decode(list(x), skip_special_tokens=False)

    action = parse_action(decode(ids))
    end_tok = token_index_for_char(ids, action.end, decode)
    assert decode(ids[:end_tok]).endswith("</search>")
    start_tok = token_index_for_char(ids, action.action_start, decode, straddler="after")
    # " <" is one Qwen token: it straddles the boundary and goes to the action span.
    assert decode(ids[start_tok:end_tok]) == " <search> q </search>"
    assert decode(ids[:start_tok]) == "Café ✓"
    before = token_index_for_char(ids, action.action_start, decode, straddler="before")
    assert before == start_tok + 1
    assert token_index_for_char(ids, 0, decode) == 0
    assert token_index_for_char(ids, len(text), decode) == len(ids)
    assert token_index_for_char(ids, len(text) + 5, decode) == len(ids)
    assert token_index_for_char(ids, len(text), decode, straddler="after") == len(ids)
    assert token_index_for_char([], 3, decode, straddler="after") == 0
