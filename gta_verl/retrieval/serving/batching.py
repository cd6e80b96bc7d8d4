"""Micro-batching of concurrent retrieval calls (shared by the Ray actor and the HTTP app).

Rollouts issue one query per call, thousands at a time. A :class:`MicroBatcher`
collects the calls that arrive within ``max_wait_ms`` of the first one (or until
``max_batch`` queries are waiting), runs them as one batched ``retrieve`` (one
faiss search, one batched PPR) in a worker thread, and hands each caller its slice.

Fairness: a batch never holds more than ``max_batch`` queries, however large one
request is. Each batch is filled round-robin: every waiting caller gets an equal
share of the batch (``max_batch // callers``, at least one query), leftovers go
round again, and callers served in a batch queue behind those that were not.
So a 400-query request occupies the worker for at most ``ceil(400 / max_batch)``
batches, interleaved with everybody else's, instead of one batch that outlasts
their timeouts. A batch also holds at most ``max_batch_chars`` query characters
(its first query always goes in), shared the same way: the cost of a batch
grows with its characters (encoder tokens, entity seeds), so many concurrent
requests of long queries cannot fill ``max_batch`` slots with 2,000-character
queries and hold the worker for a minute while single-query callers time out.
Requests with a ``topk`` (a ranking cut) are batched only with requests of the
same ``topk``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gta_verl.data.types import RetrievalResult

# 512 queries of 256 characters: far above what an agent sends (Search-R1 batches
# ~50-character queries), far below what stalls a CPU worker.
MAX_REQUEST_CHARS = 131_072
# ~160 MuSiQue questions (~100 characters), or 8 queries at the retriever's 2,000-character
# cut: a batch of long queries costs ~2 s on 2 idle cores, not the minute 256 of them take,
# and a caller waits at most about two batches (the running one and its own).
MAX_BATCH_CHARS = 16_384


class RequestTooLarge(ValueError):
    """A request whose queries hold more characters than the batcher accepts."""


def error_results(queries: Sequence[Any], message: str, latency_ms: float = 0.0) -> list[RetrievalResult]:
    """One failed :class:`RetrievalResult` per query (never an exception)."""
    return [RetrievalResult(query=str(q), error=message, latency_ms=latency_ms) for q in queries]


def request_chars(queries: Sequence[Any]) -> int:
    """Total characters of the string queries of one request."""
    return sum(len(q) for q in queries if isinstance(q, str))


@dataclass(eq=False)
class _Request:
    """One caller's queries in flight: ``next`` = first unscheduled, ``done`` = answered."""

    queries: list[str]
    topk: int | None
    fut: asyncio.Future
    costs: list[int] = field(default_factory=list)
    """Each query's characters as the retriever will use them (default: as sent)."""
    results: list[RetrievalResult | None] = field(default_factory=list)
    next: int = 0
    done: int = 0

    def __post_init__(self) -> None:
        self.results = [None] * len(self.queries)
        if not self.costs:
            self.costs = [len(q) for q in self.queries]

    @property
    def unscheduled(self) -> int:
        return len(self.queries) - self.next


Slice = tuple[_Request, int, int]


def plan_batch(active: deque[_Request], max_batch: int, max_chars: int | None = None) -> list[Slice]:
    """Take the next batch from ``active`` round-robin (pure scheduling; mutates ``next``/order).

    The batch serves the ``topk`` of the first waiting request. Each round gives
    every waiting request of that ``topk`` ``max(1, room // n)`` queries, and at
    most ``max(1, char_room // n)`` characters' worth of them (at least one query),
    until the batch holds ``max_batch`` queries or ``max_chars`` characters (its
    first query is always taken), or nobody waits. Afterwards ``active`` holds the
    requests that were not served first, then the served ones with queries left,
    so the next batch starts with whoever waited.

    Returns:
        ``[(request, start, end)]``, one contiguous slice per served request.
    """
    if not active:
        return []
    key = active[0].topk
    budget = max_chars if max_chars is not None else 1 << 62
    spans: dict[_Request, list[int]] = {}
    size = chars = 0
    full = False
    while not full and size < max_batch:
        same = [r for r in active if r.topk == key and r.unscheduled > 0]
        if not same:
            break
        share = max(1, (max_batch - size) // len(same))
        char_share = max(1, (budget - chars) // len(same))
        before = size
        for r in same:
            took = took_chars = 0
            while took < share and r.unscheduled > 0 and size < max_batch:
                c = r.costs[r.next]
                if size and chars + c > budget:
                    full = True  # the batch's work budget is spent
                    break
                if took and took_chars + c > char_share:
                    break
                spans.setdefault(r, [r.next, r.next])[1] += 1
                r.next += 1
                took, took_chars, size, chars = took + 1, took_chars + c, size + 1, chars + c
            if full or size == max_batch:
                break
        if size == before:
            break
    waiting = [r for r in active if r not in spans]
    again = [r for r in active if r in spans and r.unscheduled > 0]
    active.clear()
    active.extend(waiting + again)
    return [(r, s, e) for r, (s, e) in spans.items()]


class MicroBatcher:
    """Gather concurrent ``submit`` calls into fair, bounded batched calls of ``fn``.

    Args:
        fn: Batched retrieval, ``list[str] -> list[RetrievalResult]`` (blocking; run in a thread).
        validate: Per-query check raising ``ValueError``/``TypeError`` for a bad query;
            a bad query gets an error result and never reaches the batch.
        max_batch: Most queries per batched call (a larger request is split).
        max_wait_ms: How long the first waiting call waits for company.
        history: Latency / batch-size samples kept for :meth:`stats`.
        rank_fn: ``(list[str], k) -> list[RetrievalResult]`` for requests with a
            ``topk`` (``None``: such requests get error results).
        max_request_chars: Most query characters in one request (``None``: no cap).
        max_batch_chars: Most query characters in one batch (``None``: no cap); a
            longer single query still runs, alone.
        cost: The characters of a query as ``fn`` will use them (the retriever cuts at
            ``max_query_chars``), which the batch budget counts; default ``len``. Without it a
            query of 131,072 characters, costing what one of 2,000 does, filled a batch alone, so
            8 callers sending such queries made everyone wait 8 batches instead of one.
    """

    def __init__(
        self,
        fn: Callable[[list[str]], list[RetrievalResult]],
        validate: Callable[[str], Any] | None = None,
        max_batch: int = 256,
        max_wait_ms: float = 5.0,
        history: int = 10_000,
        rank_fn: Callable[[list[str], int], list[RetrievalResult]] | None = None,
        max_request_chars: int | None = MAX_REQUEST_CHARS,
        max_batch_chars: int | None = MAX_BATCH_CHARS,
        cost: Callable[[str], int] = len,
    ) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"need max_batch >= 1 and max_wait_ms >= 0, got {max_batch}, {max_wait_ms}")
        self.fn, self.rank_fn, self.validate = fn, rank_fn, validate
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1000.0
        self.max_request_chars, self.max_batch_chars = max_request_chars, max_batch_chars
        self.cost = cost
        self._active: deque[_Request] = deque()
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.n_requests = 0
        self.n_queries = 0
        self.n_errors = 0
        self._batch_sizes: deque[int] = deque(maxlen=history)
        self._latency_ms: deque[float] = deque(maxlen=history)
        # cumulative, for where the time goes (benchmarks/serving/served_throughput.py): seconds the
        # batches ran (worker thread hand-off included) and seconds the calls took from submit to answer
        self.run_s = 0.0
        self.latency_s = 0.0
        self.n_answered = 0

    def _executor(self) -> ThreadPoolExecutor:
        """The one thread every batch runs on.

        Batches run one at a time anyway; what a single thread adds is a single OpenMP team.
        torch (the encoder) keeps one thread team per calling thread, so batches handed to
        asyncio's default executor, which rotates over up to ``cpus + 4`` threads, left that
        many teams behind, each spinning after its batch against the next batch's team
        (`benchmarks/retrieval/inprocess.py`).
        """
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrieval-batch")
        return self._pool

    def check_size(self, queries: Sequence[Any]) -> None:
        """Raise :class:`RequestTooLarge` when ``queries`` exceed ``max_request_chars``."""
        n = request_chars(queries)
        if self.max_request_chars is not None and n > self.max_request_chars:
            raise RequestTooLarge(
                f"request holds {n} query characters > limit {self.max_request_chars}; "
                "split it into smaller requests"
            )

    def _ensure_worker(self) -> asyncio.Event:
        if self._arrived is None or self._worker is None or self._worker.done():
            self._arrived = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._loop())
        return self._arrived

    def _split_valid(self, queries: Sequence[str], out: list[RetrievalResult | None]) -> list[int]:
        good: list[int] = []
        for i, q in enumerate(queries):
            try:
                if self.validate is not None:
                    self.validate(q)
                good.append(i)
            except (ValueError, TypeError) as exc:
                out[i] = RetrievalResult(query=str(q), error=f"invalid query: {exc}")
                self.n_errors += 1
        return good

    async def submit(self, queries: Sequence[str], topk: int | None = None) -> list[RetrievalResult]:
        """Retrieve for ``queries`` (first ``topk`` of the ranking when given) in the next batches.

        Never raises for bad input: invalid queries, an oversized request or a
        failing ``fn`` give error results.
        """
        t0 = time.perf_counter()
        self.n_requests += 1
        try:
            self.check_size(queries)
            if topk is not None and self.rank_fn is None:
                raise ValueError("this retriever serves no topk requests")
        except ValueError as exc:
            self.n_errors += len(queries)
            return error_results(queries, str(exc))
        out: list[RetrievalResult | None] = [None] * len(queries)
        good = self._split_valid(queries, out)
        if good:
            kept = [queries[i] for i in good]
            costs = [self.cost(q) for q in kept]
            req = _Request(kept, topk, asyncio.get_running_loop().create_future(), costs)
            arrived = self._ensure_worker()
            self._active.append(req)
            arrived.set()
            try:
                results = await req.fut
            finally:  # a cancelled caller (timeout, disconnect) frees its unscheduled queries
                if req in self._active:
                    self._active.remove(req)
            for i, res in zip(good, results, strict=True):
                out[i] = res
        took = time.perf_counter() - t0
        self._latency_ms.append(took * 1000)
        self.latency_s += took
        self.n_answered += 1
        return [r for r in out if r is not None]

    def _waiting(self) -> int:
        return sum(r.unscheduled for r in self._active)

    async def _gather(self, arrived: asyncio.Event) -> None:
        """Wait for work, then up to ``max_wait_s`` for ``max_batch`` queries to be waiting."""
        while not self._active:
            arrived.clear()
            await arrived.wait()
        deadline = time.perf_counter() + self.max_wait_s
        while self._waiting() < self.max_batch:
            timeout = deadline - time.perf_counter()
            if timeout <= 0:
                break
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), timeout)
            except asyncio.TimeoutError:
                break

    async def _run(self, slices: list[Slice]) -> None:
        flat = [q for r, s, e in slices for q in r.queries[s:e]]
        topk = slices[0][0].topk
        self._batch_sizes.append(len(flat))
        self.n_queries += len(flat)
        t0 = time.perf_counter()
        try:
            loop = asyncio.get_running_loop()
            if topk is None:
                results = await loop.run_in_executor(self._executor(), self.fn, flat)
            else:
                assert self.rank_fn is not None
                results = await loop.run_in_executor(self._executor(), self.rank_fn, flat, topk)
            if len(results) != len(flat):
                raise RuntimeError(f"{len(results)} results for {len(flat)} queries")
        except Exception as exc:  # every caller gets an error result instead
            self.n_errors += len(flat)
            results = error_results(flat, f"retrieval failed: {type(exc).__name__}: {exc}")
        self.run_s += time.perf_counter() - t0
        pos = 0
        for r, s, e in slices:
            r.results[s:e] = results[pos : pos + e - s]
            r.done += e - s
            pos += e - s
            if r.done == len(r.queries) and not r.fut.done():
                r.fut.set_result(list(r.results))

    async def _loop(self) -> None:
        arrived = self._arrived
        assert arrived is not None
        while True:
            await self._gather(arrived)
            slices = plan_batch(self._active, self.max_batch, self.max_batch_chars)
            if slices:
                await self._run(slices)

    def stats(self) -> dict[str, Any]:
        """Request/query counts, batch sizes and p50/p95 latency (ms) over recent calls; since the start,
        the seconds batches ran (``run_s``) and the seconds calls took (``latency_s``, ``answered``
        calls)."""
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
            "run_s": self.run_s,
            "latency_s": self.latency_s,
            "answered": self.n_answered,
        }
