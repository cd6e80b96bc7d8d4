"""One reader of ``gta/turn_doc_ids``: the reward, the evaluation, its records and verl's dumps agree.

Every place that reads per-turn doc ids goes through :func:`gta_verl.data.schema.parse_turn_doc_ids`:
the reward (:func:`gta_verl.rewards.scoring.scoring_request`), the evaluation's record of a rollout
(:func:`gta_verl.data.schema.rollout_record_from_fields`), a records file's row
(:func:`gta_verl.eval.records.from_row`) and a validation dump's line
(:func:`gta_verl.eval.verl_dumps.record_from_entry`). Before, evaluation read ``"d1d2"`` as four
one-character turns while the reward refused it; now each refuses it with the same message, and a
well-formed value reads the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gta_verl.data.schema import (
    EF_TURN_DOC_IDS,
    EF_TURN_QUERY_DOC_IDS,
    make_ground_truth,
    parse_turn_doc_ids,
    rollout_record_from_fields,
)
from gta_verl.data.types import RolloutRecord
from gta_verl.eval.records import EvalRecord, from_row, to_row
from gta_verl.eval.verl_dumps import QuestionInfo, record_from_entry
from gta_verl.protocol import build_user_prompt
from gta_verl.rewards.scoring import scoring_request

GT = make_ground_truth(["Paris"], ["d1", "d2"], [])
#: Two searches, so a dump's own ids replace the ones read from the text.
OUTPUT = "<search>a</search><information>x</information><search>b</search><information>y</information>"


class _Tokenizer:
    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return OUTPUT


def _reward(value: Any) -> list[list[str]]:
    req = scoring_request([1, 2, 3], {"ground_truth": GT}, {EF_TURN_DOC_IDS: value}, _Tokenizer())
    return req.turn_doc_ids


def _evaluation(value: Any) -> list[list[str]]:
    rec = rollout_record_from_fields({EF_TURN_DOC_IDS: value}, GT, question="q")
    return [list(t) for t in rec.turn_doc_ids]


def _records(value: Any) -> list[list[str]]:
    row = to_row(
        EvalRecord(RolloutRecord(question="q", gold_answers=("Paris",), target_doc_ids=("d1",), qid="q"))
    )
    row["turn_doc_ids"] = value
    return [list(t) for t in from_row(row).rollout.turn_doc_ids]


def _dump(value: Any) -> list[list[str]]:
    entry = {
        "input": f"user\n{build_user_prompt('q')}\nassistant\n",
        "output": OUTPUT,
        "gts": GT,
        "gta/turn_doc_ids": value,
    }
    return [list(t) for t in record_from_entry(entry, 0, QuestionInfo()).rollout.turn_doc_ids]


READERS: dict[str, Callable[[Any], list[list[str]]]] = {
    "reward": _reward,
    "evaluation": _evaluation,
    "records": _records,
    "dump": _dump,
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("d1d2", r"turn_doc_ids must be a list of lists of ids, got str 'd1d2'$"),
        (["d1", "d2"], r"turn_doc_ids\[0\] must be a list of ids, got str 'd1'$"),
        ([[b"d1"], [b"d2"]], r"turn_doc_ids\[0\] holds a bytes id b'd1'; ids are strings$"),
        ([[["d1"]], [["d2"]]], r"turn_doc_ids\[0\] holds a list id \['d1'\]; ids are strings$"),
    ],
    ids=["string", "flat-list", "bytes", "three-deep"],
)
def test_malformed_doc_ids_are_refused_alike_everywhere(reader: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        READERS[reader](value)


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    "value",
    [
        [["d1", "x"], ["d2"]],
        np.array([np.array(["d1", "x"], dtype=object), np.array(["d2"], dtype=object)], dtype=object),
    ],
    ids=["lists", "numpy"],
)
def test_well_formed_doc_ids_read_alike_everywhere(reader: str, value: Any) -> None:
    assert READERS[reader](value) == parse_turn_doc_ids(value) == [["d1", "x"], ["d2"]]


def test_a_dump_holding_json_text_is_decoded_then_read_by_the_same_reader() -> None:
    """verl writes each dumped value as JSON: a manager's JSON text is its list, ``"d1d2"`` no list."""
    assert _dump(json.dumps([["d1", "x"], ["d2"]])) == [["d1", "x"], ["d2"]]
    with pytest.raises(ValueError, match=r"got str 'd1d2'$"):
        _dump(json.dumps("d1d2"))


def test_query_doc_ids_have_one_reader_too() -> None:
    fields = {EF_TURN_DOC_IDS: [["d1", "d2"]], EF_TURN_QUERY_DOC_IDS: [[["d1"], ["d2"]]]}
    rec = rollout_record_from_fields(fields, GT, question="q")
    assert rec.turn_query_doc_ids == ((("d1",), ("d2",)),)
    req = scoring_request([1], {"ground_truth": GT}, fields, _Tokenizer())
    assert req.query_doc_ids == [[["d1"], ["d2"]]]
    for read in (
        lambda: rollout_record_from_fields({EF_TURN_QUERY_DOC_IDS: "d1d2"}, GT),
        lambda: (
            scoring_request(
                [1], {"ground_truth": GT}, {EF_TURN_QUERY_DOC_IDS: "d1d2"}, _Tokenizer()
            ).query_doc_ids
        ),
    ):
        with pytest.raises(
            ValueError, match=r"turn_query_doc_ids must be a list per search turn, got str 'd1d2'$"
        ):
            read()
