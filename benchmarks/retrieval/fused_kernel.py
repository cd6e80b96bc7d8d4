"""Where the fused PPR kernel's time goes: one iteration's rate, and RCM reordering on/off.

Usage:
    python -m benchmarks.retrieval.fused_kernel [--graph 2wiki|hotpotqa] [--widths 8,16,32,64] [--reps 3]

Prints two markdown tables on a synthetic Table-5 graph (``make_synthetic_graph``, seed 0):

* one ``fused_step`` of :mod:`gta_verl.retrieval.ppr.fused_power` (float32) per block width b: ms per
  iteration and multiply-adds per second (in-edges × b / time);
* whole ``batched_ppr(method="fused")`` solves (float32, tol 1e-7, B=32) on the transition built with
  and without reverse Cuthill–McKee, alternating ``--reps`` times (the reference is the other row of the
  same run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gta_verl.retrieval.ppr.batched import batched_ppr
from gta_verl.retrieval.ppr.fused_power import FUSED_CHUNK_ROWS, fused_step
from gta_verl.retrieval.ppr.transition import transition_from_edges
from gta_verl.testing.synthetic_graphs import (
    HOTPOTQA_10K,
    TWOWIKI,
    make_seed_personalization,
    make_synthetic_graph,
)

SPECS = {"2wiki": TWOWIKI, "hotpotqa": HOTPOTQA_10K}


def step_rates(tr, spec, widths: list[int], reps: int) -> list[str]:
    m = tr.matrix.astype(np.float32)
    lines = [
        "| block width b | ms / iteration | ms / query / iteration | G multiply-adds/s |",
        "|---:|---:|---:|---:|",
    ]
    for b in widths:
        pers = make_seed_personalization(spec, b, seed=1)
        x = np.ascontiguousarray((pers / pers.sum(1, keepdims=True))[:, tr.perm].T, dtype=np.float32)
        out, lost = np.empty_like(x), np.zeros(b, np.float32)
        parts = np.zeros(((x.shape[0] + FUSED_CHUNK_ROWS - 1) // FUSED_CHUNK_ROWS, b))
        args = (m.indptr, m.indices, m.data, x, x, np.float32(0.5), lost, out, parts)
        fused_step(*args)  # compile / load the cache
        t = time.perf_counter()
        for _ in range(reps * 5):
            fused_step(*args)
        dt = (time.perf_counter() - t) / (reps * 5)
        lines.append(f"| {b} | {dt * 1e3:.2f} | {dt * 1e3 / b:.3f} | {m.nnz * b / dt / 1e9:.2f} |")
        print(lines[-1], flush=True)
    return lines


def rcm_rows(sg, spec, reps: int) -> list[str]:
    pers = make_seed_personalization(spec, 32, seed=1)
    trs = {r: transition_from_edges(spec.n_nodes, sg.edges, sg.weights, reorder=r) for r in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    for tr in trs.values():
        batched_ppr(tr, pers[:2], method="fused", dtype=np.float32, tol=1e-7)  # warm-up
    for _ in range(reps):
        for r, tr in trs.items():
            t = time.perf_counter()
            batched_ppr(tr, pers, method="fused", dtype=np.float32, tol=1e-7, block_size=32)
            times[r].append((time.perf_counter() - t) * 1e3 / len(pers))
    lines = ["| node order | ms/query, B=32 (each repetition) |", "|---|---|"]
    for r, ts in times.items():
        order = "reverse Cuthill–McKee" if r else "as built"
        lines.append(f"| {order} | {' / '.join(f'{t:.1f}' for t in ts)} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graph", default="2wiki", choices=sorted(SPECS))
    ap.add_argument("--widths", default="8,16,32,64")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    spec = SPECS[args.graph]
    sg = make_synthetic_graph(spec, seed=0)
    tr = transition_from_edges(spec.n_nodes, sg.edges, sg.weights)
    out = [f"### {spec.name}: {spec.n_nodes:,} nodes, {tr.matrix.nnz:,} in-edges (float32)\n"]
    out += step_rates(tr, spec, [int(w) for w in args.widths.split(",")], args.reps)
    out += ["", "### Node order (whole fused solves, float32, tol 1e-7)\n"] + rcm_rows(sg, spec, args.reps)
    print("\n".join(out))


if __name__ == "__main__":
    main()
