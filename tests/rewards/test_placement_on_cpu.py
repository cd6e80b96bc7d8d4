"""Opt-in per-turn reward placement: positions, sum preservation, extra_fields wiring."""

from __future__ import annotations

import json

import pytest

from gta_verl.rewards.placement import (
    TURN_REWARDS_KEY,
    place_from_extra_fields,
    place_turn_rewards,
    query_end_positions,
    turn_rewards_from_info,
)


def test_places_turns_and_remainder():
    # R = 0.25 − 0.1 + 1 = 1.15: turns at their query ends, r_ans = 1.0 on the last token.
    out = place_turn_rewards(8, 1.15, [2, 5], [0.25, -0.1])
    assert out[2] == 0.25 and out[5] == -0.1
    assert out[7] == pytest.approx(1.0)
    assert sum(out) == pytest.approx(1.15)
    assert [i for i, v in enumerate(out) if v != 0.0] == [2, 5, 7]


def test_turn_on_last_token_accumulates():
    out = place_turn_rewards(3, 2.5, [2], [0.5])
    assert out == [0.0, 0.0, 2.5]


def test_no_turns_is_verl_default():
    assert place_turn_rewards(4, -1.0, [], []) == [0.0, 0.0, 0.0, -1.0]


def test_truncated_turn_goes_to_remainder():
    out = place_turn_rewards(4, 0.4, [1, 9], [0.25, 0.25])
    assert out == pytest.approx([0.0, 0.25, 0.0, 0.15])
    assert sum(out) == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 1.0, [], []), "response_length"),
        ((4, 1.0, [1], []), "1 turn end positions but 0"),
        ((4, 1.0, [-1], [0.1]), "negative"),
    ],
)
def test_errors(args, match):
    with pytest.raises(ValueError, match=match):
        place_turn_rewards(*args)


def test_from_extra_fields():
    spans = [
        ["reasoning", 0, 3],
        ["query", 3, 6],
        ["observation", 6, 10],
        ["reasoning", 10, 12],
        ["query", 12, 14],
        ["observation", 14, 18],
        ["answer", 18, 20],
    ]
    assert query_end_positions(spans) == [5, 13]
    extra = {"gta/turn_spans": spans, "reward_extra_info": {TURN_REWARDS_KEY: json.dumps([0.25, 0.5])}}
    out = place_from_extra_fields(20, 2.75, extra)
    assert out[5] == 0.25 and out[13] == 0.5 and out[19] == pytest.approx(2.0)
    assert sum(out) == pytest.approx(2.75)


def test_from_extra_fields_mismatch_and_missing():
    # Two rewards, one query span (the last query was truncated away): pair in order.
    extra = {"gta/turn_spans": [["query", 0, 2]], "reward_extra_info": {TURN_REWARDS_KEY: "[0.25, -0.1]"}}
    out = place_from_extra_fields(5, 1.15, extra)
    assert out == pytest.approx([0.0, 0.25, 0.0, 0.0, 0.9])
    # No reward info (e.g. the naive manager): everything on the last token.
    assert place_from_extra_fields(3, 1.0, {}) == [0.0, 0.0, 1.0]
    assert turn_rewards_from_info({TURN_REWARDS_KEY: [1, 2]}) == [1.0, 2.0]
