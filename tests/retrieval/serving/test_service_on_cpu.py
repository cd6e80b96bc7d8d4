"""The Ray actor under a local Ray: micro-batching, restart after a kill, client timeouts."""

from __future__ import annotations

import asyncio
import time

import pytest

from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.serving.clients import RayRetrieverClient
from gta_verl.retrieval.serving.service import RetrieverSpec, get_or_create_retriever_actor

ray = pytest.importorskip("ray")

EMB = "gta_verl.testing.toy_kb:HashEmbedder"
QS = [
    "Where was the president of France born?",
    "capital of Japan",
    "chancellor of Germany",
    "Mount Fuji height",
]


@pytest.fixture(scope="module")
def ray_session():
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gta_verl_test"
    )
    yield
    ray.shutdown()


def test_actor_end_to_end(ray_session, toy_kb_dir, toy_kb, hash_embedder) -> None:
    actor = get_or_create_retriever_actor(
        toy_kb_dir, name="rt_test", num_cpus=0.5, embedder=EMB, max_wait_ms=5
    )
    same = get_or_create_retriever_actor(toy_kb_dir, name="rt_test", num_cpus=0.5, embedder=EMB)
    assert actor._actor_id == same._actor_id  # get_if_exists shares one actor
    local = GraphRetriever(toy_kb, hash_embedder)
    expected = {q: r.doc_ids for q, r in zip(QS, local.retrieve(QS), strict=True)}
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


# ---------------------------------------------------------------- kills are not permanent
def _service(toy_kb_dir, name: str, **kw):
    from gta_verl.retrieval.serving.config import ServingConfig

    serving = ServingConfig(num_replicas=kw.pop("num_replicas", 1), monitor_interval_s=0.2)
    handle = get_or_create_retriever_actor(
        toy_kb_dir, name=name, num_cpus=0.25, embedder=EMB, namespace="gta_verl_test", serving=serving, **kw
    )
    ray.get(handle.health.remote())
    return handle


def _spec(kb_dir, name: str) -> RetrieverSpec:
    """The spec a client holds to recreate the test service ``name`` over ``kb_dir``."""
    return RetrieverSpec(
        kb_dir=str(kb_dir), name=name, namespace="gta_verl_test", embedder=EMB, serving={"num_cpus": 0.25}
    )


def test_plain_kill_fails_fast_or_is_recreated(ray_session, toy_kb_dir, toy_kb, hash_embedder) -> None:
    """ray.kill(handle) defaults to no_restart=True, which overrides max_restarts.

    A client that may not recreate the service says it is gone instead of waiting out
    its deadline on every call; a client holding the spec recreates it.
    """

    handle = _service(toy_kb_dir, "rt_plain_kill")
    spec = _spec(toy_kb_dir, "rt_plain_kill")
    plain = RayRetrieverClient("rt_plain_kill", timeout_s=300, namespace="gta_verl_test")
    allowed = RayRetrieverClient(
        "rt_plain_kill", timeout_s=120, namespace="gta_verl_test", recreate=spec.create
    )
    expected = GraphRetriever(toy_kb, hash_embedder).retrieve([QS[2]])[0].doc_ids
    assert plain.retrieve([QS[2]])[0].doc_ids == expected
    assert allowed.retrieve([QS[2]])[0].doc_ids == expected
    ray.get(handle.shutdown.remote())
    ray.kill(handle)  # permanent
    for _ in range(2):  # at once, not after the 300 s deadline: a killed-for-good actor never returns
        (r,) = plain.retrieve([QS[2]])
        assert r.error is not None and "gone for good" in r.error, r.error
    assert plain.metrics["errors"] == 2
    (r,) = allowed.retrieve([QS[2]])
    assert r.ok, r.error
    assert r.doc_ids == expected
    assert allowed.metrics["recreated"] == 1
    assert plain.retrieve([QS[2]])[0].doc_ids == expected  # the plain client finds the recreated one
    again = ray.get_actor("rt_plain_kill", namespace="gta_verl_test")
    ray.get(again.shutdown.remote())
    ray.kill(again)


def test_restart_window_retried_and_dead_replica_replaced(
    ray_session, toy_kb_dir, toy_kb, hash_embedder
) -> None:
    """Calls in flight while the replica restarts are all answered; a replica killed for good is replaced."""
    handle = _service(toy_kb_dir, "rt_restart")
    client = RayRetrieverClient("rt_restart", timeout_s=120, namespace="gta_verl_test")
    expected = GraphRetriever(toy_kb, hash_embedder).retrieve([QS[1]])[0].doc_ids
    ((key, replica),) = ray.get(handle.replicas.remote())["replicas"]

    async def during_kill(no_restart: bool) -> list:
        assert (await client.aretrieve([QS[1]]))[0].ok
        tasks = [asyncio.ensure_future(client.aretrieve([QS[1]])) for _ in range(40)]
        await asyncio.sleep(0)
        ray.kill(replica, no_restart=no_restart)
        return await asyncio.gather(*tasks)

    answers = asyncio.run(during_kill(no_restart=False))
    # the client retries through the restart: no call sees ActorUnavailable/ActorDied
    assert [r.error for (r,) in answers] == [None] * 40
    assert all(r.doc_ids == expected for (r,) in answers)
    answers = asyncio.run(during_kill(no_restart=True))  # gone for good: the service starts a new one
    assert [r.error for (r,) in answers] == [None] * 40
    assert all(r.doc_ids == expected for (r,) in answers)
    ((new_key, _),) = ray.get(handle.replicas.remote())["replicas"]
    assert new_key == (key[0], key[1] + 1)  # same slot, next generation
    assert ray.get(handle.stats.remote())["replaced"] == 1
    ray.get(handle.shutdown.remote())
    ray.kill(handle)


def test_health_names_unreadable_kb_dir(ray_session, tmp_path) -> None:
    """A replica whose node cannot read kb_dir fails the health call loudly (not per search)."""
    from dataclasses import asdict

    from gta_verl.retrieval.serving.service import RetrieverService

    missing = tmp_path / "kb_not_on_this_node"
    with pytest.raises(FileNotFoundError, match="kb_not_on_this_node"):
        get_or_create_retriever_actor(missing, name="rt_bad", namespace="gta_verl_test")
    # the creator's node has it but the replica's node does not: create the service past the local check
    spec = _spec(missing, "rt_bad")
    svc = ray.remote(RetrieverService).options(num_cpus=0).remote(asdict(spec))
    with pytest.raises(ray.exceptions.RayTaskError, match="could not load kb_dir=.*kb_not_on_this_node"):
        ray.get(svc.health.remote(timeout_s=120))
    (r,) = RayRetrieverClient(svc, timeout_s=120).retrieve([QS[0]])
    assert r.error and "kb_not_on_this_node" in r.error  # callers get the reason too, at once
    ray.kill(svc)


@ray.remote(num_cpus=0)
class _Squatter:
    """Stands in for a dead service's replica that Ray has not torn down yet."""

    def ping(self) -> bool:
        return True


def test_new_service_starts_while_the_old_ones_replica_names_are_taken(
    ray_session, toy_kb_dir, toy_kb, hash_embedder
) -> None:
    """A restarted/recreated service must not collide with its predecessor's replica names.

    Ray cleans up a dead service's replicas asynchronously, so a recreated service can find
    "<name>.replica0.g0" still registered to its predecessor's replica; reusing that name makes
    its __init__ die with ActorAlreadyExistsError and the retriever never recovers. Here the first
    replica's names of several generations are taken beforehand.
    """
    squatters = [
        _Squatter.options(name=f"rt_squat.replica0.g{g}", namespace="gta_verl_test").remote()
        for g in range(3)
    ]
    ray.get([s.ping.remote() for s in squatters])
    handle = _service(toy_kb_dir, "rt_squat")
    client = RayRetrieverClient("rt_squat", timeout_s=120, namespace="gta_verl_test")
    (res,) = client.retrieve([QS[2]])
    assert res.error is None
    assert res.doc_ids == GraphRetriever(toy_kb, hash_embedder).retrieve([QS[2]])[0].doc_ids
    ray.get(handle.shutdown.remote())
    ray.kill(handle)
    for s in squatters:
        ray.kill(s)


def test_service_stays_on_one_kb_version_after_a_rewrite(ray_session, tmp_path, hash_embedder) -> None:
    """``kb add`` rewrites a served directory and one replica restarts: the service moves as a whole.

    Unpinned, one replica answers from the old tables and the restarted one from the new (about half
    the calls each) and neither health nor stats says which. Both report the manifest digest, the
    service routes only to the pinned version, and replicas off it are replaced.
    """
    from gta_verl.kb.store import manifest_digest, save_kb
    from gta_verl.testing.toy_kb import make_toy_kb

    old, new = make_toy_kb(hash_embedder), make_toy_kb(hash_embedder, with_triples=False)
    kb_dir = tmp_path / "kb"
    old_digest = manifest_digest(save_kb(old, kb_dir).manifest)
    handle = _service(kb_dir, "rt_version", num_replicas=2)
    assert ray.get(handle.health.remote())["kb_digest"] == old_digest
    new_digest = manifest_digest(save_kb(new, kb_dir).manifest)
    assert new_digest != old_digest
    (_, replica), _ = ray.get(handle.replicas.remote())["replicas"]
    ray.kill(replica, no_restart=False)  # Ray restarts it in place: its constructor loads the new tables
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        stats = ray.get(handle.stats.remote())
        digests = {r.get("kb_digest") for r in stats["per_replica"]}
        if stats["kb_digest"] == new_digest and digests == {new_digest} and stats["replicas"] == 2:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"service did not converge on {new_digest}: {stats['kb_digest']}, {digests}")
    client = RayRetrieverClient("rt_version", timeout_s=120, namespace="gta_verl_test")
    want = GraphRetriever(new, hash_embedder).retrieve([QS[0]])[0].doc_ids
    answers = [client.retrieve([QS[0]])[0] for _ in range(20)]
    assert [r.doc_ids for r in answers] == [want] * 20
    ray.get(handle.shutdown.remote())
    ray.kill(handle)
