"""The retriever killed three ways while 64 calls are in flight (the kill matrix).

A replica, then the service actor, is killed with ``ray.kill(no_restart=True)`` (Ray's
default, permanent), ``ray.kill(no_restart=False)`` and SIGKILL of its process, while 64
concurrent one-query calls go through the client the agent loop builds (service handle,
name, allowed to recreate). Every call must come back as a result, answered (and then
equal to in-process retrieval) or an error result the client counted, never an exception;
afterwards the service answers again with the results it gave before the kill.
Bounded: each call by the client's deadline, recovery by ``RECOVERY_S``; no timing asserts.
``benchmarks/serving/stress.py --sections actor`` runs the same matrix with 256 calls and timings.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.serving.clients import RayRetrieverClient
from gta_verl.retrieval.serving.config import ServingConfig
from gta_verl.retrieval.serving.service import RetrieverSpec

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

EMB = "gta_verl.testing.toy_kb:HashEmbedder"
NS, NAME = "gta_verl_kill_test", "rt_kill_matrix"
QS = [
    "Where was the president of France born?",
    "capital of Japan",
    "chancellor of Germany",
    "Mount Fuji height",
]
N_CALLS = 64
RECOVERY_S = 300.0  # a bound against hanging (a fresh Ray worker on a busy 2-core machine), not a speed claim
KILLS = ["ray.kill(no_restart=True)", "ray.kill(no_restart=False)", "SIGKILL"]
pytestmark = pytest.mark.slow  # six kills, each a fresh Ray worker process or two: minutes on 2 cores


@pytest.fixture(scope="module")
def client(toy_kb_dir) -> RayRetrieverClient:
    """One client for the module, built as gta_verl.agent.retriever_access builds the agent loop's.

    It lives across the kills like the agent loop's does, and holds the handle of a service it
    recreated (Ray destroys a non-detached actor once its creator holds no handle).
    """
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=NS)
    spec = RetrieverSpec(
        kb_dir=str(toy_kb_dir),
        config=RetrieverConfig().to_dict(),
        name=NAME,
        namespace=NS,
        embedder=EMB,
        serving=ServingConfig(num_replicas=1, num_cpus=0.25, monitor_interval_s=0.2).to_dict(),
    )
    handle = spec.create()
    ray.get(handle.health.remote())
    yield RayRetrieverClient(handle, timeout_s=60, recreate=spec.create, name=NAME)
    del handle
    try:
        svc = ray.get_actor(NAME, namespace=NS)
        ray.get(svc.shutdown.remote())
        ray.kill(svc)
    finally:
        ray.shutdown()


def _pid_of_service() -> int:
    # Only this test process's own Ray cluster: its workers are our descendants.
    for p in psutil.Process().children(recursive=True):
        try:
            if "ray::RetrieverService" in " ".join(p.cmdline()):
                return p.pid
        except psutil.Error:
            continue
    raise AssertionError("no RetrieverService worker process under this test process")


def _kill(target: str, how: str) -> None:
    svc = ray.get_actor(NAME, namespace=NS)
    if target == "replica":
        ((_, handle),) = ray.get(svc.replicas.remote())["replicas"]
        pid = ray.get(handle.health.remote())["pid"]
    else:
        handle, pid = svc, _pid_of_service()
    if how == "SIGKILL":
        os.kill(pid, signal.SIGKILL)
    else:
        ray.kill(handle, no_restart=how == "ray.kill(no_restart=True)")


def _recovered(client: RayRetrieverClient) -> list:
    """Poll until every query of ``QS`` is answered (bounded by ``RECOVERY_S``)."""
    t_end = time.monotonic() + RECOVERY_S
    while True:
        res = client.retrieve(QS)
        if all(r.ok for r in res) or time.monotonic() > t_end:
            return res
        time.sleep(0.5)


@pytest.mark.parametrize("how", KILLS)
@pytest.mark.parametrize("target", ["replica", "service"])
def test_kill_during_64_concurrent_calls(
    client: RayRetrieverClient, toy_kb, hash_embedder, target: str, how: str
) -> None:
    expected = [r.doc_ids for r in GraphRetriever(toy_kb, hash_embedder).retrieve(QS)]
    ray.get(ray.get_actor(NAME, namespace=NS).health.remote())
    before = [r.doc_ids for r in client.retrieve(QS)]
    assert before == expected
    errors_before = client.metrics["errors"]

    async def during_kill() -> list:
        tasks = [asyncio.ensure_future(client.aretrieve([QS[i % 4]])) for i in range(N_CALLS)]
        await asyncio.sleep(0)  # every call has been sent
        await asyncio.to_thread(_kill, target, how)
        return await asyncio.gather(*tasks)  # an exception from any call fails the test here

    answers = [r for (r,) in asyncio.run(during_kill())]
    assert len(answers) == N_CALLS
    errors = [r for r in answers if not r.ok]
    assert all(r.error for r in errors)  # an error result says why
    assert client.metrics["errors"] - errors_before == len(errors)  # ...and is counted
    for i, r in enumerate(answers):
        if r.ok:
            assert r.doc_ids == expected[i % 4], (i, r.doc_ids)
    after = _recovered(client)
    assert [r.error for r in after] == [None] * 4, f"not recovered after {target} {how}: {after[0].error}"
    assert [r.doc_ids for r in after] == before
