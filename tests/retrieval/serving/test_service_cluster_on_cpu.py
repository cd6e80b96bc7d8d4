"""Replicated retriever on a simulated 3-node Ray cluster (``ray.cluster_utils.Cluster``).

Node 0 (head) runs the callers, nodes 1 and 2 carry the custom resource
``retriever`` (one unit each), so the two replicas land on different nodes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.serving.clients import RayRetrieverClient
from gta_verl.retrieval.serving.config import ServingConfig
from gta_verl.retrieval.serving.service import get_or_create_retriever_actor

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402 - needs ray: after the importorskip

EMB = "gta_verl.testing.toy_kb:HashEmbedder"
NS = "gta_verl_cluster_test"
NAME = "rt_cluster"
QS = (
    "Where was the president of France born?",
    "capital of Japan",
    "chancellor of Germany",
    "Mount Fuji height",
    "river in northern France",
)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"caller": 4}})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1, resources={"retriever": 1})
        ray.init(address=c.address, namespace=NS, log_to_driver=False)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def service(cluster, toy_kb_dir):
    serving = ServingConfig(
        num_replicas=2, placement="resource", resource="retriever", monitor_interval_s=0.2
    )
    handle = get_or_create_retriever_actor(
        toy_kb_dir, name=NAME, namespace=NS, num_cpus=0.5, embedder=EMB, serving=serving
    )
    ray.get(handle.health.remote(timeout_s=300))
    yield handle
    ray.get(handle.shutdown.remote())
    ray.kill(handle)


@pytest.fixture(scope="module")
def expected(toy_kb, hash_embedder) -> dict[str, tuple[str, ...]]:
    local = GraphRetriever(toy_kb, hash_embedder)
    return {q: r.doc_ids for q, r in zip(QS, local.retrieve(list(QS)), strict=True)}


@ray.remote(num_cpus=0, resources={"caller": 1})
def _query_each_replica(queries: list[str]) -> dict:
    """On the caller node: ask every replica directly and through the balancing client."""
    svc = ray.get_actor(NAME, namespace=NS)
    info = ray.get(svc.replicas.remote())
    out = {"caller_node": ray.get_runtime_context().get_node_id(), "replicas": {}}
    for _, h in info["replicas"]:
        health = ray.get(h.health.remote())
        out["replicas"][health["node_id"]] = {
            "pid": health["pid"],
            "doc_ids": [r.doc_ids for r in ray.get(h.retrieve.remote(queries))],
        }
    client = RayRetrieverClient(NAME, timeout_s=60, namespace=NS)
    out["client"] = [r.doc_ids for r in client.retrieve(queries)]
    return out


@ray.remote(num_cpus=0, resources={"caller": 1})
class _Callers:
    """256 concurrent callers on the caller node, each issuing ``rounds`` sequential queries."""

    def __init__(self, timeout_s: float) -> None:
        self.client = RayRetrieverClient(NAME, timeout_s=timeout_s, namespace=NS, seed=0)
        self.done = 0

    async def run(self, n_callers: int, rounds: int) -> list[tuple[str, tuple[str, ...], str | None]]:
        async def caller(i: int) -> list:
            got = []
            for j in range(rounds):
                q = QS[(i + j) % len(QS)]
                (r,) = await self.client.aretrieve([q])
                got.append((q, r.doc_ids, r.error))
                self.done += 1
            return got

        per = await asyncio.gather(*(caller(i) for i in range(n_callers)))
        return [x for calls in per for x in calls]

    async def progress(self) -> int:
        return self.done

    async def metrics(self) -> dict:
        return dict(self.client.metrics)


def _mapped(pid: int) -> set[str]:
    return {
        ln.split()[-1] for ln in Path(f"/proc/{pid}/maps").read_text().splitlines() if ln.endswith(".npy")
    }


def test_two_replicas_on_two_nodes_equal_in_process(cluster, service, expected) -> None:
    out = ray.get(_query_each_replica.remote(list(QS)), timeout=120)
    assert len(out["replicas"]) == 2  # two distinct nodes
    assert out["caller_node"] not in out["replicas"]  # callers on the third node
    for rep in out["replicas"].values():
        assert rep["doc_ids"] == [expected[q] for q in QS]
    assert out["client"] == [expected[q] for q in QS]
    # both replicas map the same node-cache files read-only (one copy in the page cache)
    maps = [_mapped(rep["pid"]) for rep in out["replicas"].values()]
    shared = maps[0] & maps[1]
    assert any(p.endswith("/fact_emb.npy") for p in shared) and any(
        p.endswith("/passage_emb.npy") for p in shared
    )
    assert any(p.endswith("/matrix_indices.npy") for p in shared)


def test_kill_one_replica_under_256_callers(cluster, service, expected) -> None:
    timeout_s, rounds = 60.0, 4
    callers = _Callers.remote(timeout_s)
    ((key0, victim), (key1, _)) = sorted(ray.get(service.replicas.remote())["replicas"], key=lambda kv: kv[0])
    run = callers.run.remote(256, rounds)
    while ray.get(callers.progress.remote()) < 64:  # calls flowing on both replicas
        time.sleep(0.05)
    ray.kill(victim)  # for good: the service must replace it
    calls = ray.get(run, timeout=rounds * timeout_s + 60)  # no caller hangs past its deadline
    assert len(calls) == 256 * rounds  # every call returned
    answered = [c for c in calls if c[2] is None]
    errors = [c for c in calls if c[2] is not None]
    assert all(doc_ids == expected[q] for q, doc_ids, _ in answered)
    metrics = ray.get(callers.metrics.remote())
    assert metrics.get("errors", 0) == len(errors)  # every error result is counted
    assert metrics["calls"] == 256 * rounds
    assert metrics["transport_errors"] >= 1  # the kill did hit calls routed to the victim
    # the replica is replaced: slot 0 has its next generation, and it answers like the others
    for _ in range(600):
        keys = sorted(k for k, _ in ray.get(service.replicas.remote())["replicas"])
        if keys == [(key0[0], key0[1] + 1), key1]:
            break
        time.sleep(0.1)
    assert keys == [(key0[0], key0[1] + 1), key1]
    assert ray.get(service.stats.remote())["replaced"] == 1
    out = ray.get(_query_each_replica.remote(list(QS)), timeout=120)
    assert [rep["doc_ids"] for rep in out["replicas"].values()] == [[expected[q] for q in QS]] * 2
