"""Ground truth that would be mis-scored is refused, naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.data.schema import parse_ground_truth


def test_a_string_id_list_is_refused_not_split_into_characters() -> None:
    # split into characters, target_doc_ids="d1" would become ['d', '1'] and a rollout score 0.9
    # where 2.0 is right
    with pytest.raises(ValueError, match="target_doc_ids must be a list of strings, got the string 'd1'"):
        parse_ground_truth({"target": ["x"], "target_doc_ids": "d1"})
    with pytest.raises(ValueError, match="support_texts must be a list"):
        parse_ground_truth({"target": ["x"], "support_texts": "text"})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), np.float64("nan"), [float("nan")], True])
def test_non_finite_or_missing_gold_answers_are_refused(bad) -> None:
    with pytest.raises(ValueError, match="gold answer"):
        parse_ground_truth({"target": bad})


def test_scalars_and_arrays_are_answers() -> None:
    assert parse_ground_truth({"target": 1990}) == (["1990"], [], [])
    assert parse_ground_truth({"target": np.int64(7)}) == (["7"], [], [])
    assert parse_ground_truth(
        {"target": np.array(["a", "b"], dtype=object), "target_doc_ids": np.array(["d1", "d2"], dtype=object)}
    ) == (["a", "b"], ["d1", "d2"], [])
    assert parse_ground_truth("Paris") == (["Paris"], [], [])
    assert parse_ground_truth(["Paris", "paris"]) == (["Paris", "paris"], [], [])
