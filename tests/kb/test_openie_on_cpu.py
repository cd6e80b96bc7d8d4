"""OpenIE: tolerant parsing, the LLM backend over real HTTP, spaCy on real passages, the precomputed file."""

from __future__ import annotations

import json

import pytest

from gta_verl.bundled import MUSIQUE_OPENIE
from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage
from gta_verl.kb.openie.base import clean_triples, make_extraction, run_openie
from gta_verl.kb.openie.parse import loads_lenient, parse_entities, parse_triples
from gta_verl.kb.openie.precomputed import PrecomputedOpenIE
from tests.support.openai_server import openai_stub_server


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('{"triples": [["a", "b", "c"]]}', [["a", "b", "c"]]),
        ('```json\n{"triples": [["a", "b", "c"],]}\n```', [["a", "b", "c"]]),  # fence + trailing comma
        ("Here you go: {'triplets': [('a', 'b', 'c')]} Hope this helps!", [["a", "b", "c"]]),
        ('{"Triples": [{"subject": "a", "predicate": "b", "object": "c"}]}', [["a", "b", "c"]]),
        (
            '{"triples": [["a", "b", "c"], ["d", "e", "f"], ["g", "h',
            [["a", "b", "c"], ["d", "e", "f"]],
        ),  # truncated
        ('["a", "b", "c"]', [["a", "b", "c"]]),
        (
            '{"triples": [["a", "b"], ["x", "y", "z", "w"], ["a", 1990, "c"]]}',
            [["a", "b"], ["x", "y", "z", "w"], ["a", "1990", "c"]],
        ),
    ],
)
def test_parse_triples_variants(reply, expected):
    assert parse_triples(reply) == expected


def test_parse_failures_and_entities():
    assert parse_triples("I cannot help with that.") is None
    assert parse_triples("") is None and loads_lenient(None) is None
    assert parse_entities('{"named_entities": ["Paris", "", {"name": "France"}, 1990]}') == [
        "Paris",
        "France",
        "1990",
    ]
    assert parse_entities('```\n{"entities": ["A", "B"\n') == ["A", "B"]


def test_clean_triples_and_status():
    kept, bad = clean_triples([["a", "b", "c"], ["a", "b"], ["a", " ", "c"], "abc", [" x ", "y", "z"]])
    assert kept == (("a", "b", "c"), ("x", "y", "z")) and bad == 3
    assert make_extraction("d", ["E"], []).status == "empty"
    assert make_extraction("d", [], [], parsed=False).status == "unparseable"
    assert make_extraction("d", [], [["a", "b", "c"]], error="boom").status == "error"


def test_precomputed_musique_file(musique_passages):
    backend = PrecomputedOpenIE(MUSIQUE_OPENIE)
    exs, report = run_openie(backend, musique_passages, progress=False)
    assert len(exs) == 1890 and report.n_malformed == 185
    assert report.by_status == {"ok": 1888, "empty": 2, "unparseable": 0, "error": 0}
    assert report.n_triples == 17419 - 185
    stranger = Passage(make_doc_id("X", "not in file"), "X", "not in file")
    exs, report = run_openie(backend, [stranger], progress=False)
    assert exs[stranger.doc_id].status == "error" and "not in" in exs[stranger.doc_id].error


def _passages(n: int) -> list[Passage]:
    return [Passage(make_doc_id(f"T{i}", f"text {i}"), f"T{i}", f"text {i}") for i in range(n)]


def test_openai_backend_over_http():
    from gta_verl.kb.openie.openai_backend import OpenAIOpenIE

    def reply(body):
        user = body["messages"][-1]["content"]
        i = int(user.split("text ")[1].split()[0].strip('"'))
        if body["messages"][0]["content"].startswith("You are an information extraction system. Read"):
            return 503 if i == 3 else json.dumps({"named_entities": [f"E{i}"]})
        return {
            0: '```json\n{"triples": [["E0", "rel", "X"],]}\n```',
            1: "no idea",
            2: '{"triples": []}',
        }.get(i, '{"triples": [["E4", "is", "Y"], ["bad"]]}')

    with openai_stub_server(reply) as (url, log):
        be = OpenAIOpenIE(url, "stub", concurrency=2, max_retries=1, backoff=0.0)
        exs, report = run_openie(be, _passages(5), progress=False)
    ps = _passages(5)
    assert exs[ps[0].doc_id].triples == (("E0", "rel", "X"),) and exs[ps[0].doc_id].entities == ("E0",)
    assert exs[ps[1].doc_id].status == "unparseable"
    assert exs[ps[2].doc_id].status == "empty"
    assert exs[ps[3].doc_id].status == "error" and "503" in exs[ps[3].doc_id].error
    assert exs[ps[4].doc_id].n_malformed == 1
    assert report.by_status == {"ok": 2, "empty": 1, "unparseable": 1, "error": 1}
    # NER-conditioned: the triple prompt of passage 0 carries its NER output
    tri_req = [
        b
        for b in log
        if "Named entities" in b["messages"][-1]["content"] and "text 0" in b["messages"][-1]["content"]
    ]
    assert '["E0"]' in tri_req[0]["messages"][-1]["content"]


def test_spacy_on_real_passages(musique_passages):
    from gta_verl.kb.openie.spacy_backend import SpacyOpenIE

    exs, report = run_openie(SpacyOpenIE(), musique_passages[:20], progress=False)
    assert report.n_passages == 20 and report.by_status["ok"] >= 15 and report.n_triples > 100
    first = exs[musique_passages[0].doc_id]
    assert ("Journal of Mathematical Physics", "be", "peer-reviewed journal") in first.triples
    assert ("current editor", "be", "Jan Philip Solovej") in first.triples
    assert "American Institute of Physics" in first.entities


def test_vllm_backend_import_guard():
    """Importing the backend never needs vLLM; constructing it without vLLM says how to get it."""
    from gta_verl.kb.openie.vllm_backend import VLLMOpenIE

    try:
        import vllm  # noqa: F401 - only probes whether vLLM is installed
    except ImportError:
        with pytest.raises(ImportError, match="gta-verl\\[gpu\\]"):
            VLLMOpenIE("some/model")


def test_spacy_parses_a_passage_longer_than_its_max_length_in_chunks(musique_passages, monkeypatch):
    """One passage over nlp.max_length must not abort `kb build --openie spacy` (spaCy's E088)."""
    from dataclasses import replace

    from gta_verl.kb.openie import spacy_backend
    from gta_verl.kb.openie.spacy_backend import SpacyOpenIE, split_long_text

    backend = SpacyOpenIE()
    backend.nlp.max_length = 2_000  # stands in for 1,000,000 so the test parses a few KB, not a MB
    monkeypatch.setattr(spacy_backend, "CHUNK_CHARS", 1_000)
    long_text = " ".join(p.text for p in musique_passages[:12])
    assert len(long_text) > 2_000
    huge = replace(musique_passages[0], doc_id="huge", text=long_text)
    exs, report = run_openie(backend, [musique_passages[1], huge, musique_passages[2]], progress=False)
    assert [e.doc_id for e in exs.values()] == [
        musique_passages[1].doc_id,
        "huge",
        musique_passages[2].doc_id,
    ]
    assert report.by_status["error"] == 0 and exs["huge"].triples  # chunks merged into one extraction
    pieces = split_long_text(long_text, 1_000)
    assert all(len(c) <= 1_000 for c in pieces) and " ".join(pieces).split() == long_text.split()
