"""``benchmarks/kb/build_cost.py``: its arithmetic, hand-computed."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.kb.build_cost import PassageTokens, passage_tokens, reply_texts, stage_rows, summarize
from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage
from gta_verl.kb.ray_shards import StageStats


class WordTokenizer:
    """One token per whitespace-separated word; the chat template is each message's content on a line."""

    def apply_chat_template(
        self, msgs: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool
    ) -> str:
        assert not tokenize
        return " ".join(m["content"] for m in msgs) + (" ASSISTANT" if add_generation_prompt else "")

    def __call__(self, text: str, add_special_tokens: bool) -> dict[str, list[int]]:
        return {"input_ids": list(range(len(text.split())))}


def test_reply_texts_are_the_json_the_prompts_ask_for() -> None:
    ner, tri = reply_texts(["Lake Baikal", "Russia"], [("Lake Baikal", "in", "Russia")])
    assert ner == '{"named_entities": ["Lake Baikal", "Russia"]}'
    assert tri == '{"triples": [["Lake Baikal", "in", "Russia"]]}'


def test_passage_tokens_counts_prompt_reply_and_end_token() -> None:
    from gta_verl.kb.openie.prompts import ner_messages, triple_messages

    p = Passage(make_doc_id("T", "x y"), "T", "x y")
    tok = WordTokenizer()
    got = passage_tokens(tok, p, ["x"], [["x", "is", "y"]])
    # NER reply '{"named_entities": ["x"]}' = 2 words, + 1 for <|im_end|> = 3
    assert got.ner_reply == 3
    # triple reply '{"triples": [["x", "is", "y"]]}' = 4 words, + 1 = 5
    assert got.triple_reply == 5
    # prompts: the words of every message's content, + 1 for the generation prompt
    ner_words = sum(len(m["content"].split()) for m in ner_messages(p))
    tri_words = sum(len(m["content"].split()) for m in triple_messages(p, ["x"]))
    assert got.ner_prompt == ner_words + 1
    assert got.triple_prompt == tri_words + 1
    assert got.prefill == got.ner_prompt + got.triple_prompt
    assert got.decode == 3 + 5


def test_summarize_means_and_totals_at_target() -> None:
    counts = [PassageTokens(10, 2, 20, 4), PassageTokens(30, 4, 40, 8), PassageTokens(20, 3, 60, 6)]
    s = summarize(counts, target=1_000)
    assert s["passages"] == 3
    assert s["ner_prompt"]["mean"] == pytest.approx(20.0)  # (10 + 30 + 20) / 3
    assert s["ner_prompt"]["median"] == 20
    # prefill per passage 30, 70, 80 → mean 60, × 1,000 passages = 60,000
    assert s["prefill"]["mean"] == pytest.approx(60.0)
    assert s["prefill"]["at_target"] == pytest.approx(60_000.0)
    # decode 6, 12, 9 → mean 9; p95 of 3 sorted values: index int(0.95 × 3) = 2 → 12
    assert s["decode"]["mean"] == pytest.approx(9.0)
    assert s["decode"]["p95"] == 12


def test_stage_rows_core_seconds_per_passage() -> None:
    stats = [
        StageStats("OpenIE (spacy)", items=100, seconds=10.0),
        StageStats("embeddings", items=1_000, seconds=20.0),
        StageStats("graph + save (driver)", items=100, seconds=5.0),
    ]
    rows: list[dict[str, Any]] = stage_rows(stats, 100, {"OpenIE": 2.0, "embeddings": 2.0}, target=3_600)
    # OpenIE: 10 s × 2 CPUs / 100 passages = 0.2 core-s/passage; × 3,600 passages / 3,600 s = 0.2 core-hours
    assert rows[0]["core_s_per_passage"] == pytest.approx(0.2)
    assert rows[0]["core_hours_at_target"] == pytest.approx(0.2)
    assert rows[0]["items_per_s"] == pytest.approx(10.0)
    # embeddings: 20 s × 2 / 100 = 0.4; 1,000 texts / 20 s = 50 texts/s
    assert rows[1]["core_s_per_passage"] == pytest.approx(0.4)
    assert rows[1]["items_per_s"] == pytest.approx(50.0)
    # the driver's stage holds 1 CPU: 5 s / 100 = 0.05
    assert rows[2]["cpus"] == 1.0
    assert rows[2]["core_s_per_passage"] == pytest.approx(0.05)
