"""Clients of the retrieval environment: Ray actor, in-process, HTTP.

All three implement :class:`~gta_verl.retrieval.base.Retriever` and
:class:`~gta_verl.retrieval.base.AsyncRetriever` and **never raise** for a
retrieval failure: a timeout, a dead actor or an HTTP error becomes a
:class:`RetrievalResult` with ``error`` set, which the agent loop shows to the
policy and counts, instead of an exception that would kill the rollout.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

from gta_verl.data.types import RetrievalHit, RetrievalResult
from gta_verl.retrieval.batching import error_results


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


class RayRetrieverClient:
    """Calls the named :class:`~gta_verl.retrieval.actor.GraphRetrieverActor`.

    Args:
        actor_name_or_handle: Actor name (looked up lazily, so a restarted or
            late-created actor is found) or an ``ActorHandle``.
        timeout_s: Per-call limit; past it the call returns error results.
        namespace: Ray namespace of a named actor.
    """

    def __init__(
        self, actor_name_or_handle: Any, timeout_s: float = 30.0, namespace: str | None = None
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self.namespace = namespace
        self._name = actor_name_or_handle if isinstance(actor_name_or_handle, str) else None
        self._handle = None if self._name else actor_name_or_handle

    def _actor(self) -> Any:
        if self._handle is None:
            import ray

            self._handle = ray.get_actor(self._name, namespace=self.namespace)
        return self._handle

    def _actor_sync(self, deadline: float) -> Any:
        # A just-created named actor becomes visible asynchronously: retry until the deadline.
        while True:
            try:
                return self._actor()
            except ValueError:
                if time.perf_counter() + 0.1 > deadline:
                    raise
                time.sleep(0.1)

    async def _actor_async(self, deadline: float) -> Any:
        while True:
            try:
                return self._actor()
            except ValueError:
                if time.perf_counter() + 0.1 > deadline:
                    raise
                await asyncio.sleep(0.1)

    def _failed(self, queries: Sequence[str], exc: BaseException, t0: float) -> list[RetrievalResult]:
        if self._name is not None:
            self._handle = None  # look the actor up again next time
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "GetTimeoutError" in type(exc).__name__:
            msg = f"retrieval timed out after {self.timeout_s:g} s"
        else:
            msg = f"retrieval failed: {_describe(exc)}"
        return error_results(queries, msg, (time.perf_counter() - t0) * 1000)

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Blocking call; never raises for retrieval failures."""
        import ray

        t0 = time.perf_counter()
        queries = list(queries)
        try:
            actor = self._actor_sync(t0 + self.timeout_s)
            remaining = max(0.001, self.timeout_s - (time.perf_counter() - t0))
            return ray.get(actor.retrieve.remote(queries), timeout=remaining)
        except Exception as exc:  # noqa: BLE001 - converted to error results by design
            return self._failed(queries, exc, t0)

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Awaitable call for agent loops; never raises for retrieval failures."""
        t0 = time.perf_counter()
        queries = list(queries)
        try:
            actor = await self._actor_async(t0 + self.timeout_s)
            remaining = max(0.001, self.timeout_s - (time.perf_counter() - t0))
            ref = actor.retrieve.remote(queries)
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), remaining)
        except Exception as exc:  # noqa: BLE001
            return self._failed(queries, exc, t0)


class InProcessRetrieverClient:
    """Wraps a retriever object living in this process (tests, synthesis validation).

    ``aretrieve`` runs the blocking retriever in a worker thread; calls are
    serialized by a lock (the encoder and faiss indexes are not shared safely).
    """

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever
        self._lock = threading.Lock()

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        t0 = time.perf_counter()
        queries = list(queries)
        with self._lock:
            try:
                return self.retriever.retrieve(queries)
            except (ValueError, TypeError):
                # one bad query must not fail the others: answer them one by one
                return [self._one(q) for q in queries]
            except Exception as exc:  # noqa: BLE001
                return error_results(
                    queries, f"retrieval failed: {_describe(exc)}", (time.perf_counter() - t0) * 1000
                )

    def _one(self, query: str) -> RetrievalResult:
        try:
            return self.retriever.retrieve([query])[0]
        except (ValueError, TypeError) as exc:
            return RetrievalResult(query=str(query), error=f"invalid query: {exc}")
        except Exception as exc:  # noqa: BLE001
            return RetrievalResult(query=str(query), error=f"retrieval failed: {_describe(exc)}")

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        return await asyncio.to_thread(self.retrieve, list(queries))


def results_from_response(queries: Sequence[str], payload: dict[str, Any]) -> list[RetrievalResult]:
    """Rebuild results from a ``/retrieve`` response (see :mod:`gta_verl.retrieval.http`)."""
    out = []
    metas = payload.get("meta") or [{} for _ in queries]
    for q, docs, meta in zip(queries, payload["result"], metas):
        hits = tuple(
            RetrievalHit(
                doc_id=d["document"]["id"],
                title=d["document"].get("title", ""),
                text=d["document"].get("text", d["document"].get("contents", "")),
                score=float(d.get("score", 0.0)),
                source=d.get("source", "dense"),
            )
            for d in docs
        )
        out.append(
            RetrievalResult(
                query=meta.get("query", q),
                hits=hits,
                flags=tuple(meta.get("flags", ())),
                error=meta.get("error"),
                latency_ms=float(meta.get("latency_ms", 0.0)),
            )
        )
    if len(out) != len(queries):
        raise ValueError(f"server answered {len(out)} results for {len(queries)} queries")
    return out


class HTTPRetrieverClient:
    """Client of ``gta-verl retriever serve`` (httpx), sync and async.

    Args:
        url: Server base URL, e.g. ``http://127.0.0.1:8000``.
        timeout_s: Per-call limit.
        topk: Sent as ``topk`` (``None`` = the server's R(q) union).
    """

    def __init__(self, url: str, timeout_s: float = 30.0, topk: int | None = None) -> None:
        self.url = url.rstrip("/") + "/retrieve"
        self.timeout_s = timeout_s
        self.topk = topk

    def _body(self, queries: list[str]) -> dict[str, Any]:
        return {"queries": queries, "topk": self.topk, "return_scores": True}

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        import httpx

        t0, queries = time.perf_counter(), list(queries)
        try:
            resp = httpx.post(self.url, json=self._body(queries), timeout=self.timeout_s)
            resp.raise_for_status()
            return results_from_response(queries, resp.json())
        except Exception as exc:  # noqa: BLE001
            return error_results(
                queries, f"retrieval failed: {_describe(exc)}", (time.perf_counter() - t0) * 1000
            )

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        import httpx

        t0, queries = time.perf_counter(), list(queries)
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                resp = await client.post(self.url, json=self._body(queries))
            resp.raise_for_status()
            return results_from_response(queries, resp.json())
        except Exception as exc:  # noqa: BLE001
            return error_results(
                queries, f"retrieval failed: {_describe(exc)}", (time.perf_counter() - t0) * 1000
            )
