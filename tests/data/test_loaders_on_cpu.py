"""Loaders on the real bundled files, and rejection of malformed records with reasons."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from gta_verl.data.ids import make_doc_id
from gta_verl.data.loaders import (
    DataFormatError,
    read_corpus,
    read_flashrag_corpus,
    read_flashrag_qa,
    read_hipporag_corpus,
    read_musique_qa,
    read_nq_open,
    read_react_hotpot,
    read_supporting_facts_qa,
    split_flashrag_contents,
)
from gta_verl.data.types import Passage

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def test_musique_corpus_has_1890_unique_passages(musique_passages):
    assert len(musique_passages) == 1890
    assert len({p.doc_id for p in musique_passages}) == 1890
    titles = Counter(p.title for p in musique_passages)
    assert sum(1 for c in titles.values() if c > 1) > 0  # repeated titles: ids must cover the text
    p = musique_passages[0]
    assert p.title == "Journal of Mathematical Physics" and p.doc_id == make_doc_id(p.title, p.text)


def test_musique_questions_all_gold_mapped(musique_qa, musique_passages):
    ids = {p.doc_id for p in musique_passages}
    assert len(musique_qa) == 100
    assert Counter(q.hops for q in musique_qa) == {2: 68, 3: 27, 4: 5}
    for q in musique_qa:
        assert q.supporting_doc_ids and set(q.supporting_doc_ids) <= ids
        assert len(q.supporting_doc_ids) == q.hops  # one gold paragraph per hop in MuSiQue
        assert len(q.supporting_texts) == len(q.supporting_doc_ids)
        assert q.answers[0]


def test_musique_gold_in_reasoning_order(musique_qa):
    q = musique_qa[0]  # decomposition: journal → publisher (idx 6), then its first president (idx 10)
    assert q.supporting_texts[0].startswith("Journal of Psychotherapy Integration\n")
    assert q.supporting_texts[1].startswith("Adolescence\n")
    assert q.answers == ("G. Stanley Hall", "Stanley Hall")


def test_hipporag_sample():
    corpus = read_hipporag_corpus(ASSETS / "hipporag_sample" / "sample_corpus.json", strict=True)
    qa = read_musique_qa(
        ASSETS / "hipporag_sample" / "sample.json",
        corpus_ids={p.doc_id: p for p in corpus.records},
        strict=True,
    )
    assert corpus.n_ok == 3 and qa.n_ok == 1 and qa.records[0].answers == ("Thomas C. Sudhof",)


def test_nq_and_hotpot_simplified():
    nq = read_nq_open(ASSETS / "nq_open" / "NQ-open.dev.jsonl", strict=True)
    assert nq.n_ok == 3610 and nq.records[0].answers == ("14 December 1972 UTC", "December 1972")
    hp = read_react_hotpot(ASSETS / "hotpotqa" / "hotpot_dev_v1_simplified.json", strict=True)
    assert hp.n_ok == 7405 and hp.records[0].answers == ("yes",)


def test_corpus_rejects_bad_records_with_reasons(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(
        json.dumps(
            [
                {"title": "A", "text": "a"},
                {"title": "B"},
                {"title": "C", "text": "  "},
                {"title": "A", "text": "a"},
                {"title": 3, "text": "x"},
            ]
        )
    )
    rep = read_hipporag_corpus(f)
    assert rep.n_in == 5 and rep.n_ok == 1 and rep.reconciles()
    assert [(r.index, r.reason.split(":")[0]) for r in rep.rejected] == [
        (1, "missing field"),
        (2, "empty text"),
        (3, "duplicate passage"),
        (4, "bad field"),
    ]
    assert all(r.file == str(f) for r in rep.rejected)
    with pytest.raises(DataFormatError, match=r"c\.json:1: missing field"):
        read_hipporag_corpus(f, strict=True)


def test_flashrag_corpus_and_bad_lines(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text('{"id": "0", "contents": "\\"Paris\\"\\nParis is in France."}\n{not json\n{"id": "2"}\n')
    rep = read_flashrag_corpus(f)
    assert rep.records == [
        Passage(make_doc_id("Paris", "Paris is in France."), "Paris", "Paris is in France.")
    ]
    assert [(r.index, r.reason.split(":")[0]) for r in rep.rejected] == [
        (2, "invalid JSON"),
        (3, "missing field"),
    ]
    with pytest.raises(DataFormatError, match=r"c\.jsonl:2: invalid JSON"):
        read_flashrag_corpus(f, strict=True)
    assert split_flashrag_contents("no title line") == ("", "no title line")


def test_parquet_corpus_roundtrip(tmp_path, musique_passages):
    f = tmp_path / "c.parquet"
    pd.DataFrame([p.to_dict() for p in musique_passages[:10]]).to_parquet(f)
    assert read_corpus(f).records == musique_passages[:10]


def test_musique_qa_rejects_unmapped_gold_and_bad_records(tmp_path):
    good = json.loads((ASSETS / "hipporag_sample" / "sample.json").read_text())[0]
    f = tmp_path / "q.json"
    f.write_text(json.dumps([good, {"question": "q?"}, {**good, "answer": []}]))
    rep = read_musique_qa(f, corpus_ids={})  # empty corpus: gold cannot map
    assert rep.n_ok == 0 and rep.reconciles()
    assert [r.reason.split(":")[0] for r in rep.rejected] == [
        "gold paragraph not in corpus",
        "missing field",
        "no gold answer",
    ]


def test_supporting_facts_qa(tmp_path):
    corpus = [Passage(make_doc_id(t, t + " text"), t, t + " text") for t in ("A", "B", "C")]
    f = tmp_path / "q.json"
    f.write_text(
        json.dumps(
            [
                {
                    "_id": "x",
                    "question": "q1",
                    "answer": "a",
                    "supporting_facts": [["A", 0], ["B", 1], ["A", 2]],
                },
                {"_id": "y", "question": "q2", "answer": "a", "supporting_facts": [["Z", 0]]},
            ]
        )
    )
    rep = read_supporting_facts_qa(f, corpus)
    assert rep.n_ok == 1 and rep.records[0].supporting_doc_ids == (corpus[0].doc_id, corpus[1].doc_id)
    assert rep.records[0].hops == 2 and "gold title not uniquely in corpus" in rep.rejected[0].reason


def test_flashrag_qa(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"id": "t1", "question": "who?", "golden_answers": ["X", "Y"], "metadata": {}}\n'
        '{"id": "t2", "question": "what?", "golden_answers": []}\n'
    )
    rep = read_flashrag_qa(f)
    assert rep.records[0].answers == ("X", "Y") and rep.records[0].qid == "t1"
    assert rep.rejected[0].index == 2 and rep.reconciles()
