"""The Ray actor under a local Ray: micro-batching, restart after a kill, client timeouts."""

from __future__ import annotations

import asyncio
import time

import pytest

ray = pytest.importorskip("ray")

from gta_verl.retrieval.actor import get_or_create_retriever_actor
from gta_verl.retrieval.client import RayRetrieverClient
from gta_verl.retrieval.retriever import GraphRetriever

EMB = "gta_verl.retrieval.testing:HashEmbedder"
QS = [
    "Where was the president of France born?",
    "capital of Japan",
    "chancellor of Germany",
    "Mount Fuji height",
]


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gta_verl_test")
    yield
    ray.shutdown()


def test_actor_end_to_end(ray_session, toy_kb_dir, toy_kb, hash_embedder) -> None:
    actor = get_or_create_retriever_actor(
        toy_kb_dir, name="rt_test", num_cpus=0.5, embedder=EMB, max_wait_ms=5
    )
    same = get_or_create_retriever_actor(toy_kb_dir, name="rt_test", num_cpus=0.5, embedder=EMB)
    assert actor._actor_id == same._actor_id  # get_if_exists shares one actor
    local = GraphRetriever(toy_kb, hash_embedder)
    expected = {q: r.doc_ids for q, r in zip(QS, local.retrieve(QS))}
    client = RayRetrieverClient("rt_test", timeout_s=60, namespace="gta_verl_test")

    async def many() -> list:
        return await asyncio.gather(*(client.aretrieve([QS[i % len(QS)]]) for i in range(500)))

    answers = asyncio.run(many())
    assert len(answers) == 500
    for i, (res,) in enumerate(answers):
        assert res.ok, res.error
        assert res.doc_ids == expected[QS[i % len(QS)]]
    stats = ray.get(actor.stats.remote())
    assert stats["requests"] >= 500 and stats["batch_size_max"] > 1  # concurrent calls were batched
    assert stats["latency_ms_p95"] >= stats["latency_ms_p50"] > 0

    bad = client.retrieve(["", QS[0]])
    assert bad[0].error and bad[1].doc_ids == expected[QS[0]]

    # killed mid-stream → restarted by Ray (max_restarts=-1) and serving again
    async def during_kill() -> list:
        tasks = [asyncio.ensure_future(client.aretrieve([QS[0]])) for _ in range(20)]
        ray.kill(actor, no_restart=False)
        return await asyncio.gather(*tasks)

    mid = asyncio.run(during_kill())
    assert all(r.ok or r.error for (r,) in mid)  # answered or error result, never an exception
    deadline = time.time() + 120
    while True:
        (r,) = client.retrieve([QS[1]])
        if r.ok or time.time() > deadline:
            break
        time.sleep(0.5)
    assert r.ok and r.doc_ids == expected[QS[1]]


def test_client_timeout_and_missing_actor(ray_session, toy_kb_dir) -> None:
    handle = get_or_create_retriever_actor(
        toy_kb_dir, name="rt_slow", num_cpus=0.5, embedder=EMB, max_wait_ms=3000, max_batch=10_000
    )
    warm = RayRetrieverClient("rt_slow", timeout_s=60, namespace="gta_verl_test")
    assert warm.retrieve([QS[0]])[0].ok  # actor up (its batching window is 3 s)
    (r,) = RayRetrieverClient("rt_slow", timeout_s=0.3, namespace="gta_verl_test").retrieve([QS[0]])
    assert r.error and "timed out" in r.error
    (r,) = asyncio.run(
        RayRetrieverClient("rt_slow", timeout_s=0.3, namespace="gta_verl_test").aretrieve([QS[0]])
    )
    assert r.error and "timed out" in r.error
    (r,) = RayRetrieverClient("no_such_actor", timeout_s=1, namespace="gta_verl_test").retrieve([QS[0]])
    assert r.error and "failed" in r.error
    ray.kill(handle)
