"""In-process and HTTP clients: same results as the retriever, failures become error results."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from gta_verl.retrieval.base import AsyncRetriever, Retriever
from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.serving.clients import HTTPRetrieverClient, InProcessRetrieverClient
from tests.retrieval.serving.loopback import free_port, serving, uvicorn_server

QS = ["Where was the president of France born?", "capital of Japan"]


def test_in_process_client(retriever: GraphRetriever) -> None:
    client = InProcessRetrieverClient(retriever)
    assert isinstance(client, Retriever) and isinstance(client, AsyncRetriever)
    expected = [r.doc_ids for r in retriever.retrieve(QS)]
    assert [r.doc_ids for r in client.retrieve(QS)] == expected
    assert [r.doc_ids for r in asyncio.run(client.aretrieve(QS))] == expected
    mixed = client.retrieve([QS[0], "  "])
    assert mixed[0].ok and mixed[0].doc_ids == expected[0]
    assert not mixed[1].ok and "empty" in mixed[1].error


class _CountingRetriever:
    """Records the batches the client hands the retriever; a slow first batch lets others queue."""

    def __init__(self, inner: GraphRetriever) -> None:
        self.inner, self.batches = inner, []
        self.started = threading.Event()

    def retrieve(self, queries):
        self.batches.append(list(queries))
        if len(self.batches) == 1:
            self.started.set()
            time.sleep(0.2)  # the other callers arrive while this batch runs
        return self.inner.retrieve(queries)


def test_in_process_client_batches_concurrent_calls(retriever: GraphRetriever) -> None:
    queries = [QS[0], QS[1], "  ", "who wrote Hamlet", QS[0], "river through Paris"]
    counting = _CountingRetriever(retriever)
    client = InProcessRetrieverClient(counting)

    async def main():
        first = asyncio.create_task(client.aretrieve(queries[:1]))
        await asyncio.to_thread(counting.started.wait)
        rest = [asyncio.create_task(client.aretrieve([q])) for q in queries[1:]]
        return [await first] + [await t for t in rest]

    results = [r[0] for r in asyncio.run(main())]
    # the first call runs alone; the five that arrived meanwhile share the next batch, in arrival order
    assert counting.batches[0] == queries[:1] and counting.batches[1] == queries[1:]
    # the blank query fails alone (the batch falls back to one-by-one), every other answer is retrieve's
    assert not results[2].ok and "empty" in results[2].error
    for q, r in zip(queries, results, strict=True):
        if q.strip():
            assert r.ok and r.doc_ids == retriever.retrieve([q])[0].doc_ids


@pytest.fixture(scope="module")
def server_url(retriever: GraphRetriever):
    from gta_verl.retrieval.serving.http import create_app

    port = free_port()
    with serving(uvicorn_server(create_app(retriever, max_wait_ms=2), port), port) as url:
        yield url


def test_http_search_r1_protocol(server_url: str, retriever: GraphRetriever) -> None:
    resp = httpx.post(
        server_url + "/retrieve", json={"queries": QS, "topk": 2, "return_scores": True}, timeout=30
    )
    assert resp.status_code == 200
    body = resp.json()
    assert len(body["result"]) == 2 and all(len(docs) == 2 for docs in body["result"])
    doc = body["result"][0][0]
    assert (
        set(doc["document"]) >= {"id", "contents"}
        and "score" in doc
        and doc["source"] in ("graph", "dense", "both")
    )
    assert [d["doc_id"] for d in body["result"][0]] == retriever.rank(QS, 2)[0].doc_ids
    health = httpx.get(server_url + "/health", timeout=5).json()
    assert health["status"] == "ok" and health["n_docs"] == 10


def test_http_client_round_trip_and_limits(server_url: str, retriever: GraphRetriever) -> None:
    client = HTTPRetrieverClient(server_url, timeout_s=30)
    expected = retriever.retrieve(QS)
    got = client.retrieve(QS)
    assert [r.doc_ids for r in got] == [r.doc_ids for r in expected]
    assert [[h.source for h in r.hits] for r in got] == [[h.source for h in r.hits] for r in expected]
    got_async = asyncio.run(client.aretrieve(QS + ["   "]))
    assert got_async[0].doc_ids == expected[0].doc_ids and got_async[2].error
    too_many = httpx.post(server_url + "/retrieve", json={"queries": ["q"] * 10_000}, timeout=30)
    assert too_many.status_code in (413, 422)
    assert httpx.post(server_url + "/retrieve", json={"queries": []}, timeout=30).status_code == 422


def test_http_client_failure_is_error_result() -> None:
    client = HTTPRetrieverClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    (r,) = client.retrieve(["anything"])
    assert r.error and "failed" in r.error and not r.hits
    (r,) = asyncio.run(client.aretrieve(["anything"]))
    assert r.error
