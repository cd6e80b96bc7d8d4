"""Micro-batching of concurrent retrieval calls (shared by the Ray actor and the HTTP app).

Rollouts issue one query per call, thousands at a time. A :class:`MicroBatcher`
collects the calls that arrive within ``max_wait_ms`` of the first one (or until
``max_batch`` queries are waiting), runs them as one batched ``retrieve`` (one
faiss search, one batched PPR) in a worker thread, and hands each caller its slice.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gta_verl.data.types import RetrievalResult


def error_results(queries: Sequence[Any], message: str, latency_ms: float = 0.0) -> list[RetrievalResult]:
    """One failed :class:`RetrievalResult` per query (never an exception)."""
    return [RetrievalResult(query=str(q), error=message, latency_ms=latency_ms) for q in queries]


class MicroBatcher:
    """Gather concurrent ``submit`` calls into batched calls of ``fn``.

    Args:
        fn: Batched retrieval, ``list[str] -> list[RetrievalResult]`` (blocking; run in a thread).
        validate: Per-query check raising ``ValueError``/``TypeError`` for a bad query;
            a bad query gets an error result and never reaches the batch.
        max_batch: Most queries per batched call.
        max_wait_ms: How long the first waiting call waits for company.
        history: Latency / batch-size samples kept for :meth:`stats`.
    """

    def __init__(
        self,
        fn: Callable[[list[str]], list[RetrievalResult]],
        validate: Callable[[str], Any] | None = None,
        max_batch: int = 256,
        max_wait_ms: float = 5.0,
        history: int = 10_000,
    ) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"need max_batch >= 1 and max_wait_ms >= 0, got {max_batch}, {max_wait_ms}")
        self.fn, self.validate = fn, validate
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1000.0
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self.n_requests = 0
        self.n_queries = 0
        self.n_errors = 0
        self._batch_sizes: deque[int] = deque(maxlen=history)
        self._latency_ms: deque[float] = deque(maxlen=history)

    def _ensure_worker(self) -> asyncio.Queue:
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.get_running_loop().create_task(self._loop())
        return self._queue

    async def submit(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Retrieve for ``queries`` inside the next batch; bad queries get error results."""
        t0 = time.perf_counter()
        self.n_requests += 1
        out: list[RetrievalResult | None] = [None] * len(queries)
        good: list[tuple[int, str]] = []
        for i, q in enumerate(queries):
            try:
                if self.validate is not None:
                    self.validate(q)
                good.append((i, q))
            except (ValueError, TypeError) as exc:
                out[i] = RetrievalResult(query=str(q), error=f"invalid query: {exc}")
                self.n_errors += 1
        if good:
            fut: asyncio.Future = asyncio.get_running_loop().create_future()
            await self._ensure_worker().put(([q for _, q in good], fut))
            results = await fut
            for (i, _), res in zip(good, results):
                out[i] = res
        self._latency_ms.append((time.perf_counter() - t0) * 1000)
        return [r for r in out if r is not None]

    async def _gather(self, queue: asyncio.Queue) -> list[tuple[list[str], asyncio.Future]]:
        items = [await queue.get()]
        size = len(items[0][0])
        deadline = time.perf_counter() + self.max_wait_s
        while size < self.max_batch:
            timeout = deadline - time.perf_counter()
            if timeout <= 0:
                break
            try:
                item = await asyncio.wait_for(queue.get(), timeout)
            except asyncio.TimeoutError:
                break
            items.append(item)
            size += len(item[0])
        while size < self.max_batch and not queue.empty():  # already waiting: free to take
            item = queue.get_nowait()
            items.append(item)
            size += len(item[0])
        return items

    async def _loop(self) -> None:
        queue = self._queue
        assert queue is not None
        while True:
            items = await self._gather(queue)
            flat = [q for qs, _ in items for q in qs]
            self._batch_sizes.append(len(flat))
            self.n_queries += len(flat)
            try:
                results = await asyncio.to_thread(self.fn, flat)
            except Exception as exc:  # noqa: BLE001 - every caller gets an error result instead
                self.n_errors += len(flat)
                results = error_results(flat, f"retrieval failed: {type(exc).__name__}: {exc}")
            pos = 0
            for qs, fut in items:
                if not fut.done():
                    fut.set_result(results[pos : pos + len(qs)])
                pos += len(qs)

    def stats(self) -> dict[str, Any]:
        """Request/query counts, batch sizes and p50/p95 latency (ms) over recent calls."""
        lat = np.asarray(self._latency_ms) if self._latency_ms else np.zeros(1)
        sizes = np.asarray(self._batch_sizes) if self._batch_sizes else np.zeros(1)
        return {
            "requests": self.n_requests,
            "queries": self.n_queries,
            "errors": self.n_errors,
            "batches": len(self._batch_sizes),
            "batch_size_mean": float(sizes.mean()),
            "batch_size_max": int(sizes.max()),
            "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p95": float(np.percentile(lat, 95)),
        }
