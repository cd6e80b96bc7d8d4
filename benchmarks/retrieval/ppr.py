"""Batched PPR vs igraph PRPACK (HippoRAG's per-query call) on Table-5-sized graphs.

Usage:
    python -m benchmarks.retrieval.ppr [--graphs 2wiki,hotpotqa] [--batches 1,32,256,1024]
        [--n-ref 32] [--variants default|fast|fused|all] [--retriever] [--n-triples 1300000] [--seed 0]

Prints markdown tables: per graph, igraph ms/query, then forward push (``push_ppr``, the
retriever's default, per threshold ``--push-eps``; "touched" = nodes it reached) and batched PPR at every
batch size (ms/query, queries/s, speed-up over igraph, share of reference queries
whose top-10 documents are identical *in order* to igraph's, max |Δscore|).
With ``--retriever``, also the whole retriever (encode excluded: queries are
random unit vectors; triple search + personalization + PPR + dense + union) at
batch 32 and 256 on a HotpotQA-10K-scale synthetic KB.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gta_verl.retrieval.ppr.batched import batched_ppr
from gta_verl.retrieval.ppr.push import push_ppr
from gta_verl.retrieval.ppr.transition import Transition, build_transition
from gta_verl.testing.synthetic_graphs import (
    HOTPOTQA_10K,
    TWOWIKI,
    make_seed_personalization,
    make_synthetic_graph,
)

SPECS = {"2wiki": TWOWIKI, "hotpotqa": HOTPOTQA_10K}


def _igraph_ref(graph, pers: np.ndarray) -> tuple[np.ndarray, float]:
    """HippoRAG 2's call, one query at a time; returns scores [n, N] and ms/query."""
    out = []
    t0 = time.perf_counter()
    for row in pers:
        out.append(
            graph.personalized_pagerank(
                vertices=range(graph.vcount()),
                damping=0.5,
                directed=False,
                weights="weight",
                reset=row.tolist(),
                implementation="prpack",
            )
        )
    return np.asarray(out), (time.perf_counter() - t0) * 1000 / len(pers)


def _top10_agree(ours: np.ndarray, ref: np.ndarray, n_docs: int) -> float:
    a = np.argsort(-ours[:, :n_docs], axis=1, kind="stable")[:, :10]
    b = np.argsort(-ref[:, :n_docs], axis=1, kind="stable")[:, :10]
    return float(np.mean(np.all(a == b, axis=1)))


def _batched_rows(
    tr: Transition,
    pers: np.ndarray,
    ref: np.ndarray,
    ig_ms: float,
    var: dict,
    batches: list[int],
    n_ref: int,
    n_docs: int,
) -> list[str]:
    """Rows of one ``batched_ppr`` variant at each batch size, against the igraph reference."""
    lines = []
    name = "batched " + ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in var.items())
    batched_ppr(tr, pers[:2], **var)  # warm-up (torch CSR conversion is cached)
    for b in batches:
        reps = max(1, min(8, n_ref)) if b == 1 else 1
        t = time.perf_counter()
        if b == 1:
            outs = [batched_ppr(tr, pers[i : i + 1], return_iterations=True, **var) for i in range(reps)]
            out = np.concatenate([o[0] for o in outs])
            iters = [o[1][0] for o in outs]
        else:
            out, iters = batched_ppr(tr, pers[:b], return_iterations=True, **var)
        ms = (time.perf_counter() - t) * 1000 / (reps if b == 1 else b)
        k = min(len(out), n_ref)
        agree = _top10_agree(out[:k], ref[:k], n_docs)
        diff = float(np.abs(out[:k] - ref[:k]).max())
        lines.append(
            f"| {name} | {b} | {ms:.2f} | {1000 / ms:.0f} | {ig_ms / ms:.0f}× | "
            f"{agree * 100:.0f}% ({k}) | {diff:.1e} | {min(iters)}–{max(iters)} |"
        )
        print(lines[-1], flush=True)
    return lines


def _push_rows(
    tr: Transition,
    pers: np.ndarray,
    ref: np.ndarray,
    ig_ms: float,
    eps: float,
    batches: list[int],
    n_ref: int,
    n_docs: int,
) -> list[str]:
    """Rows of ``push_ppr`` at one ε at each batch size above 1, against the igraph reference's top 10."""
    lines = []
    push_ppr(tr, pers[:4], k=10, eps=eps, targets=n_docs)  # warm-up (numba compile/cache load)
    for b in [x for x in batches if x > 1] or batches:
        t = time.perf_counter()
        res = push_ppr(tr, pers[:b], k=10, eps=eps, targets=n_docs)
        ms = (time.perf_counter() - t) * 1000 / b
        k = min(b, n_ref)
        ref_top = np.argsort(-ref[:k, :n_docs], axis=1, kind="stable")[:, :10]
        agree = float(np.mean(np.all(res.ids[:k] == ref_top, axis=1)))
        sets = float(
            np.mean([set(a) == set(r) for a, r in zip(res.ids[:k].tolist(), ref_top.tolist(), strict=True)])
        )
        diff = float(np.abs(res.scores[:k] - np.take_along_axis(ref[:k], res.ids[:k], 1)).max())
        lines.append(
            f"| push eps={eps:g} (top-10 docs; sets {sets * 100:.0f}%) | {b} | {ms:.2f} | "
            f"{1000 / ms:.0f} | {ig_ms / ms:.0f}× | {agree * 100:.0f}% ({k}) | {diff:.1e} | "
            f"{res.touched.mean():,.0f} nodes |"
        )
        print(lines[-1], flush=True)
    return lines


def bench_graph(
    key: str, batches: list[int], n_ref: int, seed: int, variants: list[dict], push_eps: list[float]
) -> list[str]:
    spec = SPECS[key]
    t0 = time.perf_counter()
    sg = make_synthetic_graph(spec, seed=seed)
    graph = sg.to_igraph()
    t1 = time.perf_counter()
    tr = build_transition(graph)
    t2 = time.perf_counter()
    pers = make_seed_personalization(spec, max(max(batches), n_ref), seed=seed + 1)
    ref, ig_ms = _igraph_ref(graph, pers[:n_ref])
    lines = [
        (
            f"\n### {spec.name}: {spec.n_docs:,} docs, {spec.n_entities:,} entities, "
            f"{len(sg.edges):,} edges (graph {t1 - t0:.1f} s, transition {t2 - t1:.2f} s)\n"
        ),
        "| method | batch | ms/query | queries/s | speed-up vs igraph | top-10 identical | max abs diff "
        "| iters / touched |",
        "|---|---|---|---|---|---|---|---|",
        f"| igraph prpack (per query) | 1 | {ig_ms:.1f} | {1000 / ig_ms:.1f} | 1.0× | ref | ref | – |",
    ]
    for var in variants:
        lines += _batched_rows(tr, pers, ref, ig_ms, var, batches, n_ref, spec.n_docs)
    for eps in push_eps:
        lines += _push_rows(tr, pers, ref, ig_ms, eps, batches, n_ref, spec.n_docs)
    return lines


class _RandomEncoder:
    """Stands in for the query encoder: seeded random unit vectors (encoding is not timed)."""

    def __init__(self, dim: int) -> None:
        self.dim, self.name = dim, "random"
        self._rng = np.random.default_rng(7)

    def encode(self, texts, batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        x = self._rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def _synthetic_kb(n_triples: int, seed: int, dim: int):
    from gta_verl.data.types import Passage, Triple
    from gta_verl.kb.knowledge_base import KnowledgeBase

    spec = HOTPOTQA_10K
    sg = make_synthetic_graph(spec, seed=seed)
    g = sg.to_igraph()
    g.es["kind"] = [("doc_entity", "relation", "synonymy")[k] for k in sg.kinds.tolist()]
    rng = np.random.default_rng(seed)
    passages = tuple(Passage(f"d{i:016x}", f"title {i}", f"text {i}") for i in range(spec.n_docs))
    entities = tuple(f"entity {j}" for j in range(spec.n_entities))
    pairs = rng.integers(0, spec.n_entities, (n_triples, 2))
    docs = rng.integers(0, spec.n_docs, n_triples)
    triples = tuple(
        Triple(f"e{a}", f"r{i}", f"e{b}", passages[d].doc_id)
        for i, ((a, b), d) in enumerate(zip(pairs.tolist(), docs.tolist(), strict=True))
    )

    def unit(n: int) -> np.ndarray:
        x = rng.standard_normal((n, dim)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return KnowledgeBase(
        passages,
        entities,
        triples,
        pairs,
        g,
        unit(spec.n_docs),
        np.zeros((0, dim), np.float32),
        unit(n_triples),
        "random",
    )


def bench_retriever(n_triples: int, seed: int, dim: int) -> list[str]:
    """Whole retriever per query (triple search + personalization + PPR + dense + union)."""
    from gta_verl.retrieval.backends import open_kb_retriever

    t0 = time.perf_counter()
    kb = _synthetic_kb(n_triples, seed, dim)
    retriever = open_kb_retriever(kb, None, _RandomEncoder(dim))
    _ = retriever.transition
    build_s = time.perf_counter() - t0
    lines = [
        (
            f"\n### Whole retriever, HotpotQA-10K-scale graph, {n_triples:,} random unit triple vectors "
            f"(dim {dim}; KB + index + transition built in {build_s:.0f} s; query encoding not timed)\n"
        ),
        "| batch | ms/query | queries/s |",
        "|---|---|---|",
    ]
    retriever.retrieve(["warm-up"] * 4)
    for b in (32, 256):
        t = time.perf_counter()
        retriever.retrieve([f"query {i}" for i in range(b)])
        ms = (time.perf_counter() - t) * 1000 / b
        lines.append(f"| {b} | {ms:.2f} | {1000 / ms:.0f} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", default="2wiki,hotpotqa")
    ap.add_argument("--batches", default="1,32,256,1024")
    ap.add_argument("--n-ref", type=int, default=32, help="queries run through igraph as reference")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--variants",
        default="default",
        help="none | default | fast (+float32) | fused (cg + numba fused power f64/f32) | all; "
        "push rows always",
    )
    ap.add_argument("--retriever", action="store_true", help="also time the whole retriever")
    ap.add_argument("--n-triples", type=int, default=1_300_000)
    ap.add_argument("--dim", type=int, default=384, help="triple/passage vector size (MiniLM: 384)")
    ap.add_argument("--push-eps", default="1e-7,3e-8", help="forward-push thresholds ('' = none)")
    args = ap.parse_args()
    push_eps = [float(e) for e in args.push_eps.split(",") if e]
    batches = [int(b) for b in args.batches.split(",")]
    variants: list[dict] = [{"method": "cg", "backend": "scipy"}] if args.variants != "none" else []
    if args.variants in ("fast", "all"):
        variants.append({"method": "cg", "backend": "scipy", "dtype": np.float32})
    if args.variants in ("fused", "all"):
        variants += [
            {"method": "fused", "tol": 1e-8},
            {"method": "fused", "dtype": np.float32, "tol": 1e-7},
            {"method": "fused", "dtype": np.float32, "tol": 1e-6},
        ]
    if args.variants == "all":
        variants += [{"method": "power", "backend": "scipy"}, {"method": "cg", "backend": "torch"}]
    out = ["## Batched PPR vs igraph PRPACK (synthetic Table-5 graphs, seeded)"]
    for key in args.graphs.split(","):
        out += bench_graph(key, batches, args.n_ref, args.seed, variants, push_eps)
    if args.retriever:
        out += bench_retriever(args.n_triples, args.seed, args.dim)
    print("\n".join(out))


if __name__ == "__main__":
    main()
