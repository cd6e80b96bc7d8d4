"""Serving the retriever: our Ray actors + micro-batcher vs a Ray Serve deployment with ``@serve.batch``.

Usage (Ray Serve's extra packages live outside the project's venv; ``ray[serve]`` is not a dependency):
    pip install --target /tmp/serve_extra "ray[serve]==<ray version of .venv>"   # only what is missing
    PYTHONPATH=/tmp/serve_extra python -m benchmarks.serving.serve_vs_actors [--replicas 1,2] [--calls 512]
        [--callers 256] [--num-cpus 2] [--kb DIR]

Serve deployments would replace the actors only if they measure at least as well as actors plus
the micro-batcher. Both servers wrap the same ``GraphRetriever`` on the
bundled MuSiQue KB (real all-MiniLM-L6-v2 query encoder) with the same batching
(``ServingConfig`` defaults: at most ``max_batch`` queries, ``max_wait_ms`` for company),
the same KB loading (``load_shared_retriever``: memory-mapped shared arrays), the same
CPU reservation per replica and the same thread cap (``limit_threads``), so the serving
layer is the only difference:

- actors: ``RetrieverService`` + ``RetrieverReplica`` replicas (``MicroBatcher``),
  driven through ``RayRetrieverClient`` (power of two choices in the client);
- Serve: one deployment whose replicas batch with ``@serve.batch(max_batch_size,
  batch_wait_timeout_s)``, driven through its ``DeploymentHandle`` (Serve's router,
  also power of two choices); HTTP proxy disabled, as the actors have none.

``--callers`` concurrent coroutines in the driver issue ``--calls`` single-query calls.
Reference in the same run: in-process ``GraphRetriever.retrieve`` on batches of 64, whose
doc ids every served result must equal. Rows alternate actors / Serve per replica count so
that a change of machine load hits both. Memory per replica from ``/proc/<pid>/smaps_rollup``
(helpers shared with ``benchmarks/serving/replicas.py``). Prints a markdown table (recorded in
docs/benchmarks/serve_vs_actors.md; the decision in docs/scale.md, "Serving: actors vs Ray Serve").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.serving.replicas import (
    NS,
    bench_actors,
    bench_reference,
    drive,
    memory_mib,
    musique_kb_dir,
    questions,
    replica_parser,
    result_row,
)

APP = "bench_serve_vs_actors"
REPLICA_CPUS = 0.01  # what bench_actors reserves per replica: 1 thread each after limit_threads


def require_serve() -> None:
    """Exit with a clear message when Ray Serve's extra packages are not importable."""
    try:
        import ray.serve
    except ImportError as exc:
        import ray

        raise SystemExit(
            f"serve_vs_actors: ray.serve is not importable ({type(exc).__name__}: {exc}). This benchmark is "
            "optional and ray[serve] is not a dependency of gta-verl: install its extras outside the "
            "project's venv, e.g. `pip install --target /tmp/serve_extra "
            f'"ray[serve]=={ray.__version__}"`, and rerun '
            "with PYTHONPATH=/tmp/serve_extra."
        ) from None


def serve_app(kb_dir: Path, n: int, max_batch: int, max_wait_ms: float) -> Any:
    """The Serve application: ``n`` replicas of the retriever, each batching with ``@serve.batch``.

    ``max_ongoing_requests`` is raised from Serve's default (5) to the actors' ``max_concurrency``
    (4096): with 5, a replica could never hold more than 5 queries in one batch.

    Why Serve's batches stay small under a backlog (Ray 2.60 ``serve/batching.py``): its batch
    loop forms the next batch ``batch_wait_timeout_s`` after that batch's first request, while
    the previous batch still runs, and the formed batches queue on ``max_concurrent_batches``.
    So a batch holds the requests that arrived in one wait window, whereas ``MicroBatcher``
    forms its next batch only when the worker is free, from everything that waited meanwhile.
    """
    from ray import serve

    @serve.deployment(
        num_replicas=n,
        ray_actor_options={"num_cpus": REPLICA_CPUS},
        max_ongoing_requests=4096,
        max_queued_requests=-1,
    )
    class ServeRetriever:
        def __init__(self, kb_dir: str) -> None:
            import ray

            from gta_verl.retrieval.serving.replica import limit_threads, replica_threads
            from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever

            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
            self.threads = limit_threads(replica_threads(cpus))  # as RetrieverReplica does
            self.retriever = load_shared_retriever(kb_dir)
            self.batch_sizes: list[int] = []

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=max_wait_ms / 1000.0)
        async def retrieve_batch(self, queries: list[str]) -> list[Any]:
            self.batch_sizes.append(len(queries))
            return await asyncio.to_thread(self.retriever.retrieve, queries)

        async def retrieve(self, query: str) -> Any:
            return await self.retrieve_batch(query)

        def info(self) -> dict[str, Any]:
            return {"pid": os.getpid(), "threads": self.threads, "batches": list(self.batch_sizes)}

    return ServeRetriever.bind(str(kb_dir))


def bench_serve_batch(
    kb_dir: Path,
    n: int,
    qs: list[str],
    expected: dict,
    n_calls: int,
    callers: int,
    max_batch: int,
    max_wait_ms: float,
) -> dict[str, Any]:
    """One row: Serve deployment with ``n`` replicas, same load as ``bench_actors``."""
    from ray import serve

    t0 = time.perf_counter()
    handle = serve.run(serve_app(kb_dir, n, max_batch, max_wait_ms), name=APP, route_prefix=None)
    ready_s = time.perf_counter() - t0
    try:

        async def call(q: list[str]) -> list[Any]:
            return [await handle.retrieve.remote(q[0])]

        asyncio.run(drive(call, qs, 4 * n, 4 * n))  # warm every replica, as bench_actors does
        warm = {pid: len(i["batches"]) for pid, i in replica_infos(handle, n).items()}
        res, lat, wall = asyncio.run(drive(call, qs, n_calls, callers))
        infos = replica_infos(handle, n)
        mem = [memory_mib(p) for p in infos]
        sizes = [b for pid, i in infos.items() for b in i["batches"][warm.get(pid, 0) :]]
    finally:
        serve.delete(APP)
    kind = f"Ray Serve + @serve.batch({max_batch}, {max_wait_ms / 1000:g} s)"
    return {
        **result_row(kind, n, (res, lat, wall), expected, qs, ready_s, mem),
        "batch_mean": float(np.mean(sizes)) if sizes else float("nan"),
    }


def serve_ceiling(n_calls: int, callers: int, max_batch: int, max_wait_ms: float) -> tuple[float, float]:
    """Serve's own request rate: the same calls to one replica whose batch handler does nothing.

    Returns:
        ``(calls/s, mean batch size)``: an upper bound on what any Serve-wrapped retriever
        can answer on this machine, whatever the retriever costs.
    """
    from ray import serve

    @serve.deployment(
        num_replicas=1,
        ray_actor_options={"num_cpus": REPLICA_CPUS},
        max_ongoing_requests=4096,
        max_queued_requests=-1,
    )
    class Noop:
        def __init__(self) -> None:
            self.batch_sizes: list[int] = []

        @serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=max_wait_ms / 1000.0)
        async def retrieve_batch(self, queries: list[str]) -> list[str]:
            self.batch_sizes.append(len(queries))
            return queries

        async def retrieve(self, query: str) -> str:
            return await self.retrieve_batch(query)

        def info(self) -> list[int]:
            return list(self.batch_sizes)

    handle = serve.run(Noop.bind(), name=APP, route_prefix=None)
    try:

        async def call(q: list[str]) -> list[Any]:
            return [await handle.retrieve.remote(q[0])]

        asyncio.run(drive(call, ["q"], 8, 8))
        warm = len(handle.info.remote().result())
        _, _, wall = asyncio.run(drive(call, ["q"], n_calls, callers))
        sizes = handle.info.remote().result()[warm:]
    finally:
        serve.delete(APP)
    return n_calls / wall, float(np.mean(sizes))


def replica_infos(handle: Any, n: int) -> dict[int, dict[str, Any]]:
    """``info()`` of every replica, by pid (the router spreads the calls; asks until all ``n`` answered)."""
    infos: dict[int, dict[str, Any]] = {}
    for _ in range(64 * n):
        info = handle.info.remote().result()
        infos[info["pid"]] = info
        if len(infos) == n:
            break
    return infos


def measure(
    args: argparse.Namespace, kb_dir: Any, qs: list[str], expected: Any, batching: Any, waits: list[float]
) -> tuple[list[dict[str, Any]], tuple[float, float]]:
    """(a row per replica count and server: actors, then Serve per batch wait; Serve's request ceiling)."""
    import ray
    from ray import serve

    # address="local": a private instance even when another `ray start` cluster runs on this node
    ray.init(
        address="local", num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, namespace=NS
    )
    rows = []
    try:
        serve.start(proxy_location="Disabled")
        for n in [int(x) for x in args.replicas.split(",")]:
            la = os.getloadavg()[0]
            row = bench_actors(kb_dir, n, True, qs, expected, args.calls, args.callers)
            rows.append({**row, "load": (la, os.getloadavg()[0])})
            for wait_ms in waits:
                la = os.getloadavg()[0]
                rows.append(
                    {
                        **bench_serve_batch(
                            kb_dir, n, qs, expected, args.calls, args.callers, batching.max_batch, wait_ms
                        ),
                        "load": (la, os.getloadavg()[0]),
                    }
                )
        ceiling = serve_ceiling(args.calls, args.callers, batching.max_batch, batching.max_wait_ms)
    finally:
        serve.shutdown()
        ray.shutdown()
    return rows, ceiling


def report(
    args: argparse.Namespace,
    batching: Any,
    loads: tuple[Any, Any],
    ref_qps: float,
    rows: list[dict[str, Any]],
    ceiling: tuple[float, float],
) -> None:
    """Print the serving table; ``loads``: the load averages at the start and at the end."""
    load0, load1 = loads
    print(
        f"\n### Serving: {args.calls} single-query calls from {args.callers} concurrent callers "
        f"(MuSiQue KB, MiniLM encoder, Ray with {args.num_cpus} CPUs on {os.cpu_count()} cores, "
        f"{REPLICA_CPUS} CPU and 1 thread per replica, batches of ≤ {batching.max_batch} queries / "
        f"{batching.max_wait_ms:g} ms)\n"
    )
    print(
        f"Load average (1/5/15 min) at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, at end "
        f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}. In-process reference (`GraphRetriever.retrieve`, "
        f"batches of 64): **{ref_qps:.1f} queries/s**\n"
    )
    print(
        "| server | replicas | queries/s | × in-process | p50 ms | p95 ms | equal to in-process | ready s "
        "| mean batch | RSS MiB/replica | USS MiB/replica | load 1 min start→end |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['n']} | {r['qps']:.1f} | {r['qps'] / ref_qps:.2f} | {r['p50']:.0f} | "
            f"{r['p95']:.0f} | {r['same']}/{args.calls} | {r['ready_s']:.1f} | {r['batch_mean']:.0f} | "
            f"{r['rss']:.0f} | {r['uss']:.0f} | {r['load'][0]:.1f}→{r['load'][1]:.1f} |"
        )
    print(
        f"\nServe's request ceiling in the same run (one replica, the same {args.calls} calls from "
        f"{args.callers} callers, batch handler returning its input): **{ceiling[0]:.1f} calls/s**, "
        f"mean batch {ceiling[1]:.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = replica_parser(__doc__, "1,2", 256)
    ap.add_argument(
        "--serve-wait-ms",
        default=None,
        help="comma list of Serve batch_wait_timeout_s in ms (default: the micro-batcher's wait)",
    )
    args = ap.parse_args(argv)
    require_serve()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gta_verl.retrieval.serving.config import ServingConfig

    batching = ServingConfig()  # the micro-batcher's defaults: the actors below use them too
    waits = [float(x) for x in (args.serve_wait_ms or str(batching.max_wait_ms)).split(",")]
    kb_dir = args.kb or musique_kb_dir()
    qs = questions()
    load0 = os.getloadavg()
    ref_qps, expected = bench_reference(kb_dir, qs, args.calls)
    rows, ceiling = measure(args, kb_dir, qs, expected, batching, waits)
    report(args, batching, (load0, os.getloadavg()), ref_qps, rows, ceiling)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
