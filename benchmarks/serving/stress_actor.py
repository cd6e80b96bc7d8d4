"""The ``actor`` section of ``benchmarks/serving/stress.py``: the Ray retriever killed during concurrent
calls.

A replica, then the service actor, killed three ways (:data:`KILLS`) while ``n_calls`` one-query
calls are in flight through the client the agent loop builds; every call must return within its
timeout, the service recover and later results equal the in-process ones. Run it through
``python -m benchmarks.serving.stress --sections actor``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.serving.stress_musique import (
    TIMEOUT_S,
    musique_kb_dir,
    musique_questions,
    started_musique_retriever,
)

KILLS = ("ray.kill(no_restart=True)", "ray.kill(no_restart=False)", "SIGKILL")


def _service_pid(name_part: str) -> int:
    """Pid of this driver's Ray worker running ``name_part`` (children of our own local cluster only)."""
    import psutil

    for p in psutil.Process().children(recursive=True):
        try:
            if name_part in " ".join(p.cmdline()):
                return p.pid
        except psutil.Error:
            continue
    raise RuntimeError(f"no Ray worker process titled {name_part!r} under this driver")


def kill(target: str, how: str, service: Any) -> None:
    """Kill the service's first replica (``target="replica"``) or the service itself, one of :data:`KILLS`."""
    import ray

    if target == "replica":
        ((_, handle),) = ray.get(service.replicas.remote())["replicas"][:1]
        pid = ray.get(handle.health.remote())["pid"] if how == "SIGKILL" else None
    else:
        handle, pid = service, (_service_pid("ray::RetrieverService") if how == "SIGKILL" else None)
    if how == "SIGKILL":
        os.kill(pid, signal.SIGKILL)
    else:
        ray.kill(handle, no_restart=how == "ray.kill(no_restart=True)")


@dataclass
class KillRow:
    target: str
    how: str
    calls: int
    answered: int
    equal: int
    errors: int
    slowest_ms: float
    recovered_s: float
    later_equal: bool
    reasons: dict[str, int]


async def kill_during_calls(
    client: Any, qs: list[str], expected: list[list[str]], n_calls: int, do_kill: Any
) -> tuple[list[Any], list[float]]:
    """``n_calls`` concurrent one-query calls; ``do_kill()`` once they are all in flight."""

    async def timed(i: int) -> tuple[Any, float]:
        t = time.perf_counter()
        (r,) = await client.aretrieve([qs[i % len(qs)]])
        return r, (time.perf_counter() - t) * 1000

    tasks = [asyncio.ensure_future(timed(i)) for i in range(n_calls)]
    await asyncio.sleep(0)  # every task has sent its call
    await asyncio.to_thread(do_kill)
    done = await asyncio.gather(*tasks)
    return [r for r, _ in done], [ms for _, ms in done]


def wait_recovered(
    client: Any, qs: list[str], expected: list[list[str]], limit_s: float
) -> tuple[float, bool]:
    """Seconds until one call of all ``qs`` succeeds again, and whether it equals ``expected``."""
    t = time.perf_counter()
    while True:
        res = client.retrieve(qs)
        if all(r.ok for r in res) or time.perf_counter() - t > limit_s:
            return time.perf_counter() - t, [r.doc_ids for r in res] == expected
        time.sleep(0.2)


def _actor_kb(kb: str, tmp: Path) -> tuple[Path, str | None, list[str], Any]:
    """(KB directory, embedder spec, queries, in-process retriever) of the ``toy`` or MuSiQue KB."""
    from gta_verl.retrieval.backends import open_retriever

    if kb == "toy":
        from gta_verl.kb.store import save_kb
        from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb

        emb = HashEmbedder()
        save_kb(make_toy_kb(emb), tmp / "kb")
        qs = [
            "Where was the president of France born?",
            "capital of Japan",
            "chancellor of Germany",
            "Mount Fuji height",
        ]
        return (
            tmp / "kb",
            "gta_verl.testing.toy_kb:HashEmbedder",
            qs,
            open_retriever(tmp / "kb", embedder=emb),
        )
    kb_dir = musique_kb_dir()
    return kb_dir, None, musique_questions()[:64], started_musique_retriever() or open_retriever(kb_dir)


def _kill_row(
    target: str,
    how: str,
    out: list[Any],
    ms: list[float],
    expected: list[list[str]],
    recovered: tuple[float, bool],
) -> KillRow:
    """One table row from the results ``out`` and latencies ``ms`` of the calls the kill hit."""
    reasons: dict[str, int] = {}
    for r in out:
        if not r.ok:
            key = (r.error or "")[:70]
            reasons[key] = reasons.get(key, 0) + 1
    equal = sum(r.ok and r.doc_ids == expected[i % len(expected)] for i, r in enumerate(out))
    rec_s, later = recovered
    return KillRow(
        target,
        how,
        len(out),
        sum(r.ok for r in out),
        equal,
        sum(not r.ok for r in out),
        max(ms),
        rec_s,
        later,
        reasons,
    )


def _kill_rows(
    spec: Any, qs: list[str], expected: list[list[str]], n_calls: int, targets: list[str]
) -> list[KillRow]:
    """Each target killed each way of :data:`KILLS` during ``n_calls`` calls, on the live Ray service."""
    import ray

    from gta_verl.retrieval.serving.clients import RayRetrieverClient

    service = spec.create()
    ray.get(service.health.remote())
    # as the agent loop builds it (gta_verl.agent.retriever_access): handle, name, allowed to recreate
    client = RayRetrieverClient(service, timeout_s=TIMEOUT_S, recreate=spec.create, name=spec.name)
    before = [r.doc_ids for r in client.retrieve(qs)]
    rows: list[KillRow] = []
    for target in targets:
        for how in KILLS:
            svc = ray.get_actor(spec.name, namespace=spec.namespace)
            ray.get(svc.health.remote())
            out, ms = asyncio.run(
                kill_during_calls(client, qs, expected, n_calls, functools.partial(kill, target, how, svc))
            )
            rec_s, later = wait_recovered(client, qs, expected, limit_s=180)
            rows.append(_kill_row(target, how, out, ms, expected, (rec_s, later and before == expected)))
    svc = ray.get_actor(spec.name, namespace=spec.namespace)
    ray.get(svc.shutdown.remote())
    ray.kill(svc)
    return rows


def _print_kill_table(rows: list[KillRow], n_calls: int, kb: str, n_queries: int) -> None:
    print(
        f"\n### Retriever killed during {n_calls} concurrent calls ({kb} KB, {n_queries} distinct queries, "
        f"client timeout {TIMEOUT_S:g} s, client built as the agent loop builds it)\n"
    )
    print(
        "| killed | how | calls | answered | equal to in-process | error results | slowest call ms "
        "| ≤ timeout | recovered after s | later results equal |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---|")
    for r in rows:
        print(
            f"| {r.target} | `{r.how}` | {r.calls} | {r.answered} | {r.equal} | {r.errors} | "
            f"{r.slowest_ms:.0f} | {'yes' if r.slowest_ms <= TIMEOUT_S * 1000 + 500 else 'NO'} | "
            f"{r.recovered_s:.1f} | {'yes' if r.later_equal else 'NO'} |"
        )
    errs = {k: v for r in rows for k, v in r.reasons.items()}
    if errs:
        print(f"\nerror results seen: {errs}")


def section_actor(n_calls: int, kb: str, targets: list[str]) -> list[KillRow]:
    """Kill the retriever (replica, then the service) three ways during ``n_calls`` concurrent calls."""
    import ray

    from gta_verl.retrieval.config import RetrieverConfig
    from gta_verl.retrieval.serving.config import ServingConfig
    from gta_verl.retrieval.serving.service import RetrieverSpec

    tmp = Path(tempfile.mkdtemp())
    kb_dir, embedder, qs, local = _actor_kb(kb, tmp)
    expected = [r.doc_ids for r in local.retrieve(qs)]
    ns, name = "gta_verl_stress", "stress_retriever"
    spec = RetrieverSpec(
        kb_dir=str(Path(kb_dir).resolve()),
        config=RetrieverConfig().to_dict(),
        name=name,
        namespace=ns,
        embedder=embedder,
        serving=ServingConfig(num_replicas=1, num_cpus=0.5, monitor_interval_s=0.2).to_dict(),
    )
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=ns)
    try:
        rows = _kill_rows(spec, qs, expected, n_calls, targets)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    _print_kill_table(rows, n_calls, kb, len(qs))
    return rows
