"""Turn spans → masks and reward positions (pure)."""

from __future__ import annotations

import pytest

from gta_verl.agent.spans import (
    clip_spans,
    distill_mask_from_spans,
    normalize_spans,
    response_mask_from_spans,
    span_last_positions,
)

SPANS = [
    ["reasoning", 0, 2],
    ["query", 2, 4],
    ["observation", 4, 7],
    ["reasoning", 7, 8],
    ["query", 8, 9],
    ["observation", 9, 10],
    ["invalid", 10, 11],
    ["answer", 11, 13],
]


def test_distill_mask_hand_computed() -> None:
    # 1 on reasoning + query; 0 on observation, invalid, answer and the 2 padding tokens.
    expected = [1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert distill_mask_from_spans(15, SPANS) == [float(v) for v in expected]


def test_response_mask_hand_computed() -> None:
    expected = [1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0]
    assert response_mask_from_spans(15, SPANS) == expected


def test_query_end_positions() -> None:
    assert span_last_positions(SPANS, "query") == [3, 8]
    assert span_last_positions(SPANS, "answer") == [12]


def test_clip_spans_for_truncation() -> None:
    assert clip_spans(SPANS, 5) == [("reasoning", 0, 2), ("query", 2, 4), ("observation", 4, 5)]
    assert clip_spans(SPANS, 0) == []


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        ([["thinking", 0, 1]], "unknown kind"),
        ([["query", 2, 1]], "reversed"),
        ([["query", 0, 3], ["answer", 2, 4]], "overlaps"),
        ([["query", 0]], r"not \[kind, start, end\]"),
    ],
)
def test_bad_spans(spans, message) -> None:
    with pytest.raises(ValueError, match=message):
        normalize_spans(spans)


def test_span_past_length_rejected() -> None:
    with pytest.raises(ValueError, match="response_length=3"):
        distill_mask_from_spans(3, [["query", 0, 4]])
