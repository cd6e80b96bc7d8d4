"""Faiss's BLAS threshold, the size-sweep builders of ``benchmarks/retriever_synth.py`` and the sweep's
approximate variant (``benchmarks/retrieval/retriever_sweep.py``).

No timings here: speed is in ``benchmarks/retrieval/retriever.py``; these tests check that the
settings and builders the benchmark relies on give the same answers.
"""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from gta_verl.retrieval.index import BLAS_THRESHOLD, VectorIndex, use_blas_for_batches
from gta_verl.testing.synthetic_graphs import HOTPOTQA_10K, make_scaled_graph, scale_spec


@pytest.fixture()
def faiss_default_threshold():
    """Restore faiss's process-wide threshold after the test."""
    before = faiss.cvar.distance_compute_blas_threshold
    yield before
    faiss.cvar.distance_compute_blas_threshold = before


def test_vector_index_lowers_blas_threshold(faiss_default_threshold) -> None:
    faiss.cvar.distance_compute_blas_threshold = 10**6
    VectorIndex(np.eye(4, dtype=np.float32))
    assert faiss.cvar.distance_compute_blas_threshold == BLAS_THRESHOLD == 8


def test_flat_search_same_with_and_without_blas(faiss_default_threshold) -> None:
    """16 queries (≥ 8 → BLAS path when lowered) give the hand-computed top-2 on both kernels.

    Database rows: e0 = (1, 0), e1 = (0, 1), r2 = (0.6, 0.8). Query (1, 0): scores
    1, 0, 0.6 → top-2 ids [0, 2], scores [1, 0.6]. Query (0, 1): 0, 1, 0.8 → [1, 2],
    [1, 0.8]. Query (0.8, 0.6): 0.8, 0.6, 0.48 + 0.48 = 0.96 → [2, 0], [0.96, 0.8].
    """
    db = np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32)
    q = np.tile(np.array([[1, 0], [0, 1], [0.8, 0.6]], dtype=np.float32), (6, 1))[:16]  # 16 queries
    index = VectorIndex(db)
    results = {}
    for threshold in (10**6, BLAS_THRESHOLD):  # 10**6 > 16: the scalar kernel; 8 ≤ 16: BLAS
        faiss.cvar.distance_compute_blas_threshold = threshold
        results[threshold] = index.search(q, 2)
    want_ids = np.tile(np.array([[0, 2], [1, 2], [2, 0]]), (6, 1))[:16]
    want_scores = np.tile(np.array([[1.0, 0.6], [1.0, 0.8], [0.96, 0.8]]), (6, 1))[:16]
    for scores, ids in results.values():
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_allclose(scores, want_scores, atol=1e-6)
    use_blas_for_batches()
    s_one, i_one, mins = index.search_with_min(q, 2)
    np.testing.assert_array_equal(i_one, want_ids)
    # lowest score per query: min(1, 0, 0.6) = 0; min(0, 1, 0.8) = 0; min(0.8, 0.6, 0.96) = 0.6
    np.testing.assert_allclose(mins[:3], [0.0, 0.0, 0.6], atol=1e-6)


def test_scale_spec_keeps_table5_proportions() -> None:
    s = scale_spec(HOTPOTQA_10K, 1_830)
    # ×0.1: 127,542 → 12,754.2 → 12,754; 206,473 → 20,647.3 → 20,647; 382,750 → 38,275;
    # 748,429 → 74,842.9 → 74,843
    assert (s.n_docs, s.n_entities, s.n_doc_entity, s.n_relation, s.n_synonymy) == (
        1_830,
        12_754,
        20_647,
        38_275,
        74_843,
    )


def test_make_scaled_graph_counts_uniqueness_and_seed() -> None:
    spec = scale_spec(HOTPOTQA_10K, 1_830)
    g = make_scaled_graph(spec, seed=3)
    assert len(g.edges) == 20_647 + 38_275 + 74_843 == 133_765
    assert np.bincount(g.kinds).tolist() == [20_647, 38_275, 74_843]
    lo, hi = g.edges.min(axis=1), g.edges.max(axis=1)
    assert np.all(lo != hi), "no self-loops"
    assert len(np.unique(lo * spec.n_nodes + hi)) == len(g.edges), "each unordered pair at most once"
    de = g.edges[g.kinds == 0]
    assert de[:, 0].max() < spec.n_docs <= de[:, 1].min(), "doc–entity edges join a doc to an entity"
    assert g.edges[g.kinds > 0].min() >= spec.n_docs, "relation/synonymy edges join entities"
    w = g.weights
    assert np.all(w[g.kinds == 0] == 1.0) and np.all((w[g.kinds == 2] >= 0.8) & (w[g.kinds == 2] < 1.0))
    again = make_scaled_graph(spec, seed=3)
    np.testing.assert_array_equal(again.edges, g.edges)
    assert not np.array_equal(make_scaled_graph(spec, seed=4).edges, g.edges)


def test_sweep_retriever_equals_igraph_built_one() -> None:
    """The sweep's retriever (edgeless igraph + attached CSR) answers like one built from igraph."""
    from benchmarks.retriever_synth import PrecomputedEncoder, attach_graph, query_vectors, synthetic_kb
    from gta_verl.retrieval.retriever import FLAG_NO_ENTITIES, GraphRetriever

    sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, 300), seed=0)
    kb_ig = synthetic_kb(sg, 600, seed=0, dim=16, with_igraph=True)
    kb_arr = synthetic_kb(sg, 600, seed=0, dim=16, with_igraph=False)
    assert kb_arr.graph.ecount() == 0 and kb_ig.graph.ecount() == len(sg.edges)
    q = query_vectors(kb_ig.triple_emb, 12, seed=1)
    r_ig = GraphRetriever(kb_ig, PrecomputedEncoder(q))
    r_arr = GraphRetriever(kb_arr, PrecomputedEncoder(q))
    attach_graph(r_arr, sg)
    np.testing.assert_array_equal(r_arr._doc_freq, r_ig._doc_freq)
    texts = [f"q{i}" for i in range(12)]
    ranked = r_ig.rank(texts, k=10)
    assert all(FLAG_NO_ENTITIES not in r.flags for r in ranked), "every query ran PPR"
    assert [r.doc_ids for r in r_arr.rank(texts, k=10)] == [r.doc_ids for r in ranked]


def test_sweep_approximate_variant_against_its_exact_one() -> None:
    """The sweep's approximate variant: knobs parsed, built from the exact ``linear`` one (same basis),
    timed, and its R(q) recall against it — 1 where every search is exhaustive."""
    import argparse
    import dataclasses

    from benchmarks.retrieval.retriever_sweep import (
        approx_key,
        approx_overrides,
        bench_approx_variant,
        label_of_key,
        rq_recall,
    )
    from benchmarks.retriever_synth import (
        PrecomputedEncoder,
        attach_graph,
        query_vectors,
        synthetic_kb,
        variant_config,
    )
    from gta_verl.retrieval.backends import open_kb_retriever

    assert approx_overrides("ivf_nprobe=1000000,index_refine=2") == {"ivf_nprobe": 10**6, "index_refine": 2}
    with pytest.raises(ValueError, match="no knob 'nprobe'"):
        approx_overrides("nprobe=3")
    key = approx_key("ivf", "ivf_nprobe=1000000")
    assert key == "approx_ivf-ivf-ivf@ivf_nprobe=1000000"
    assert label_of_key(key).startswith(
        "approximate: passages ivf, basis ivf, triples ivf, ivf_nprobe=1000000"
    )
    sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, 400), seed=0)
    kb = synthetic_kb(sg, 800, seed=0, dim=16, with_igraph=False)
    q = query_vectors(kb.triple_emb, 40, seed=1)
    r = open_kb_retriever(kb, None, PrecomputedEncoder(q))
    attach_graph(r, sg)
    exact = r.with_config(variant_config(0, "linear:1e-6"))
    args = argparse.Namespace(
        sweep_approx="ivf", sweep_approx_knobs="ivf_nprobe=1000000", sweep_batch=8, sweep_recall_queries=40
    )
    row = bench_approx_variant(exact, q[:8], args)
    assert row[f"recall_{key}"] == 1.0 and row[f"whole_{key}"] > 0 and f"ppr_{key}" in row
    approx = exact.with_config(
        dataclasses.replace(exact.config, passage_index="hnsw", basis_index="hnsw", index="hnsw")
    )
    assert approx._basis is exact._basis  # the exact variant's basis, not solved again
    assert 0.0 <= rq_recall(approx, exact, 40, 16) <= 1.0
