"""Clients of the retrieval environment: Ray actor, in-process, HTTP.

All three implement :class:`~gta_verl.retrieval.base.Retriever` and
:class:`~gta_verl.retrieval.base.AsyncRetriever` and **never raise** for a
retrieval failure: a timeout, a dead actor or an HTTP error becomes a
:class:`RetrievalResult` with ``error`` set, which the agent loop shows to the
policy and counts, instead of an exception that would kill the rollout.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from gta_verl.data.types import RetrievalHit, RetrievalResult
from gta_verl.retrieval.serving.batching import MicroBatcher, error_results


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


class RetrieverGone(RuntimeError):
    """The named retriever is dead for good and this client may not recreate it."""


class RayRetrieverClient:
    """Calls the named retriever service, balancing over its replicas itself.

    Every call returns within ``timeout_s``: answered, or error results that the
    agent loop shows to the policy and counts (``metrics`` counts them here too).
    Transport errors are retried: first at once on another replica, then with
    exponential backoff until the deadline, which covers a replica or service
    restarting (``ActorUnavailableError``). A service killed for good
    (``ray.kill(handle)``, whose default ``no_restart=True`` overrides
    ``max_restarts``) is recreated when the client has a ``recreate`` factory, and
    otherwise fails fast with a message saying so instead of waiting out every
    call's deadline.

    Args:
        actor_name_or_handle: Service name (looked up lazily) or an ``ActorHandle``
            of the service or of a single :class:`~gta_verl.retrieval.serving.replica.RetrieverReplica`.
        timeout_s: Per-call limit; past it the call returns error results.
        namespace: Ray namespace of a named actor.
        recreate: Zero-argument factory returning a new service handle, e.g.
            ``RetrieverSpec(...).create``; ``None`` = never recreate.
        lookup_grace_s: How long a name never seen before may take to appear.
        seed: Seed of the replica choice.
        name: The service's name when a handle is given (to find it again after a restart).
    """

    BACKOFF_S = (0.05, 1.0)

    def __init__(
        self,
        actor_name_or_handle: Any,
        timeout_s: float = 30.0,
        namespace: str | None = None,
        recreate: Callable[[], Any] | None = None,
        lookup_grace_s: float = 2.0,
        seed: int | None = None,
        name: str | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self.namespace = namespace
        self.recreate = recreate
        self.lookup_grace_s = lookup_grace_s
        by_name = isinstance(actor_name_or_handle, str)
        self._name: str | None = actor_name_or_handle if by_name else name
        self._service: Any = None if by_name else actor_name_or_handle  # a Ray actor handle, None until found
        self._seen = self._service is not None
        self._version = -1
        self._replicas: list[tuple[Any, Any]] = []
        self._out: dict[Any, int] = {}
        self._rng = random.Random(seed)
        self._sync_loop: asyncio.AbstractEventLoop | None = None
        self._sync_lock = threading.Lock()
        self.metrics: Counter[str] = Counter()

    # ------------------------------------------------------------ service lookup
    def _label(self) -> str:
        return f"retriever {self._name or 'actor'!r} (namespace {self.namespace!r})"

    def _lookup(self, name: str, deadline: float) -> Any:
        """The service handle by ``name``; recreate or raise :class:`RetrieverGone` when absent."""
        import ray

        t_end = min(deadline, time.perf_counter() + (0 if self._seen else self.lookup_grace_s))
        while True:
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
                self._seen = True
                return handle
            except ValueError:
                if self.recreate is not None:
                    self.metrics["recreated"] += 1
                    self._seen = True
                    return self.recreate()
                if time.perf_counter() + 0.1 > t_end:
                    break
                time.sleep(0.1)
        if self._seen:
            raise RetrieverGone(
                f"{self._label()} is gone for good (killed with ray.kill(no_restart=True) or "
                "its creator exited) and this client may not recreate it; recreate it with "
                "gta_verl.retrieval.serving.service.get_or_create_retriever_actor"
            )
        raise RetrieverGone(
            f"no {self._label()}: the trainer creates it before the first rollout "
            "(gta_verl.retrieval.serving.service.get_or_create_retriever_actor)"
        )

    async def _refresh(self, deadline: float) -> None:
        """Fetch the ready replicas from the service (or treat a plain replica as the only one)."""
        if self._service is None:
            if self._name is None:
                raise RetrieverGone(f"{self._label()} handle is dead and this client has no name to look up")
            self._service = await asyncio.to_thread(self._lookup, self._name, deadline)
        service = self._service
        if not hasattr(service, "replicas"):  # a single replica's handle
            self._replicas, self._version = [(("single", 0), service)], 0
            return
        remaining = max(0.001, deadline - time.perf_counter())
        try:
            info = await asyncio.wait_for(asyncio.wrap_future(service.replicas.remote().future()), remaining)
        except Exception as exc:
            from gta_verl.retrieval.serving.routing import is_dead_for_good

            if is_dead_for_good(exc):  # new calls to a restarting actor wait; dead ones fail at once
                self._service = None
                self._replicas = []
                if self._name is None and self.recreate is not None:
                    self.metrics["recreated"] += 1
                    self._service = await asyncio.to_thread(self.recreate)
            raise
        if info.get("error"):
            raise RetrieverGone(f"{self._label()} cannot serve: {info['error']}")
        self._version, self._replicas = info["version"], list(info["replicas"])

    async def _pick(self, deadline: float, tried: set[Any]) -> tuple[Any, Any] | None:
        if not self._replicas or all(k in tried for k, _ in self._replicas):
            await self._refresh(deadline)
        live = [(k, h) for k, h in self._replicas if k not in tried] or self._replicas
        if not live:
            return None  # the service is up but no replica is ready yet
        from gta_verl.retrieval.serving.routing import pick_replica

        return live[pick_replica([self._out.get(k, 0) for k, _ in live], self._rng)]

    def _on_transport_error(self, key: Any) -> None:
        self._replicas = [(k, h) for k, h in self._replicas if k != key]
        service = self._service
        if service is not None and hasattr(service, "report_failure") and key != ("single", 0):
            try:
                service.report_failure.remote(key)
            except Exception:  # the service itself is down: found at the next refresh
                pass

    # ------------------------------------------------------------ calls
    async def _call(self, queries: list[str], deadline: float) -> list[RetrievalResult]:
        from gta_verl.retrieval.serving.routing import is_actor_error

        tried: set[Any] = set()
        backoff, switched = self.BACKOFF_S[0], False
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise asyncio.TimeoutError
            key = None
            try:
                picked = await self._pick(deadline, tried)
                if picked is not None:
                    key, handle = picked
                    self._out[key] = self._out.get(key, 0) + 1
                    ref = handle.retrieve.remote(queries)
                    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), remaining)
            except Exception as exc:
                if not is_actor_error(exc):
                    raise
                self.metrics["transport_errors"] += 1
                if key is not None:
                    tried.add(key)
                    self._on_transport_error(key)
                    if not switched and any(k not in tried for k, _ in self._replicas):
                        switched = True  # a call in flight on a dead replica: once more elsewhere, now
                        self.metrics["retries"] += 1
                        continue
            finally:
                if key is not None:
                    self._out[key] -= 1
            self.metrics["retries"] += 1
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.perf_counter())))
            backoff = min(backoff * 2, self.BACKOFF_S[1])

    def _failed(self, queries: Sequence[str], exc: BaseException, t0: float) -> list[RetrievalResult]:
        self.metrics["errors"] += 1
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or "GetTimeoutError" in type(exc).__name__:
            msg = f"retrieval timed out after {self.timeout_s:g} s"
        else:
            msg = f"retrieval failed: {_describe(exc)}"
        return error_results(queries, msg, (time.perf_counter() - t0) * 1000)

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Awaitable call for agent loops; never raises for retrieval failures."""
        t0 = time.perf_counter()
        queries = list(queries)
        self.metrics["calls"] += 1
        try:
            return await self._call(queries, t0 + self.timeout_s)
        except Exception as exc:  # converted to error results by design
            return self._failed(queries, exc, t0)

    def _loop(self) -> asyncio.AbstractEventLoop:
        with self._sync_lock:
            if self._sync_loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="ray-retriever-client", daemon=True).start()
                self._sync_loop = loop
            return self._sync_loop

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Blocking call (runs :meth:`aretrieve` on the client's own loop); never raises."""
        return asyncio.run_coroutine_threadsafe(self.aretrieve(queries), self._loop()).result()

    def __getstate__(self) -> dict[str, Any]:  # handles pickle; loops, locks and live routing do not
        state = {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("_sync_loop", "_sync_lock", "_replicas", "_out", "_version")
        }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._sync_loop, self._sync_lock = None, threading.Lock()
        self._replicas, self._out, self._version = [], {}, -1


class InProcessRetrieverClient:
    """Wraps a retriever object living in this process (tests, evaluation, synthesis validation).

    ``retrieve`` calls the blocking retriever under a lock (the encoder and faiss
    indexes are not shared safely). ``aretrieve`` micro-batches: calls that arrive
    while a batch runs wait together and go in as the next batch (a
    :class:`~gta_verl.retrieval.serving.batching.MicroBatcher` per event loop, no added wait),
    as the Ray actor does. Concurrent rollouts each sending one query then share one
    encoder forward and one batched PPR instead of queueing one by one behind the lock:
    the encoder's cost per query falls with the batch (MiniLM, this machine: ≈ 16 ms
    alone, ≈ 2 ms in a batch of 256). Every result equals what ``retrieve`` gives.

    Args:
        retriever: Anything with ``retrieve(queries) -> list[RetrievalResult]``.
        max_batch: Queries per batch of concurrent ``aretrieve`` calls.
    """

    def __init__(self, retriever: Any, max_batch: int = 256) -> None:
        self.retriever = retriever
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, MicroBatcher] = (
            weakref.WeakKeyDictionary()
        )

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        t0 = time.perf_counter()
        queries = list(queries)
        with self._lock:
            try:
                return self.retriever.retrieve(queries)
            except (ValueError, TypeError):
                # one bad query must not fail the others: answer them one by one
                return [self._one(q) for q in queries]
            except Exception as exc:
                return error_results(
                    queries, f"retrieval failed: {_describe(exc)}", (time.perf_counter() - t0) * 1000
                )

    def _one(self, query: str) -> RetrievalResult:
        try:
            return self.retriever.retrieve([query])[0]
        except (ValueError, TypeError) as exc:
            return RetrievalResult(query=str(query), error=f"invalid query: {exc}")
        except Exception as exc:
            return RetrievalResult(query=str(query), error=f"retrieval failed: {_describe(exc)}")

    def batcher(self) -> MicroBatcher:
        """The micro-batcher of the running event loop (its worker task lives on that loop)."""
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            # no size limits: a caller in this process may send what `retrieve` accepts
            batcher = MicroBatcher(
                self.retrieve,
                max_batch=self.max_batch,
                max_wait_ms=0.0,
                max_request_chars=None,
                max_batch_chars=None,
            )
            self._batchers[loop] = batcher
        return batcher

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        return await self.batcher().submit(list(queries))


def results_from_response(queries: Sequence[str], payload: dict[str, Any]) -> list[RetrievalResult]:
    """Rebuild results from a ``/retrieve`` response (see :mod:`gta_verl.retrieval.serving.http`)."""
    out = []
    metas = payload.get("meta") or [{} for _ in queries]
    for q, docs, meta in zip(queries, payload["result"], metas, strict=True):
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
        except Exception as exc:
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
        except Exception as exc:
            return error_results(
                queries, f"retrieval failed: {_describe(exc)}", (time.perf_counter() - t0) * 1000
            )
