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


@pytest.mark.parametrize(
    "reply, repair",
    [
        ('{"triples": [["a", "b", "c"]]}', "none"),
        ('  {"triples": []}\n', "none"),
        # a base model behind the transcript template: its reply continues past the JSON
        ('{"triples": [["a", "b", "c"]]}\n\nInput:\nPassage: x', "extracted"),
        ('```json\n{"triples": [["a", "b", "c"]]}\n```', "extracted"),
        ('{"triples": [["a", "b", "c"],]}', "syntax"),
        ("{'triples': [('a', 'b', 'c')]}", "syntax"),
        # cut by max_tokens inside a repetition loop (what Gemma-3-270M sends)
        ('{"triples": [["a", "b", "c"], ["a", "b", "c", "d", "e', "truncated"),
        ("I cannot help with that.", "failed"),
        ("", "failed"),
    ],
)
def test_loads_with_repair_names_the_repair(reply, repair):
    from gta_verl.kb.openie.parse import REPAIRS, loads_with_repair

    value, got = loads_with_repair(reply)
    assert got == repair and repair in REPAIRS
    assert (value is None) == (repair == "failed")
    assert loads_lenient(reply) == value  # the old entry point returns the same value


def test_parse_triples_with_repair_fails_json_without_triples():
    from gta_verl.kb.openie.parse import parse_triples_with_repair

    assert parse_triples_with_repair('{"triples": [["a", "b", "c"],]}') == ([["a", "b", "c"]], "syntax")
    assert parse_triples_with_repair('{"answer": 3, "other": 4}') == (None, "failed")


def test_json_repair_is_carried_cached_and_counted(tmp_path):
    from gta_verl.kb.openie.base import Extraction, OpenIEReport
    from gta_verl.kb.openie.cache import ExtractionCache
    from gta_verl.kb.openie.openai_backend import extract_with_replies

    p = _passages(1)[0]
    ex = extract_with_replies(p, '{"named_entities": ["E"]}', '{"triples": [["E", "r", "X"]]} Input:', ["E"])
    assert ex.status == "ok" and ex.json_repair == "extracted"
    bad = extract_with_replies(p, "", "no json here", None)
    assert bad.status == "unparseable" and bad.json_repair == "failed"
    cache = ExtractionCache("t", tmp_path / "c.jsonl")
    cache.put(p, ex)
    assert ExtractionCache("t", tmp_path / "c.jsonl").get(p) == ex
    # extractions of the other backends keep their old JSON (no key), and read back with ""
    assert "json_repair" not in make_extraction("d", [], [["a", "b", "c"]]).to_json()
    assert Extraction.from_json({"doc_id": "d"}).json_repair == ""
    report = OpenIEReport("t")
    for e in (ex, bad, make_extraction("d", [], [["a", "b", "c"]])):
        report.add(e, cached=False)
    assert report.by_json_repair == {"extracted": 1, "failed": 1}
    assert report.to_dict()["by_json_repair"] == {"extracted": 1, "failed": 1}
    assert "by_json_repair" not in OpenIEReport("precomputed").to_dict()


def test_openai_backend_sends_stop_and_budget_and_keys_its_cache_on_stop():
    from gta_verl.kb.build import KBConfig, make_backend
    from gta_verl.kb.openie.openai_backend import OpenAIOpenIE

    with openai_stub_server(['{"named_entities": ["E0"]}', '{"triples": [["E0", "r", "X"]]}']) as (url, log):
        config = KBConfig(llm_base_url=url, llm_model="stub", llm_max_tokens=64, llm_stop=("\nInput:",))
        be = make_backend("openai", config)
        exs, _ = run_openie(be, _passages(1), progress=False)
    assert [b["stop"] for b in log] == [["\nInput:"], ["\nInput:"]]
    assert [b["max_tokens"] for b in log] == [64, 64]
    assert next(iter(exs.values())).triples == (("E0", "r", "X"),)
    plain = OpenAIOpenIE(url, "stub")
    assert plain.identity == "openai:stub:prompt-v1"  # unchanged: existing caches stay valid
    assert be.identity == 'openai:stub:prompt-v1:stop-["\\nInput:"]' and "stop" not in plain.params
    assert be.client.config.timeout == config.llm_timeout == 60.0


def test_kb_config_refuses_bad_llm_knobs():
    from gta_verl.kb.build import KBConfig

    with pytest.raises(ValueError, match="llm_max_tokens"):
        KBConfig(llm_max_tokens=0)
    with pytest.raises(ValueError, match="llm_timeout"):
        KBConfig(llm_timeout=0.0)


def test_kb_cli_reads_the_llm_request_knobs():
    from gta_verl.cli import build_parser
    from gta_verl.kb.cli import _config

    base = ["kb", "build", "--corpus", "c.json", "--openie", "openai", "--out", "kb"]
    flags = [
        "--llm-max-tokens",
        "128",
        "--llm-timeout",
        "900",
        "--llm-stop",
        "\\nInput:",
        "--llm-stop",
        "END",
    ]
    config = _config(build_parser().parse_args(base + flags))
    assert (config.llm_max_tokens, config.llm_timeout, config.llm_stop) == (128, 900.0, ("\nInput:", "END"))
    default = _config(build_parser().parse_args(base))
    assert (default.llm_max_tokens, default.llm_timeout, default.llm_stop) == (1024, 60.0, ())
