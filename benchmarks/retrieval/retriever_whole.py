"""The ``whole`` section of ``benchmarks/retrieval/retriever.py``: the retriever at HotpotQA-10K scale vs the
reference.

The reference is the plain path (two exact faiss searches at faiss's default BLAS threshold,
igraph PRPACK per query); :data:`FAISS_DEFAULT_BLAS` is that threshold, which
``benchmarks.retrieval.retriever.main`` reads before any ``VectorIndex`` lowers it. Run it through
``python -m benchmarks.retrieval.retriever --sections whole``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks.retriever_synth import (
    PrecomputedEncoder,
    parse_variants,
    peak_rss_gib,
    query_vectors,
    stage_times,
    synthetic_kb,
    time_retrieve,
    variant_config,
    variant_label,
)
from gta_verl.testing.synthetic_graphs import HOTPOTQA_10K, make_synthetic_graph

FAISS_DEFAULT_BLAS = None  # faiss's own threshold, read before any VectorIndex lowers it


def reference_path(r: Any, q: np.ndarray, k: int) -> tuple[np.ndarray, float, float]:
    """The plain reference path: two faiss searches (default BLAS threshold) + igraph PRPACK per query.

    Returns:
        ``(top-k doc ids int64 [B, k] (−1 rows: unseeded), ms/query of search+scoring, ms/query of igraph)``.
    """
    import faiss

    c, g, nd = r.config, r.kb.graph, r.kb.n_docs
    faiss.cvar.distance_compute_blas_threshold = FAISS_DEFAULT_BLAS
    try:
        t0 = time.perf_counter()
        scores, ids = r._fact_index.search(q, c.top_n_triples)
        mins = r._fact_index.min_scores(q)
        dense = q @ r._passage_emb.T
        pers, seeded = r.personalization(scores, ids, mins, dense)
        t1 = time.perf_counter()
    finally:
        from gta_verl.retrieval.index import use_blas_for_batches

        use_blas_for_batches()
    out = np.full((len(q), k), -1, np.int64)
    t2 = time.perf_counter()
    for i in np.flatnonzero(seeded):
        row = g.personalized_pagerank(
            vertices=range(g.vcount()),
            damping=1 - c.alpha,
            directed=False,
            weights="weight",
            reset=pers[i].toarray().ravel().tolist(),
            implementation="prpack",
        )
        out[i] = np.argsort(-np.asarray(row[:nd]), kind="stable")[:k]
    t3 = time.perf_counter()
    return out, (t1 - t0) * 1e3 / len(q), (t3 - t2) * 1e3 / max(1, int(seeded.sum()))


def bench_faiss(r: Any, q: np.ndarray, batches: list[int]) -> list[str]:
    """Flat top-n: faiss at its default BLAS threshold vs lowered, the one-pass float32 scan, the bf16
    pre-scan."""
    import faiss

    from gta_verl.retrieval.index import BLAS_THRESHOLD, Bf16Scan

    idx, n = r._fact_index, r.config.top_n_triples
    bf16 = idx._bf16 or Bf16Scan(np.ascontiguousarray(r._fact_emb, dtype=np.float32))
    lines = [
        f"\n#### Exact flat triple search ({idx.n:,} × {idx.dim}, top-{n}), ms/query\n",
        f"| batch | faiss search, threshold {FAISS_DEFAULT_BLAS} (default) | faiss search, threshold "
        f"{BLAS_THRESHOLD} (BLAS) | speed-up | two searches (reference, BLAS) | "
        "one-pass float32 scan + min | bf16 pre-scan + float32 rescoring + min | rows certified | "
        "same ids (all four) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in batches:
        qb = q[:b]
        faiss.cvar.distance_compute_blas_threshold = FAISS_DEFAULT_BLAS
        t0 = time.perf_counter()
        s_def, i_def = idx.search(qb, n)
        t1 = time.perf_counter()
        faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
        s_blas, i_blas = idx.search(qb, n)
        t2 = time.perf_counter()
        idx.min_scores(qb)
        t3 = time.perf_counter()
        s_one, i_one, _ = idx._exact_with_min(qb, n)
        t4 = time.perf_counter()
        s_bf, i_bf, _, ok = bf16.search_with_min(qb, n)
        t5 = time.perf_counter()
        ms = np.array([t1 - t0, t2 - t1, t3 - t1, t4 - t3, t5 - t4]) * 1e3 / b
        same = (
            np.array_equal(i_def, i_blas)
            and np.array_equal(i_blas, i_one)
            and np.array_equal(i_one[ok], i_bf[ok])
        )
        lines.append(
            f"| {b} | {ms[0]:.2f} | {ms[1]:.2f} | {ms[0] / ms[1]:.1f}× | {ms[2]:.2f} | {ms[3]:.2f} | "
            f"{ms[4]:.2f} | {ok.mean() * 100:.0f} % | {'yes' if same else 'NO'} |"
        )
        print(lines[-1], flush=True)
    return lines


def _agreement(rv: Any, ref_ids: np.ndarray) -> str:
    """Ordered (and set) agreement of the PPR top-10 documents with the reference's."""
    ours = rv.score([f"q{i}" for i in range(len(ref_ids))], k_graph=10)[1][0]
    ok = ref_ids[:, 0] >= 0
    same = np.mean(np.all(ours[ok] == ref_ids[ok], axis=1))
    sets = np.mean([set(a) == set(b) for a, b in zip(ours[ok].tolist(), ref_ids[ok].tolist(), strict=True)])
    return f"{same * 100:.0f} % ({sets * 100:.0f} %)"


def _ours_rows(r: Any, batches: list[int], ref_ms: float, ref_ids: np.ndarray, variants: str) -> list[str]:
    lines, notes = [], []
    for top, eps in parse_variants(variants):
        rv = r.with_config(variant_config(top, eps))
        t0 = time.perf_counter()
        rv.retrieve([f"q{i}" for i in range(8)])  # warm-up (numba cache load; the linear method's basis)
        if str(eps).startswith("linear") and not notes:
            notes.append(
                f"\nLinear method: passage basis ({rv.kb.n_docs:,} × {rv._passage_emb.shape[1]} + 2 "
                f"columns) solved once in {time.perf_counter() - t0:.1f} s (first call, with the warm-up)."
            )
        agree = _agreement(rv, ref_ids)
        for b in batches:
            ms = time_retrieve(rv, b)
            st = stage_times(rv, rv.embedder.vectors[:b])
            scan = "bf16 pre-scan" if rv._fact_index._bf16 is not None else "float32 one-pass"
            lines.append(
                f"| ours: flat search ({scan}) + {variant_label(top, eps)} | {b} | {ms:.2f} | "
                f"{1e3 / ms:.0f} | {ref_ms / ms:.0f}× | {agree} | {st['triples']:.2f} | {st['dense']:.2f} | "
                f"{st['pers']:.2f} | {st['ppr']:.2f} | {st['touched']:,.0f} |"
            )
            print(lines[-1], flush=True)
    return lines + notes


def bench_whole(args: argparse.Namespace) -> list[str]:
    """Section (a): the whole retriever at HotpotQA-10K scale vs the plain reference path."""
    from gta_verl.retrieval.backends import open_kb_retriever

    t0 = time.perf_counter()
    sg = make_synthetic_graph(HOTPOTQA_10K, seed=args.seed)
    kb = synthetic_kb(sg, args.n_triples, args.seed, args.dim, with_igraph=True)
    q = query_vectors(kb.triple_emb, max(args.batches + args.faiss_batches + [args.n_ref]), args.seed + 1)
    r = open_kb_retriever(kb, None, PrecomputedEncoder(q))
    _ = r.transition
    build_s = time.perf_counter() - t0
    ref_ids, ref_search_ms, ref_ig_ms = reference_path(r, q[: args.n_ref], 10)
    ref_ms = ref_search_ms + ref_ig_ms
    n_seeded = int((ref_ids[:, 0] >= 0).sum())
    lines = [
        f"\n### Whole retriever at HotpotQA-10K scale: {kb.n_docs:,} docs, {kb.n_entities:,} entities, "
        f"{len(sg.edges):,} edges, {args.n_triples:,} triple vectors (dim {args.dim}); query encoding "
        f"excluded (KB + index + transition built in {build_s:.0f} s; peak RSS {peak_rss_gib():.1f} GiB)\n",
        "| path | batch | ms/query | queries/s | speed-up vs reference | PPR top-10 = reference: ordered "
        "(sets) | triple search | dense | personalization | PPR | PPR nodes touched |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| reference: 2 faiss searches (default threshold) + igraph PRPACK per query | {args.n_ref} | "
        f"{ref_ms:.1f} | {1e3 / ref_ms:.1f} | 1× | ref ({n_seeded} seeded) | {ref_search_ms:.1f} (with dense"
        f" + pers.) | | | {ref_ig_ms:.1f} | all |",
    ]
    print("\n".join(lines), flush=True)
    lines += _ours_rows(r, args.batches, ref_ms, ref_ids, args.variants)
    lines += bench_faiss(r, q, args.faiss_batches)
    return lines
