"""How the linear PPR's push threshold trades work for agreement with the exact solver (bundled MuSiQue).

Usage:
    python -m benchmarks.retrieval.linear_eps [--eps 1e-4,3e-5,1e-5,3e-6,1e-6,1e-7] [--questions 100]

For each ``ppr_linear_eps``: the graph-mode top-10 of every bundled MuSiQue question against float64
conjugate gradients to a 1e-10 relative residual (the reference, same run): share of questions with the
identical ordered top-10, largest score difference, mean nodes the push touched, ms/query. Also the
fused float32 power iteration (the previous default) for comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np


def _compare(got: list, ref: list) -> tuple[float, float]:
    same = np.mean(
        [[h.doc_id for h in a.hits] == [h.doc_id for h in b.hits] for a, b in zip(got, ref, strict=True)]
    )
    err = max(
        float(np.max(np.abs(np.array([h.score for h in a.hits]) - [h.score for h in b.hits])))
        for a, b in zip(got, ref, strict=True)
    )
    return float(same), err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", default="1e-4,3e-5,1e-5,3e-6,1e-6,1e-7")
    ap.add_argument("--questions", type=int, default=100)
    args = ap.parse_args(argv)

    from benchmarks.serving.replicas import musique_kb_dir, questions
    from gta_verl.retrieval.backends import open_retriever

    r = open_retriever(musique_kb_dir())
    qs = questions()[: args.questions]
    graph = dataclasses.replace(r.config, mode="graph")
    ref = r.with_config(dataclasses.replace(graph, ppr_method="cg", ppr_dtype="float64", ppr_tol=1e-10)).rank(
        qs, 10
    )
    lin = r.with_config(dataclasses.replace(graph, ppr_method="linear")).warm()
    print(
        f"\n### Linear PPR push threshold vs float64 CG (bundled MuSiQue, {len(qs)} questions, "
        "graph top-10)\n"
    )
    print("| method | ordered top-10 = reference | max score difference | nodes touched (mean) | ms/query |")
    print("|---|---:|---:|---:|---:|")
    for eps in [float(x) for x in args.eps.split(",")]:
        rv = lin.with_config(dataclasses.replace(graph, ppr_method="linear", ppr_linear_eps=eps))
        t = time.perf_counter()
        got = rv.rank(qs, 10)
        ms = (time.perf_counter() - t) * 1e3 / len(qs)
        texts, _ = rv.prepare_queries(qs)
        q = np.asarray(rv.embedder.encode(texts), dtype=np.float32)
        s, ids, mins = rv._fact_index.search_with_min(q, rv.config.top_n_triples)
        seeds, seeded = rv.entity_seeds(s, ids, mins)
        *_, touched = rv.ppr_top(seeds[seeded], q[seeded], q[seeded] @ rv._passage_emb.T, 10)
        same, err = _compare(got, ref)
        print(
            f"| linear, ppr_linear_eps={eps:g} | {same * 100:.0f} % | {err:.1e} | {touched.mean():,.0f} | "
            f"{ms:.1f} (with encoding) |",
            flush=True,
        )
    fused = r.with_config(dataclasses.replace(graph, ppr_method="fused"))
    same, err = _compare(fused.rank(qs, 10), ref)
    print(f"| fused float32 (L1 tol 1e-7) | {same * 100:.0f} % | {err:.1e} | all | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
