"""Several queries per search (gta.agent.max_queries_per_turn = K > 1), scripted, real tokenizer.

The retriever is a deterministic map from query to documents, so every expected record
below is written out by hand: the union of a turn's queries' passages, in query order
then rank order, each document once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.config import AgentConfig
from gta_verl.agent.runner import make_trainer_config, run_agent_rollouts
from gta_verl.data import schema
from gta_verl.data.schema import make_verl_row
from gta_verl.data.types import QAExample, RetrievalHit, RetrievalResult
from gta_verl.protocol import (
    INVALID_ACTION_MESSAGE,
    SYSTEM_INSTRUCTIONS,
    build_messages,
    checked_max_queries,
    format_observation,
)
from gta_verl.rewards.scoring import ScoringRequest, score_trajectory_guided

QUESTION = QAExample("q1", "Were A and B born in the same city?", ("no",), ("d1", "d2"), 2, "toy")
DOCS = {"a": ["d1", "x"], "b": ["d2", "d1"], "c": ["y"]}


def _hit(doc: str) -> RetrievalHit:
    return RetrievalHit(doc, f"T{doc}", f"text of {doc}", 0.5, "graph")


class MapRetriever:
    """R(q) from :data:`DOCS`; records each batched call; ``fail`` queries come back as errors."""

    def __init__(self, fail: Sequence[str] = ()) -> None:
        self.calls: list[list[str]] = []
        self.fail = set(fail)

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        self.calls.append(list(queries))
        return [
            RetrievalResult(q, error="timeout after 30s")
            if q in self.fail
            else RetrievalResult(q, hits=tuple(_hit(d) for d in DOCS.get(q, [])))
            for q in queries
        ]


def rollout(tokenizer, client, script, k: int):
    manager = ScriptedServerManager(tokenizer, [script])
    cfg = make_trainer_config(
        prompt_length=1024, response_length=2048, gta={"agent": {"max_queries_per_turn": k}}
    )
    rows = [make_verl_row(QUESTION, 0, max_queries_per_turn=k)]
    (out,) = run_agent_rollouts(rows, manager, tokenizer, client, cfg, n_samples=1)
    return out


def observations(tokenizer, out) -> list[str]:
    spans = out.extra_fields[schema.EF_TURN_SPANS]
    return [tokenizer.decode(out.response_ids[s:e]) for kind, s, e in spans if kind == "observation"]


def test_one_batched_call_and_the_union_is_the_turn(qwen_tokenizer):
    client = MapRetriever()
    out = rollout(
        qwen_tokenizer,
        client,
        ["<search> a ## b </search>", "<search> c </search>", "<answer> no </answer>"],
        2,
    )
    ef = out.extra_fields
    # one retriever call per turn, the turn's queries batched in it
    assert client.calls == [["a", "b"], ["c"]]
    # turn 1: a → [d1, x], b → [d2, d1]; union in query then rank order = [d1, x, d2]
    assert ef[schema.EF_TURN_DOC_IDS] == [["d1", "x", "d2"], ["y"]]
    assert ef[schema.EF_TURN_QUERIES] == ["a ## b", "c"]
    assert ef[schema.EF_NUM_SEARCHES] == 2 and ef[schema.EF_RETRIEVAL_ERRORS] == 0
    # the policy saw exactly that union, as one <info> block
    assert observations(qwen_tokenizer, out)[0] == format_observation([_hit("d1"), _hit("x"), _hit("d2")])


def test_the_reward_scores_the_recorded_union(qwen_tokenizer):
    out = rollout(
        qwen_tokenizer,
        MapRetriever(),
        ["<search> a ## b </search>", "<search> c </search>", "<answer> no </answer>"],
        2,
    )
    request = ScoringRequest(
        response_text="", answers=("no",), target_doc_ids=("d1", "d2"), extra_fields=out.extra_fields
    )
    reward, info = score_trajectory_guided(request)
    # turn 1's union holds d1 and d2: Δ_1 = {d1, d2} → 0.25·2 = 0.5; turn 2 [y]: miss −0.10;
    # EM 1 with C_T ⊇ S → +2.  R = 0.5 − 0.1 + 2 = 2.4
    assert reward == pytest.approx(2.4)
    assert info["target_doc_cov"] == 1.0 and info["zero_target_turns"] == 1 and info["num_searches"] == 2


def test_zero_target_queries_are_reported_not_only_turns(qwen_tokenizer):
    out = rollout(
        qwen_tokenizer,
        MapRetriever(),
        ["<search> a ## c </search>", "<search> b </search>", "<answer> no </answer>"],
        2,
    )
    # turn 1: a → [d1, x], c → [y]; turn 2: b → [d2, d1]. Each query's shown share is recorded.
    assert out.extra_fields[schema.EF_TURN_QUERY_DOC_IDS] == [[["d1", "x"], ["y"]], [["d2", "d1"]]]
    request = ScoringRequest(
        response_text="", answers=("no",), target_doc_ids=("d1", "d2"), extra_fields=out.extra_fields
    )
    _, info = score_trajectory_guided(request)
    # Turns: turn 1 finds d1, turn 2 finds d2 → 0 zero-target turns. Queries: a finds d1, c finds
    # nothing (the useless extra query inside a productive turn), b finds d2 → 1 zero-target query.
    assert info["zero_target_turns"] == 0 and info["zero_target_queries"] == 1
    # With one query per search (K = 1) the two counts are the same quantity (Table 3's).
    one = rollout(qwen_tokenizer, MapRetriever(), ["<search> c </search>", "<answer> no </answer>"], 1)
    assert schema.EF_TURN_QUERY_DOC_IDS not in one.extra_fields
    _, info = score_trajectory_guided(
        ScoringRequest(
            response_text="", answers=("no",), target_doc_ids=("d1",), extra_fields=one.extra_fields
        )
    )
    assert info["zero_target_turns"] == info["zero_target_queries"] == 1


def test_too_many_queries_is_an_invalid_action(qwen_tokenizer):
    client = MapRetriever()
    out = rollout(qwen_tokenizer, client, ["<search> a ## b ## c </search>", "<answer> no </answer>"], 2)
    assert client.calls == []
    assert out.extra_fields[schema.EF_INVALID_ACTIONS] == 1 and out.extra_fields[schema.EF_NUM_SEARCHES] == 0
    spans = out.extra_fields[schema.EF_TURN_SPANS]
    ((s, e),) = [(s, e) for kind, s, e in spans if kind == "invalid"]
    assert qwen_tokenizer.decode(out.response_ids[s:e]) == INVALID_ACTION_MESSAGE


def test_a_failed_query_leaves_the_others_shown(qwen_tokenizer):
    out = rollout(
        qwen_tokenizer, MapRetriever(fail=["a"]), ["<search> a ## b </search>", "<answer> no </answer>"], 2
    )
    # a timed out, b → [d2, d1] is shown; the failure is counted
    assert out.extra_fields[schema.EF_TURN_DOC_IDS] == [["d2", "d1"]]
    assert out.extra_fields[schema.EF_RETRIEVAL_ERRORS] == 1
    assert observations(qwen_tokenizer, out)[0] == format_observation([_hit("d2"), _hit("d1")])


def test_every_query_failed_is_a_failed_search(qwen_tokenizer):
    out = rollout(
        qwen_tokenizer,
        MapRetriever(fail=["a", "b"]),
        ["<search> a ## b </search>", "<answer> no </answer>"],
        2,
    )
    assert out.extra_fields[schema.EF_TURN_DOC_IDS] == [[]]
    assert out.extra_fields[schema.EF_RETRIEVAL_ERRORS] == 2
    assert observations(qwen_tokenizer, out)[0] == format_observation([], error="timeout after 30s")


def test_default_keeps_one_query_per_search(qwen_tokenizer):
    # K = 1: "a ## b" is one query, sent as it is
    client = MapRetriever()
    out = rollout(qwen_tokenizer, client, ["<search> a ## b </search>", "<answer> no </answer>"], 1)
    assert client.calls == [["a ## b"]]
    assert out.extra_fields[schema.EF_TURN_QUERIES] == ["a ## b"] and out.extra_fields[
        schema.EF_TURN_DOC_IDS
    ] == [[]]


def test_prompt_tells_the_policy_only_when_enabled():
    assert build_messages("Who?") == [{"role": "user", "content": f"{SYSTEM_INSTRUCTIONS} Question: Who?\n"}]
    text = build_messages("Who?", 3)[0]["content"]
    assert text.startswith(SYSTEM_INSTRUCTIONS) and "up to 3 queries in one search, separated by ##" in text
    assert text.endswith(" Question: Who?\n")


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, float("inf"), float("nan"), "2"])
def test_config_rejects_bad_k(bad):
    # 2.5 was cut to 2 and inf raised OverflowError: a K that is not a whole number >= 1 is refused.
    with pytest.raises(ValueError, match="max_queries_per_turn must be an integer >= 1"):
        AgentConfig(max_queries_per_turn=bad)
    assert AgentConfig().max_queries_per_turn == 1
    assert checked_max_queries(2.0) == 2 and checked_max_queries(3) == 3


def test_natural_qa_rows_carry_the_k_prompt():
    from gta_verl.data.prep import qa_rows

    (default,) = qa_rows([QUESTION])
    (multi,) = qa_rows([QUESTION], max_queries_per_turn=2)
    assert default["prompt"] == build_messages(QUESTION.question)
    assert multi["prompt"] == build_messages(QUESTION.question, 2)
