"""SQuAD normalization, EM, F1 and <answer> extraction."""

from __future__ import annotations

import pytest

from gta_verl.agent.prompt import build_user_prompt
from gta_verl.rewards.qa import compute_score, exact_match, extract_answer, f1, normalize_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  A  tale of two   cities. ", "tale of two cities"),
        ("U.S.A.", "usa"),
        ("theater", "theater"),  # "the" only as a whole word
        ("", ""),
    ],
)
def test_normalize(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("pred", "golds", "em", "f1_value"),
    [
        ("Paris", ["paris"], 1.0, 1.0),
        ("Paris, France", ["Paris"], 0.0, 2 / 3),  # P = 1/2, R = 1 → F1 = 2/3
        ("the city of light", ["Paris", "City of Light"], 1.0, 1.0),  # max over aliases
        ("New York City", ["York"], 0.0, 0.5),  # P = 1/3, R = 1 → 0.5
        ("London", ["Paris"], 0.0, 0.0),
        (None, ["Paris"], 0.0, 0.0),
        ("   ", ["Paris"], 0.0, 0.0),
        ("a", ["the"], 0.0, 0.0),  # normalizes to "" vs "": blank prediction never matches
        ("1 1 2", ["1 2 2"], 0.0, 2 / 3),  # multiset overlap {1, 2} = 2 of 3
    ],
)
def test_em_f1(pred, golds, em, f1_value):
    assert exact_match(pred, golds) == em
    assert f1(pred, golds) == pytest.approx(f1_value)


def test_single_string_gold():
    assert exact_match("paris", "Paris") == 1.0
    assert f1("paris", "Paris") == 1.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<answer> Paris </answer>", "Paris"),
        ("<answer>a</answer> then <answer>\nb\n</answer>", "b"),
        ("no tags", None),
        ("<answer> unclosed", None),
        ("<answer></answer>", ""),
        ("<info><answer>leak</answer></info>", None),
        ("<answer>x</answer><info>Doc <answer>leak</answer>", "x"),  # unclosed info to the end
        ("", None),
        (None, None),
    ],
)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


def test_prompt_example_is_not_an_answer():
    # The shared prompt teaches "<answer> Beijing </answer>"; scoring the prompt would
    # "answer" Beijing. Only the response is ever passed in.
    prompt = build_user_prompt("What is the capital of China")
    assert extract_answer(prompt) == "Beijing"  # why the prompt must never be scored
    assert compute_score("x", "<think>no idea</think>", {"target": ["Beijing"]})["score"] == 0.0


def test_compute_score_shapes():
    out = compute_score("hotpotqa", "<answer> Paris France </answer>", ["Paris"], extra_info={"k": 1}, foo=2)
    assert out == {"score": 0.0, "acc": 0.0, "f1": pytest.approx(2 / 3)}
    assert compute_score("nq", "<answer>Paris</answer>", "Paris")["acc"] == 1.0
