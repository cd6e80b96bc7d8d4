"""Per-query latency of the in-process retriever and of concurrent rollouts sharing it.

Usage:
    python -m benchmarks.retrieval.inprocess [--kb DIR] [--single 60] [--callers 1,8,32] [--calls 96]
        [--rounds 2]

The bundled MuSiQue KB (the test suite's cached build unless ``--kb``), the real MiniLM
encoder and the retriever's default config; queries are the 100 bundled MuSiQue questions.
Two tables, each with a reference path **in the same run** (the query path without a shared thread pool
or micro-batching):

* **single query**: ``retrieve([q])`` p50 / p95, with the query path's dense products on
  numpy's OpenBLAS (reference) vs on torch's pool (``gta_verl.retrieval.gemm``), the
  runs interleaved in ``--rounds`` rounds so drift hits both; the encoder alone on the same
  questions is the floor.
* **concurrent callers**: ``--callers`` coroutines each sending one query per call, back
  to back (no think time: a rollout whose policy answers instantly, as the quickstart's
  reference replay does), ``--calls`` calls in all, through (a) the reference client —
  one ``retrieve`` per call under a lock, numpy products, one encoder forward per
  length group — and (b) ``InProcessRetrieverClient`` (micro-batched ``aretrieve``,
  torch products, a few queries in one forward). Latency is per call, end to end
  (queueing included), as the evaluation report measures it; every answer is compared
  with a plain ``retrieve`` of the same query.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
import time
from pathlib import Path

import numpy as np


class LockedClient:
    """The reference client: every call alone under a lock, in a thread (no micro-batching)."""

    def __init__(self, retriever) -> None:
        self.retriever, self._lock = retriever, threading.Lock()

    def _call(self, queries: list[str]):
        with self._lock:
            return self.retriever.retrieve(queries)

    async def aretrieve(self, queries: list[str]):
        return await asyncio.to_thread(self._call, list(queries))


class PrePath:
    """Context: numpy's BLAS for the products and the padding-capped batches for every encode call."""

    def __enter__(self) -> PrePath:
        from gta_verl.kb import embed
        from gta_verl.retrieval import gemm

        self._old = gemm.set_backend("numpy"), embed.SMALL_CALL_TOKENS
        embed.SMALL_CALL_TOKENS = 0
        return self

    def __exit__(self, *exc: object) -> None:
        from gta_verl.kb import embed
        from gta_verl.retrieval import gemm

        gemm.set_backend(self._old[0])
        embed.SMALL_CALL_TOKENS = self._old[1]


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs), p))


def single_table(r, qs: list[str], n: int, rounds: int) -> list[str]:
    """``retrieve([q])`` p50/p95 per path, interleaved rounds; the encoder alone as the floor."""
    from gta_verl.retrieval import gemm

    per = max(1, n // rounds)
    times: dict[str, list[float]] = {"pre": [], "now": [], "encode": []}
    for rd in range(rounds):
        chunk = qs[(rd * per) % len(qs) :][:per]
        for label in ("pre", "now"):
            with PrePath() if label == "pre" else contextlib.nullcontext():
                r.retrieve(chunk[:2])  # settle the pools after the switch
                for q in chunk:
                    t0 = time.perf_counter()
                    r.retrieve([q])
                    times[label].append((time.perf_counter() - t0) * 1e3)
        for q in chunk:
            t0 = time.perf_counter()
            r.embedder.encode([q])
            times["encode"].append((time.perf_counter() - t0) * 1e3)
    pre50 = pct(times["pre"], 50)
    rows = [
        ("reference: numpy (OpenBLAS) products", "pre"),
        (f"now: torch products (`gemm` backend {gemm.backend()!r})", "now"),
        ("encoder alone (MiniLM, one query)", "encode"),
    ]
    lines = [
        f"\n### One query per `retrieve` call, bundled MuSiQue KB ({len(times['now'])} calls per path, "
        f"{rounds} interleaved rounds)\n",
        "| path | p50 ms | p95 ms | p50 speed-up vs reference |",
        "|---|---:|---:|---:|",
    ]
    for label, key in rows:
        lines.append(
            f"| {label} | {pct(times[key], 50):.1f} | {pct(times[key], 95):.1f} | "
            f"{pre50 / pct(times[key], 50):.2f}× |"
        )
    return lines


async def _closed_loop(client, qs: list[str], callers: int, calls: int) -> tuple[list[float], float, list]:
    """``callers`` coroutines, back to back, ``calls`` calls in all → (latencies ms, wall s, (q, result))."""
    per = [list(range(i, calls, callers)) for i in range(callers)]
    lat: list[float] = []
    got: list = []

    async def caller(ids: list[int]) -> None:
        for i in ids:
            q = qs[i % len(qs)]
            t0 = time.perf_counter()
            res = await client.aretrieve([q])
            lat.append((time.perf_counter() - t0) * 1e3)
            got.append((q, res[0]))

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(ids) for ids in per))
    return lat, time.perf_counter() - t0, got


def concurrent_table(r, qs: list[str], callers: list[int], calls: int) -> list[str]:
    from gta_verl.retrieval.serving.clients import InProcessRetrieverClient

    truth = {q: res.doc_ids for q, res in zip(qs, r.retrieve(qs), strict=True)}
    lines = [
        f"\n### Concurrent callers, one query per call, back to back ({calls} calls per row, bundled "
        "MuSiQue KB)\n",
        "| client | callers | p50 ms | p95 ms | queries/s | p50 vs reference | answers = `retrieve` |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in callers:
        ref50 = None
        for label in ("reference: lock per call, numpy products", "`InProcessRetrieverClient`"):
            pre = label.startswith("pre")
            with PrePath() if pre else contextlib.nullcontext():
                client = LockedClient(r) if pre else InProcessRetrieverClient(r)
                asyncio.run(_closed_loop(client, qs, c, min(c, 8)))  # warm the pools and the batcher
                lat, wall, got = asyncio.run(_closed_loop(client, qs, c, calls))
            p50 = pct(lat, 50)
            ref50 = p50 if pre else ref50
            same = sum(res.doc_ids == truth[q] for q, res in got)
            lines.append(
                f"| {label} | {c} | {p50:.1f} | {pct(lat, 95):.1f} | {len(lat) / wall:.1f} | "
                f"{(ref50 or p50) / p50:.2f}× | {same}/{len(got)} |"
            )
            print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", default=None, help="KB directory (default: the test suite's cached MuSiQue KB)")
    ap.add_argument("--single", type=int, default=60, help="single-query calls per path")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--callers", default="1,8,32")
    ap.add_argument("--calls", type=int, default=96)
    args = ap.parse_args(argv)

    import torch

    from benchmarks.serving.replicas import musique_kb_dir, questions
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.retrieval.section import RetrieverSection

    kb = Path(args.kb) if args.kb else musique_kb_dir()
    r = open_retriever(str(kb), RetrieverSection.from_mapping({"kb_dir": str(kb)}).retrieval)
    r.warm()
    qs = questions()
    r.retrieve(qs[:8])
    out = [
        f"KB {kb}; torch {torch.get_num_threads()} threads; retriever defaults "
        f"(ppr_method={r.config.ppr_method!r}, triple_scan={r.config.triple_scan!r})"
    ]
    out += single_table(r, qs, args.single, args.rounds)
    print("\n".join(out), flush=True)
    out += concurrent_table(r, qs, [int(c) for c in args.callers.split(",")], args.calls)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
