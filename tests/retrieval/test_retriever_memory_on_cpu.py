"""The sweep's memory bookkeeping (``benchmarks/retrieval/retriever_memory.py``): hand-checkable byte counts
on tiny arrays, faiss's held arrays against its serialized size, and one sweep size's row and table."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from benchmarks.retrieval.retriever_memory import (
    MemoryLedger,
    arrays_component,
    distinct_nbytes,
    faiss_bytes,
    is_mapped,
    memory_table,
)


def test_distinct_nbytes_counts_each_buffer_once_and_maps(tmp_path) -> None:
    x = np.zeros((10, 8), np.float32)  # 10 × 8 × 4 B = 320 B
    assert distinct_nbytes([x]) == (320, 0)
    assert distinct_nbytes([x, x, x[2:5], x.T]) == (320, 0)  # views of one buffer
    y = np.zeros(10, np.float64)  # 80 B
    assert distinct_nbytes([x, y]) == (400, 0)
    np.save(tmp_path / "x.npy", x)
    m = np.load(tmp_path / "x.npy", mmap_mode="r")
    assert is_mapped(m) and is_mapped(m[3:]) and not is_mapped(x)
    assert distinct_nbytes([m, y]) == (400, 320)
    c = arrays_component("v", {"a": (m, y), "b": [None]}, items=10, per="doc", served="")
    assert (c.bytes, c.mapped, c.per_item) == (400, 320, 40.0)


def test_faiss_bytes_equals_serialized_up_to_headers() -> None:
    import faiss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((700, 16), dtype=np.float32)
    flat = faiss.IndexFlatIP(16)
    flat.add(x)
    assert faiss_bytes(flat) == 700 * 16 * 4  # 44,800 B: the flat copy of the rows
    hnsw = faiss.IndexHNSWFlat(16, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(x)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(16), 16, 8, faiss.METRIC_INNER_PRODUCT)
    ivf.train(x)
    ivf.add(x)
    assert faiss_bytes(ivf) == 700 * (64 + 8) + 8 * 16 * 4  # codes + ids + the 8 centroids
    pq = faiss.IndexIVFPQ(faiss.IndexFlatIP(16), 16, 4, 4, 4, faiss.METRIC_INNER_PRODUCT)
    pq.train(x)
    pq.add(x)
    # 2-byte codes + int64 ids, 4 centroids × 16 dims × 4 B, codebook 4 sub-quantizers × 16 × 4 dims × 4 B
    assert faiss_bytes(pq) == 700 * (2 + 8) + 4 * 16 * 4 + 4 * 16 * 4 * 4
    for idx in (flat, hnsw, ivf, pq):
        ser = len(faiss.serialize_index(idx))
        assert 0 <= ser - faiss_bytes(idx) <= 1024, (type(idx).__name__, ser, faiss_bytes(idx))


def test_ledger_steps_with_a_fake_rss() -> None:
    ticks = iter([100, 350, 350, 300])
    mem = MemoryLedger(rss=lambda: next(ticks))
    with mem.step("a"):
        pass
    with mem.step("b"):
        pass
    assert [(s.name, s.delta) for s in mem.steps] == [("a", 250), ("b", -50)]
    assert mem.row_items()["mem_step:b"] == {"rss_before": 350, "rss_after": 300}


def test_sweep_row_memory_on_a_tiny_kb() -> None:
    """One sweep size at 10 documents × 8 dims: the hand-checkable components and the table."""
    from benchmarks.retrieval.retriever_sweep import bench_size

    args = argparse.Namespace(
        seed=0,
        dim=8,
        sweep_triples_per_doc=2.0,
        sweep_batch=4,
        sweep_variants="linear:1e-6",
        sweep_approx="hnsw",
        sweep_approx_knobs="",
        sweep_recall_queries=8,
        sweep_passage_vectors="random",
        sweep_component_recall="index=flat;passage_index=hnsw",
    )
    row = bench_size(10, args)
    nodes = row["nodes"]
    passages = row["mem:passage vectors (KB, float32)"]
    assert (passages["bytes"], passages["items"], passages["how"]) == (10 * 8 * 4, 10, "nbytes")  # 320 B
    assert row["mem:triple vectors (KB, float32)"]["bytes"] == 20 * 8 * 4  # 640 B
    # the unique-fact copy (fancy-indexed from the KB's rows) and faiss's flat copy: 640 B each
    assert row["mem:unique-fact vectors (retriever's copy)"]["bytes"] == 640
    assert row["mem:exact triple index (faiss flat copy)"]["bytes"] == 640
    basis = row["mem:passage basis [Z | g] (linear PPR)"]
    # Z float32 [10, 8] 320 B + g float64 [10] 80 B + 1ᵀGE float64 [8] 64 B + m float64 [nodes]
    assert basis["bytes"] == 320 + 80 + 64 + 8 * nodes
    key = "approx_hnsw-hnsw-hnsw"
    assert row[f"mem:passage index hnsw [{key}]"]["how"] == "faiss arrays"
    assert row[f"mem:passage index hnsw [{key}]"]["bytes"] >= 320  # its float32 rows plus links
    assert row[f"mem:basis index hnsw [{key}]"]["items"] == 10
    assert row[f"mem:triple index hnsw [{key}]"]["items"] == 20
    assert all(v["mapped"] == 0 for k, v in row.items() if k.startswith("mem:"))  # all built in process
    tr = row["mem:PPR transition (CSR M and S, strength, perm)"]
    assert tr["per"] == "edge" and tr["bytes"] > 0
    steps = [k for k in row if k.startswith("mem_step:")]
    assert len(steps) == 8  # graph, KB, retriever, transition, 1 variant, 3 approximate indexes
    assert row["component_recall@index=flat"] == 1.0  # nothing changed: every exact R(q) document returned
    assert 0.0 <= row["component_recall@passage_index=hnsw"] <= 1.0
    table = "\n".join(memory_table(row))
    assert "| passage vectors (KB, float32) | 0.000 | nbytes | 32.0 / doc | 10 | 0.000 |" in table
    assert "| build step | RSS before GiB |" in table


@pytest.mark.parametrize("bad", [object(), "x", 3])
def test_arrays_in_ignores_non_arrays(bad) -> None:
    from benchmarks.retrieval.retriever_memory import arrays_in

    assert arrays_in(bad) == []


def test_fact_passage_rows_by_hand() -> None:
    """``p_d = normalize(r_d + Σ e_t)`` on 2-d rows small enough to add by hand."""
    from benchmarks.retriever_synth import fact_passage_rows

    noise = np.array([[1, 0], [0, 1], [1, 0]], np.float32)  # r_0, r_1, r_2
    facts = np.array([[0, 1], [0, 1], [1, 0]], np.float32)  # e_0, e_1 in doc 0; e_2 in doc 1
    p = fact_passage_rows(noise, facts, np.array([0, 0, 1]))
    # doc 0: (1,0) + (0,1) + (0,1) = (1,2) → /√5; doc 1: (0,1) + (1,0) = (1,1) → /√2; doc 2: no fact, (1,0)
    s5, s2 = 5**-0.5, 2**-0.5
    np.testing.assert_allclose(p, [[s5, 2 * s5], [s2, s2], [1, 0]], rtol=1e-6)
    assert p.dtype == np.float32


def test_synthetic_kb_passage_modes_share_their_draws() -> None:
    """``facts`` changes only the passage rows (same triples, same triple vectors); bad modes are named."""
    from benchmarks.retriever_synth import synthetic_kb
    from gta_verl.testing.synthetic_graphs import HOTPOTQA_10K, make_scaled_graph, scale_spec

    sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, 40), seed=0)
    a = synthetic_kb(sg, 60, seed=0, dim=8, with_igraph=False)
    b = synthetic_kb(sg, 60, seed=0, dim=8, with_igraph=False, passage_vectors="facts")
    assert a.triples == b.triples
    np.testing.assert_array_equal(a.triple_emb, b.triple_emb)
    docs = np.array([int(t.doc_id[1:], 16) for t in a.triples])
    for d in range(len(a.passages)):  # p_d = normalize(r_d + Σ e_t) written out, r_d = the random mode's row
        v = a.passage_emb[d].astype(np.float64) + a.triple_emb[docs == d].sum(axis=0)
        np.testing.assert_allclose(b.passage_emb[d], v / np.linalg.norm(v), rtol=1e-5, atol=1e-6)
    assert (np.bincount(docs, minlength=len(a.passages)) == 0).any()  # covers documents without facts
    with pytest.raises(ValueError, match="'random' or 'facts'"):
        synthetic_kb(sg, 60, seed=0, dim=8, with_igraph=False, passage_vectors="nope")


def test_component_recall_without_an_approximate_variant() -> None:
    """``--sweep-component-recall`` alone (no ``--sweep-approx``, no ``linear`` variant): the recall's 8
    queries are drawn and the exact reference is built; an unchanged config returns every exact document."""
    from benchmarks.retrieval.retriever_sweep import bench_size

    args = argparse.Namespace(
        seed=0,
        dim=8,
        sweep_triples_per_doc=2.0,
        sweep_batch=4,
        sweep_variants="push:1e-6@100",
        sweep_approx="",
        sweep_approx_knobs="",
        sweep_recall_queries=8,
        sweep_passage_vectors="facts",
        sweep_component_recall="index=flat",
    )
    row = bench_size(10, args)
    assert row["component_recall@index=flat"] == 1.0
    assert row["passage_vectors"] == "facts"
