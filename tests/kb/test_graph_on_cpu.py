"""Graph construction on a hand-made corpus: every edge and weight checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage
from gta_verl.kb.build import KBConfig, build_kb
from gta_verl.kb.graph import relation_edges, synonymy_edges
from gta_verl.kb.normalize import normalize_entity, normalize_relation
from gta_verl.kb.stats import kb_stats, stats_markdown

from .helpers import HashEmbedder


def _p(title: str, text: str) -> Passage:
    return Passage(make_doc_id(title, text), title, text)


def test_normalize():
    assert normalize_entity("  The Beatles!! ") == "the beatles"
    assert normalize_entity("Jan-Philip_Solovej") == "jan philip solovej"
    assert normalize_entity("Paranã River") == "paranã river"
    assert normalize_entity("...") == ""
    assert normalize_relation(" Was\tBorn  IN ") == "was born in"


def test_relation_edges_one_per_pair_weight_is_count():
    tei = np.array([[0, 1], [1, 0], [0, 1], [2, 2], [1, 2]])
    assert relation_edges(tei) == [(0, 1, 3.0), (1, 2, 1.0)]  # (2, 2) self pair adds no edge


def test_synonymy_threshold_and_short_phrases():
    e = np.array([[1, 0, 0], [0.8, 0.6, 0], [0.6, 0.8, 0], [1, 0, 0], [0, 0, 1]], dtype=np.float32)
    names = ["paris", "paris city", "the city", "pa", "london"]
    # cos(0,1)=0.8 ≥ δ, cos(1,2)=0.96, cos(0,2)=0.6 < δ; "pa" (2 alphanumerics) is skipped though cos(0,3)=1
    got = synonymy_edges(e, names, threshold=0.8, k=10)
    assert [(a, b) for a, b, _ in got] == [(0, 1), (1, 2)]
    assert got[0][2] == pytest.approx(0.8, abs=1e-6) and got[1][2] == pytest.approx(0.96, abs=1e-6)
    # k = 1: entity 0's only neighbour is 1; entity 2's is 1; the pairs survive from either side
    assert [(a, b) for a, b, _ in synonymy_edges(e, names, threshold=0.8, k=1)] == [(0, 1), (1, 2)]


def test_build_small_kb_by_hand():
    docs = [_p("A", "Alice met Bob."), _p("B", "Bob lives in Paris."), _p("C", "Nothing here.")]
    ex = {
        docs[0].doc_id: [("Alice", "met", "Bob"), ("alice!", "Met", "bob"), ("Alice", "knows", "Bob")],
        docs[1].doc_id: [("Bob", "lives in", "Paris"), ("...", "is", "x")],
    }
    # make "paris" and "alice" near-synonyms (cos 0.9), everything else orthogonal
    fixed = {"alice": [1, 0, 0, 0], "bob": [0, 1, 0, 0], "paris": [0.9, 0, np.sqrt(1 - 0.81), 0]}
    kb = build_kb(docs, ex, HashEmbedder(dim=4, fixed=fixed), KBConfig(), progress=False)
    assert kb.entities == ("alice", "bob", "paris")
    # duplicate (alice, met, bob) from doc A collapses; "..." normalizes to "" and is dropped
    assert [t.text for t in kb.triples] == [
        "(alice, met, bob)",
        "(alice, knows, bob)",
        "(bob, lives in, paris)",
    ]
    assert kb.triple_entity_ids.tolist() == [[0, 1], [0, 1], [1, 2]]
    edges = {(e.source, e.target): (e["kind"], e["weight"]) for e in kb.graph.es}
    assert edges == {
        (0, 3): ("doc_entity", 1.0),
        (0, 4): ("doc_entity", 1.0),
        (1, 4): ("doc_entity", 1.0),
        (1, 5): ("doc_entity", 1.0),
        (3, 4): ("relation", 2.0),
        (4, 5): ("relation", 1.0),
        (3, 5): ("synonymy", pytest.approx(0.9, abs=1e-6)),
    }
    assert all(type(w) is float for w in kb.graph.es["weight"])
    assert kb.manifest["build_counts"]["triples_dropped_empty_entity"] == 1
    assert kb.manifest["build_counts"]["triples_duplicate"] == 1
    st = kb_stats(kb)
    assert st == {
        "document_nodes": 3,
        "entity_nodes": 3,
        "doc_entity_edges": 4,
        "relation_edges": 2,
        "synonymy_edges": 1,
        "avg_document_degree": round(4 / 3, 3),
        "triples": 3,
    }
    assert "| 3 | 3 | 4 | 2 | 1 | 1.33 |" in stats_markdown(st)


def test_synonymy_not_duplicated_over_relation_edge():
    docs = [_p("A", "x")]
    fixed = {"alice": [1, 0], "alicia": [1, 0]}
    kb = build_kb(
        docs, {docs[0].doc_id: [("Alice", "aka", "Alicia")]}, HashEmbedder(2, fixed), progress=False
    )
    assert sorted(kb.graph.es["kind"]) == ["doc_entity", "doc_entity", "relation"]
    assert kb.manifest["build_counts"]["synonymy_pairs_merged_into_relation"] == 1


def test_config_validation():
    with pytest.raises(ValueError, match="synonymy_threshold"):
        KBConfig(synonymy_threshold=1.5)
    with pytest.raises(ValueError, match="synonymy_k"):
        KBConfig(synonymy_k=0)


def test_duplicate_doc_ids_rejected():
    d = _p("A", "x")
    with pytest.raises(ValueError, match="duplicate doc_ids"):
        build_kb([d, d], {}, HashEmbedder(), progress=False)
