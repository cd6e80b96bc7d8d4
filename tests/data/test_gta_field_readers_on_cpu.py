"""One reader of every ``gta/*`` field: the reward, the evaluation, its records, verl's dumps and the
step metrics agree.

Each field the agent loop writes has one ``parse_*`` reader in :mod:`gta_verl.data.schema` (per-turn
doc ids: ``tests/data/test_turn_doc_ids_readers_on_cpu.py``). Before, the consumers parsed the rest
each their own way: a string of queries or texts was read a character at a time, ``"3"`` was three
searches for the reward and none for the step metrics, the string ``"False"`` made a rollout
truncated. Now a malformed value is refused by every consumer with the same message, and a
well-formed value reads the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gta_verl.agent.spans import distill_mask_from_spans
from gta_verl.algos.step_metrics import evidence_step_metrics
from gta_verl.data.schema import (
    EF_ANSWER,
    EF_INVALID_ACTIONS,
    EF_NUM_SEARCHES,
    EF_RETRIEVAL_ERRORS,
    EF_TRUNCATED,
    EF_TURN_DOC_IDS,
    EF_TURN_OBS_START,
    EF_TURN_QUERIES,
    EF_TURN_TEXTS,
    make_ground_truth,
    parse_count,
    rollout_record_from_fields,
)
from gta_verl.data.types import RolloutRecord
from gta_verl.eval.records import EvalRecord, from_row, to_row
from gta_verl.eval.verl_dumps import QuestionInfo, record_from_entry
from gta_verl.protocol import build_user_prompt
from gta_verl.rewards.path_router import PathRouterConfig
from gta_verl.rewards.path_router_manager import retrieved_texts, score_path_router
from gta_verl.rewards.placement import query_end_positions
from gta_verl.rewards.scoring import ScoringRequest, score_trajectory_guided, scoring_request

GT = make_ground_truth(["Paris"], ["d1"], ["Paris is the capital"])
OUTPUT = "<search>a</search><information>x</information><answer>Paris</answer>"


class _Tokenizer:
    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return OUTPUT


def _request(fields: dict[str, Any]) -> ScoringRequest:
    return scoring_request([1, 2, 3], {"ground_truth": GT}, fields, _Tokenizer())


def _records_row(column: str, value: Any) -> RolloutRecord:
    row = to_row(
        EvalRecord(RolloutRecord(question="q", gold_answers=("Paris",), target_doc_ids=("d1",), qid="q"))
    )
    row[column] = value
    return from_row(row).rollout


def _dump(column: str, value: Any) -> RolloutRecord:
    prompt = f"user\n{build_user_prompt('q')}\nassistant\n"
    entry = {"input": prompt, "output": OUTPUT, "gts": GT, column: value}
    return record_from_entry(entry, 0, QuestionInfo()).rollout


# ------------------------------------------------------------------------------------------ counters
COUNT_READERS: dict[str, Callable[[str, Any], int]] = {
    "reward": lambda key, v: score_trajectory_guided(_request({key: v}))[1][key.removeprefix("gta/")],
    "evaluation": lambda key, v: getattr(rollout_record_from_fields({key: v}, GT), key.removeprefix("gta/")),
    "records": lambda key, v: getattr(_records_row(key.removeprefix("gta/"), v), key.removeprefix("gta/")),
    "dump": lambda key, v: getattr(_dump(key.removeprefix("gta/"), v), key.removeprefix("gta/")),
    "step metrics": lambda key, v: int(evidence_step_metrics([{key: v}])[key]),
}


@pytest.mark.parametrize("reader", sorted(COUNT_READERS))
@pytest.mark.parametrize("key", [EF_INVALID_ACTIONS, EF_RETRIEVAL_ERRORS])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", r"must be a count, got str 'x'$"),
        (float("nan"), r"must be a whole number >= 0, got nan$"),
        (1.5, r"must be a whole number >= 0, got 1.5$"),
        (-1, r"must be a whole number >= 0, got -1$"),
        ([1], r"must be a count, got list \[1\]$"),
    ],
    ids=["string", "nan", "fraction", "negative", "list"],
)
def test_malformed_counts_are_refused_alike_everywhere(
    reader: str, key: str, value: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        COUNT_READERS[reader](key, value)


@pytest.mark.parametrize("reader", sorted(COUNT_READERS))
@pytest.mark.parametrize("value", [2, np.int64(2), 2.0], ids=["int", "numpy", "whole-float"])
def test_well_formed_counts_read_alike_everywhere(reader: str, value: Any) -> None:
    assert COUNT_READERS[reader](EF_INVALID_ACTIONS, value) == parse_count(value, EF_INVALID_ACTIONS) == 2


def test_num_searches_is_read_by_the_same_reader() -> None:
    assert _request({EF_NUM_SEARCHES: np.int64(3)}).num_searches == 3
    assert int(evidence_step_metrics([{EF_NUM_SEARCHES: 3}])["gta/num_searches"]) == 3
    for read in (
        lambda: _request({EF_NUM_SEARCHES: "3"}).num_searches,
        lambda: evidence_step_metrics([{EF_NUM_SEARCHES: "3"}]),
    ):
        with pytest.raises(ValueError, match=r"^gta/num_searches must be a count, got str '3'$"):
            read()


# ------------------------------------------------------------------------------------------ answer
ANSWER_READERS: dict[str, Callable[[Any], bool]] = {
    "reward": lambda v: _request({EF_ANSWER: v}).prediction is not None,
    "evaluation": lambda v: rollout_record_from_fields({EF_ANSWER: v}, GT).answer is not None,
    "records": lambda v: _records_row("answer", v).answer is not None,
    "step metrics": lambda v: evidence_step_metrics([{EF_ANSWER: v}])["gta/answer_rate"] > 0,
}


@pytest.mark.parametrize("reader", sorted(ANSWER_READERS))
def test_answer_is_read_alike_everywhere(reader: str) -> None:
    assert ANSWER_READERS[reader]("Paris") is True
    assert ANSWER_READERS[reader](np.str_("Paris")) is True
    assert ANSWER_READERS[reader](None) is False
    with pytest.raises(ValueError, match=r"answer must be a string or None, got int 7$"):
        ANSWER_READERS[reader](7)


# ------------------------------------------------------------------------------------------ queries and texts
def test_queries_are_read_alike_by_evaluation_records_and_path_router() -> None:
    cfg = PathRouterConfig()
    good = ["capital of France"]
    assert rollout_record_from_fields({EF_TURN_QUERIES: good}, GT).turn_queries == tuple(good)
    assert _records_row("turn_queries", good).turn_queries == tuple(good)
    score_path_router(_request({EF_TURN_QUERIES: np.array(good, dtype=object)}), cfg)
    for read in (
        lambda v: rollout_record_from_fields({EF_TURN_QUERIES: v}, GT),
        lambda v: _records_row("turn_queries", v),
        lambda v: score_path_router(_request({EF_TURN_QUERIES: v}), cfg),
    ):
        with pytest.raises(ValueError, match=r"turn_queries must be a list of queries, got str 'ab'$"):
            read("ab")
        with pytest.raises(ValueError, match=r"turn_queries holds a int query 3; queries are strings$"):
            read([3])


def test_texts_are_read_alike_by_evaluation_path_router_and_the_unshown_filter() -> None:
    good = [["Paris\nthe capital"], []]
    assert rollout_record_from_fields({EF_TURN_TEXTS: good}, GT).retrieved_texts == ("Paris\nthe capital",)
    assert retrieved_texts(_request({EF_TURN_TEXTS: good})) == ["Paris\nthe capital"]
    shown = {EF_TURN_OBS_START: [0, 0], EF_TURN_DOC_IDS: [["d1"], []]}
    for read in (
        lambda v: rollout_record_from_fields({EF_TURN_TEXTS: v}, GT),
        lambda v: retrieved_texts(_request({EF_TURN_TEXTS: v})),
        lambda v: _request({**shown, EF_TURN_TEXTS: v}),  # verl's tool_agent: the unshown filter reads them
    ):
        with pytest.raises(ValueError, match=r"turn_texts must be a list of lists of texts, got str 'ab'$"):
            read("ab")
        with pytest.raises(ValueError, match=r"turn_texts\[0\] must be a list of texts, got str 'ab'$"):
            read(["ab"])


# ------------------------------------------------------------------------------------------ flags and spans
def test_a_string_flag_is_refused_not_read_as_true() -> None:
    cfg = PathRouterConfig()
    score_path_router(_request({EF_TRUNCATED: np.bool_(True)}), cfg)
    with pytest.raises(ValueError, match=r"^gta/truncated must be a bool, got str 'False'$"):
        score_path_router(_request({EF_TRUNCATED: "False"}), cfg)


def test_spans_are_read_alike_by_the_loop_masks_and_the_placement() -> None:
    spans = [["reasoning", 0, 2], ["query", 2, 4], ["observation", 4, 6]]
    assert query_end_positions(spans) == [3]
    assert distill_mask_from_spans(6, spans) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    overlapping = [["query", 0, 4], ["query", 2, 5]]
    for read in (lambda: query_end_positions(overlapping), lambda: distill_mask_from_spans(6, overlapping)):
        with pytest.raises(ValueError, match=r"turn span #1 .* overlaps the previous span or is reversed$"):
            read()
