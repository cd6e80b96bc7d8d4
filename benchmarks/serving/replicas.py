"""Replicated retriever on Ray: queries/s and memory per replica, actors vs Ray Serve.

Usage:
    python -m benchmarks.serving.replicas [--replicas 1,2,4] [--calls 512] [--callers 64] [--serve]
        [--num-cpus 2] [--kb DIR]

On the bundled MuSiQue KB (real all-MiniLM-L6-v2 query encoder), ``--callers``
concurrent coroutines issue ``--calls`` single-query calls through
:class:`~gta_verl.retrieval.serving.clients.RayRetrieverClient` (power-of-two-choices over
the replicas, each replica a micro-batching actor). Reference in the same run: the
in-process ``GraphRetriever.retrieve`` on batches of 64. Memory per replica is read
from ``/proc/<pid>/smaps_rollup``: RSS counts the shared KB pages in every replica,
PSS splits them among the processes mapping them, USS (private) is what one more
replica costs. ``--serve`` adds the same retriever as a Ray Serve deployment with
``@serve.batch`` called through its ``DeploymentHandle`` (needs ``ray[serve]``).
Prints markdown tables (docs/benchmarks.md, "Replicated retriever").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

NS, NAME = "gta_verl_bench", "bench_retriever"


def musique_kb_dir() -> Path:
    """The cached MuSiQue KB of the test suite (built once if absent)."""
    from gta_verl.kb.embed import cache_root
    from gta_verl.kb.store import KBLoadError, verify_kb
    from gta_verl.testing.musique_kb import build_musique_kb, musique_kb_key

    out = cache_root() / "kb" / f"musique-{musique_kb_key()[:16]}"
    try:
        verify_kb(out)
    except KBLoadError:
        out.parent.mkdir(parents=True, exist_ok=True)
        build_musique_kb(out)
    return out


def questions() -> list[str]:
    from gta_verl.bundled import MUSIQUE_QA
    from gta_verl.data.loaders import read_musique_qa

    return [r.question for r in read_musique_qa(MUSIQUE_QA, strict=False).records]


def memory_mib(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private clean + dirty) of one process, MiB."""
    vals: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, rest = line.split(":", 1)
        vals[key] = float(rest.split()[0]) / 1024
    return {"rss": vals["Rss"], "pss": vals["Pss"], "uss": vals["Private_Clean"] + vals["Private_Dirty"]}


async def drive(call: Any, qs: list[str], n_calls: int, callers: int) -> tuple[list[Any], list[float], float]:
    results: list[Any] = [None] * n_calls
    lat: list[float] = [0.0] * n_calls
    nxt = iter(range(n_calls))

    async def worker() -> None:
        for i in nxt:
            t = time.perf_counter()
            results[i] = (await call([qs[i % len(qs)]]))[0]
            lat[i] = (time.perf_counter() - t) * 1000

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(callers)))
    return results, lat, time.perf_counter() - t0


def result_row(
    kind: str,
    n: int,
    driven: tuple[list[Any], list[float], float],
    expected: dict[str, tuple[str, ...]],
    qs: list[str],
    ready_s: float,
    mem: list[dict[str, float]],
) -> dict[str, Any]:
    """One table row: throughput and latency of ``drive``'s ``(results, latencies, wall)``, the answers
    equal to the in-process reference, start-up time and the mean memory per replica."""
    res, lat, wall = driven
    return {
        "kind": kind,
        "n": n,
        "qps": len(res) / wall,
        "p50": float(np.percentile(lat, 50)),
        "p95": float(np.percentile(lat, 95)),
        "same": sum(r.ok and r.doc_ids == expected[qs[i % len(qs)]] for i, r in enumerate(res)),
        "ready_s": ready_s,
        **{k: float(np.mean([m[k] for m in mem])) for k in ("rss", "pss", "uss")},
    }


def bench_reference(kb_dir: Path, qs: list[str], n_calls: int) -> tuple[float, dict[str, tuple[str, ...]]]:
    from gta_verl.retrieval.backends import open_retriever

    r = open_retriever(kb_dir)
    r.retrieve(qs[:8])  # warm the encoder and the transition
    batch = [qs[i % len(qs)] for i in range(n_calls)]
    t0 = time.perf_counter()
    out = [x for s in range(0, n_calls, 64) for x in r.retrieve(batch[s : s + 64])]
    qps = n_calls / (time.perf_counter() - t0)
    return qps, {q: res.doc_ids for q, res in zip(batch, out, strict=True)}


def bench_actors(
    kb_dir: Path, n: int, share: bool, qs: list[str], expected: dict, n_calls: int, callers: int
) -> dict[str, Any]:
    import ray

    from gta_verl.retrieval.serving.clients import RayRetrieverClient
    from gta_verl.retrieval.serving.config import ServingConfig
    from gta_verl.retrieval.serving.service import get_or_create_retriever_actor

    serving = ServingConfig(num_replicas=n, share_arrays=share, placement="any")
    t0 = time.perf_counter()
    svc = get_or_create_retriever_actor(kb_dir, name=NAME, namespace=NS, num_cpus=0.01, serving=serving)
    ray.get(svc.health.remote())
    ready_s = time.perf_counter() - t0
    try:
        client = RayRetrieverClient(NAME, timeout_s=600, namespace=NS, seed=0)
        asyncio.run(drive(client.aretrieve, qs, 4 * n, 4 * n))  # warm every replica
        st0 = ray.get(svc.stats.remote())
        res, lat, wall = asyncio.run(drive(client.aretrieve, qs, n_calls, callers))
        st1 = ray.get(svc.stats.remote())
        pids = [ray.get(h.health.remote())["pid"] for _, h in ray.get(svc.replicas.remote())["replicas"]]
        mem = [memory_mib(p) for p in pids]
    finally:
        ray.get(svc.shutdown.remote())
        ray.kill(svc)
    kind = f"actors{'' if share else ' (private arrays)'}"
    row = result_row(kind, n, (res, lat, wall), expected, qs, ready_s, mem)
    return {**row, "batch_mean": (st1["queries"] - st0["queries"]) / max(1, st1["batches"] - st0["batches"])}


def bench_serve(
    kb_dir: Path, n: int, qs: list[str], expected: dict, n_calls: int, callers: int
) -> dict[str, Any]:
    from ray import serve

    @serve.deployment(num_replicas=n, ray_actor_options={"num_cpus": 0.01}, max_ongoing_requests=4096)
    class ServeRetriever:
        def __init__(self, kb_dir: str) -> None:
            from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever

            self.retriever = load_shared_retriever(kb_dir)

        @serve.batch(max_batch_size=256, batch_wait_timeout_s=0.005)
        async def retrieve_batch(self, queries: list[str]) -> list[Any]:
            return await asyncio.to_thread(self.retriever.retrieve, queries)

        async def retrieve(self, queries: list[str]) -> list[Any]:
            return [await self.retrieve_batch(q) for q in queries]

        def pid(self) -> int:
            return os.getpid()

    t0 = time.perf_counter()
    handle = serve.run(ServeRetriever.bind(str(kb_dir)), name="bench_retriever", route_prefix=None)
    ready_s = time.perf_counter() - t0
    try:

        async def call(q: list[str]) -> list[Any]:
            return await handle.retrieve.remote(q)

        async def go(n_calls_: int, callers_: int) -> tuple[list[Any], list[float], float]:
            return await drive(call, qs, n_calls_, callers_)

        asyncio.run(go(4 * n, 4 * n))
        res, lat, wall = asyncio.run(go(n_calls, callers))
        pids = {handle.pid.remote().result() for _ in range(8 * n)}
        mem = [memory_mib(p) for p in pids]
    finally:
        serve.delete("bench_retriever")
    return result_row("Ray Serve + @serve.batch", n, (res, lat, wall), expected, qs, ready_s, mem)


def replica_parser(doc: str | None, replicas: str, callers: int) -> argparse.ArgumentParser:
    """The options of the replica benchmarks: replica counts, calls, callers, Ray CPUs, KB."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", default=replicas)
    ap.add_argument("--calls", type=int, default=512)
    ap.add_argument("--callers", type=int, default=callers)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--kb", type=Path, default=None)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = replica_parser(__doc__, "1,2,4", 64)
    ap.add_argument("--serve", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray

    kb_dir = args.kb or musique_kb_dir()
    qs = questions()
    ref_qps, expected = bench_reference(kb_dir, qs, args.calls)
    counts = [int(x) for x in args.replicas.split(",")]
    ray.init(
        address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, namespace=NS
    )
    rows = []
    try:
        for n in counts:
            rows.append(bench_actors(kb_dir, n, True, qs, expected, args.calls, args.callers))
        rows.append(bench_actors(kb_dir, max(counts), False, qs, expected, args.calls, args.callers))
        if args.serve:
            from ray import serve

            try:
                for n in counts:
                    rows.append(bench_serve(kb_dir, n, qs, expected, args.calls, args.callers))
            finally:
                serve.shutdown()
    finally:
        ray.shutdown()
    print(
        f"\n### Replicated retriever: {args.calls} single-query calls from {args.callers} concurrent callers "
        f"(MuSiQue KB, MiniLM encoder, Ray with {args.num_cpus} CPUs on {os.cpu_count()} cores)\n"
    )
    print(f"In-process reference (`GraphRetriever.retrieve`, batches of 64): **{ref_qps:.1f} queries/s**\n")
    print(
        "| server | replicas | queries/s | × in-process | p50 ms | p95 ms | equal to in-process | ready s "
        "| RSS MiB/replica | PSS MiB/replica | USS MiB/replica |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['n']} | {r['qps']:.1f} | {r['qps'] / ref_qps:.2f} | {r['p50']:.0f} | "
            f"{r['p95']:.0f} | {r['same']}/{args.calls} | {r['ready_s']:.1f} | {r['rss']:.0f} | "
            f"{r['pss']:.0f} | {r['uss']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
