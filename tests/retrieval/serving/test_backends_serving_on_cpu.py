"""``dense`` and ``bm25`` served as the graph backend is: over HTTP ``/retrieve``, by the Ray service,
from node-shared arrays; and the service spec that carries the typed configs to the replicas."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gta_verl.retrieval.backends import open_kb_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.section import RetrieverSection
from gta_verl.retrieval.serving.clients import HTTPRetrieverClient, RayRetrieverClient
from gta_verl.retrieval.serving.config import ServingConfig
from gta_verl.retrieval.serving.service import RetrieverSpec
from tests.retrieval.serving.loopback import free_port, serving, uvicorn_server

EMB = "gta_verl.testing.toy_kb:HashEmbedder"
QS = ["Where was Olaf Scholz born? Osnabrueck", "capital of Japan", "Somme river", "Mount Fuji height"]
NON_GRAPH = ("dense", "bm25")


# ---------------------------------------------------------------- the spec
def test_spec_resolves_kb_dir_once(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    spec = RetrieverSection.from_mapping({"kb_dir": "kb", "backend": "bm25", "num_cpus": 2}).spec()
    assert spec.kb_dir == str(tmp_path / "kb")  # absolute: a Ray worker's cwd is not the driver's
    assert spec.config.backend == "bm25" and isinstance(spec.config, RetrieverConfig)
    assert spec.serving == ServingConfig(num_cpus=2.0)


def test_spec_carries_the_sections_typed_configs() -> None:
    section = RetrieverSection.from_mapping({"kb_dir": "/kb", "backend": "dense", "k_dense": 5})
    spec = section.spec()
    assert spec.config is section.retrieval and spec.serving is section.serving  # no change of form
    assert spec.name == section.actor_name
    with pytest.raises(ValueError, match="gta.retriever.kb_dir is not set"):
        RetrieverSection().spec()


def test_spec_accepts_mappings_of_its_configs() -> None:
    spec = RetrieverSpec(kb_dir="/kb", config={"backend": "bm25"}, serving={"num_cpus": 0.5})
    assert spec.config == RetrieverConfig(backend="bm25") and spec.serving == ServingConfig(num_cpus=0.5)
    with pytest.raises(ValueError, match="valid keys"):
        RetrieverSpec(kb_dir="/kb", config={"backnd": "bm25"})


# ---------------------------------------------------------------- node-shared arrays
@pytest.mark.parametrize("backend", NON_GRAPH)
def test_shared_loader_serves_every_backend(backend, toy_kb_dir, toy_kb, hash_embedder, tmp_path) -> None:
    from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever

    cfg = RetrieverConfig(backend=backend)
    shared = load_shared_retriever(toy_kb_dir, cfg, hash_embedder, cache_root=tmp_path)
    local = open_kb_retriever(toy_kb, cfg, hash_embedder)
    assert shared.config.backend == backend
    assert [r.doc_ids for r in shared.retrieve(QS)] == [r.doc_ids for r in local.retrieve(QS)]
    assert not any(tmp_path.iterdir())  # only the graph backend derives arrays to cache


# ---------------------------------------------------------------- HTTP /retrieve
@pytest.fixture(scope="module", params=NON_GRAPH)
def served(request, toy_kb, hash_embedder):
    from gta_verl.retrieval.serving.http import create_app

    retriever = open_kb_retriever(toy_kb, RetrieverConfig(backend=request.param), hash_embedder)
    port = free_port()
    with serving(uvicorn_server(create_app(retriever, max_wait_ms=2), port), port) as url:
        yield url, retriever


def test_http_retrieve_answers_as_in_process(served) -> None:
    url, retriever = served
    got = HTTPRetrieverClient(url, timeout_s=30).retrieve(QS)
    expected = retriever.retrieve(QS)
    assert [r.doc_ids for r in got] == [r.doc_ids for r in expected]
    assert [[h.source for h in r.hits] for r in got] == [[h.source for h in r.hits] for r in expected]
    body = httpx.post(url + "/retrieve", json={"queries": QS[:1], "topk": 2, "return_scores": True}).json()
    assert [d["doc_id"] for d in body["result"][0]] == retriever.rank(QS[:1], 2)[0].doc_ids
    assert httpx.get(url + "/health").json()["backend"] == retriever.config.backend


# ---------------------------------------------------------------- the Ray service
def test_ray_service_serves_dense_and_bm25(toy_kb_dir, toy_kb, hash_embedder) -> None:
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="gta_be")
    try:
        for backend in NON_GRAPH:
            cfg = RetrieverConfig(backend=backend)
            spec = RetrieverSpec(
                kb_dir=str(toy_kb_dir),
                config=cfg,
                serving=ServingConfig(num_cpus=0.25),
                name=f"rt_{backend}",
                embedder=EMB,
            )
            handle = spec.create()
            assert ray.get(handle.health.remote())["status"] == "ok"
            client = RayRetrieverClient(handle, timeout_s=120, name=spec.name)
            got = asyncio.run(client.aretrieve(QS))
            expected = open_kb_retriever(toy_kb, cfg, hash_embedder).retrieve(QS)
            assert [r.doc_ids for r in got] == [r.doc_ids for r in expected], backend
            assert ray.get(handle.stats.remote())["config"]["backend"] == backend
            ray.get(handle.shutdown.remote())
            ray.kill(handle)
    finally:
        ray.shutdown()
