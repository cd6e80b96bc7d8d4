"""The action protocol with several queries per search (max_queries = K > 1)."""

from __future__ import annotations

import pytest

from gta_verl.protocol import QUERY_SEPARATOR, final_answer, parse_action, parse_turns, split_queries


def test_separator():
    assert QUERY_SEPARATOR == "##"


@pytest.mark.parametrize(
    "content, k, expected",
    [
        ("a ## b", 2, ("a", "b")),
        ("a##b##c", 3, ("a", "b", "c")),
        ("a ## ## b ##", 3, ("a", "b")),  # empty parts dropped
        ("a ## a ## b", 2, ("a", "b")),  # an exact repeat is one query
        ("a ## b ## c", 2, ("a", "b", "c")),  # over K: returned, the action decides
        ("C# ## F#", 1, ("C# ## F#",)),  # K = 1: the content is the query
        ("", 3, ()),
    ],
)
def test_split_queries(content, k, expected):
    assert split_queries(content, k) == expected


def test_parse_action_multi():
    action = parse_action("Two facts. <search> born A ## born B </search>", max_queries=2)
    assert (action.kind, action.content, action.queries) == (
        "search",
        "born A ## born B",
        ("born A", "born B"),
    )
    assert action.action_start == len("Two facts. ")


def test_parse_action_rules_for_k():
    assert parse_action("<search> a ## b ## c </search>", 2).kind == "invalid"
    assert parse_action("<search> a ## b ## c </search>", 2).reason == "3 queries in one search; at most 2"
    assert parse_action("<search> ## ## </search>", 2).reason == "empty search query"
    # K = 1 (default): the single-query action, one query holding the separator
    one = parse_action("<search> a ## b </search>")
    assert (one.kind, one.content, one.queries) == ("search", "a ## b", ("a ## b",))
    # answers never split
    assert parse_action("<answer> a ## b </answer>", 3).content == "a ## b"


def test_parse_turns_and_final_answer_with_k():
    text = "<search> a ## b </search>\n\n<info>Doc 1(Title: T) x</info>\n\n<answer> Paris </answer>"
    turns = parse_turns(text, max_queries=2)
    assert [t.action.kind for t in turns] == ["search", "answer"]
    assert turns[0].action.queries == ("a", "b") and turns[0].observation == "Doc 1(Title: T) x"
    assert final_answer(text) == "Paris"
    # over K the turn is invalid, the rollout continues to the answer
    assert [t.action.kind for t in parse_turns("<search> a ## b ## c </search> <answer> P </answer>", 2)] == [
        "invalid",
        "answer",
    ]
