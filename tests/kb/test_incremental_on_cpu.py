"""`kb add` equals a full rebuild; a killed OpenIE run resumes without losing or repeating passages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage
from gta_verl.kb.build import KBConfig, build_kb_from_files
from gta_verl.kb.incremental import add_to_kb
from gta_verl.kb.openie.base import make_extraction, run_openie
from gta_verl.kb.openie.cache import ExtractionCache
from gta_verl.kb.store import load_kb
from gta_verl.testing.musique_kb import MUSIQUE_OPENIE_SPEC


def _write_corpus(path, passages):
    path.write_text(json.dumps([{"title": p.title, "text": p.text} for p in passages]))
    return path


def _assert_same_kb(a, b):
    assert a.passages == b.passages and a.entities == b.entities and a.triples == b.triples
    np.testing.assert_array_equal(a.triple_entity_ids, b.triple_entity_ids)
    for x, y in ((a.passage_emb, b.passage_emb), (a.entity_emb, b.entity_emb), (a.triple_emb, b.triple_emb)):
        np.testing.assert_array_equal(x, y)
    assert a.graph.get_edgelist() == b.graph.get_edgelist()
    assert a.graph.es["kind"] == b.graph.es["kind"] and a.graph.es["weight"] == b.graph.es["weight"]
    assert a.manifest["counts"] == b.manifest["counts"]


def test_add_equals_full_rebuild(tmp_path, musique_passages):
    sub = musique_passages[:60]
    cfg = KBConfig(synonymy_threshold=0.7)  # lower δ: more synonymy edges crossing old/new on 60 passages
    base = _write_corpus(tmp_path / "base.json", sub[:40])
    more = _write_corpus(tmp_path / "more.json", sub[30:])  # overlaps: 10 passages already in the KB
    union = _write_corpus(tmp_path / "union.json", sub)
    build_kb_from_files(base, "hipporag", MUSIQUE_OPENIE_SPEC, tmp_path / "inc", cfg, progress=False)
    added = add_to_kb(tmp_path / "inc", more, "hipporag", MUSIQUE_OPENIE_SPEC, cfg, progress=False)
    full = build_kb_from_files(union, "hipporag", MUSIQUE_OPENIE_SPEC, tmp_path / "full", cfg, progress=False)
    last = added.manifest["additions"][-1]
    assert last["n_in"] == 30 and last["n_new"] == 20 and last["openie"]["n_passages"] == 20
    syn = [e for e in full.graph.es if e["kind"] == "synonymy"]
    assert syn  # the comparison covers synonymy edges
    _assert_same_kb(load_kb(tmp_path / "inc"), load_kb(tmp_path / "full"))
    # adding nothing new changes nothing
    again = add_to_kb(tmp_path / "inc", more, "hipporag", MUSIQUE_OPENIE_SPEC, cfg, progress=False)
    assert again.manifest["additions"][-1]["n_new"] == 0
    _assert_same_kb(load_kb(tmp_path / "inc"), full)


class _Backend:
    """Extracts a fixed triple per passage; can crash after ``crash_after`` passages."""

    identity = "test-backend:v1"

    def __init__(self, crash_after: int | None = None) -> None:
        self.crash_after = crash_after
        self.seen: list[str] = []

    def extract(self, passages):
        for p in passages:
            if self.crash_after is not None and len(self.seen) == self.crash_after:
                raise KeyboardInterrupt("simulated kill")
            self.seen.append(p.doc_id)
            yield make_extraction(p.doc_id, [p.title], [[p.title, "has", p.text]])


def test_resume_after_crash_loses_and_repeats_nothing(tmp_path):
    ps = [Passage(make_doc_id(f"T{i}", f"x{i}"), f"T{i}", f"x{i}") for i in range(25)]
    path = tmp_path / "cache.jsonl"
    first = _Backend(crash_after=10)
    with pytest.raises(KeyboardInterrupt):
        run_openie(first, ps, cache=ExtractionCache(first.identity, path), progress=False)
    with open(path, "a") as f:  # the kill also tore the line being written
        f.write('{"key": "abc", "extrac')
    second = _Backend()
    cache = ExtractionCache(second.identity, path)
    assert len(cache) == 10 and cache.n_torn_lines == 1
    out, report = run_openie(second, ps, cache=cache, progress=False)
    assert set(first.seen).isdisjoint(second.seen)
    assert sorted(first.seen + second.seen) == sorted(p.doc_id for p in ps)
    assert report.n_from_cache == 10 and report.n_extracted == 15 and len(out) == 25
    assert out[ps[3].doc_id].triples == (("T3", "has", "x3"),)
    lines = path.read_text().splitlines()
    assert len(lines) == 26  # 25 records + the sealed torn line
    third = _Backend()
    run_openie(third, ps, cache=ExtractionCache(third.identity, path), progress=False)
    assert third.seen == []
