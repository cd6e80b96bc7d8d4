"""The micro-batcher's per-batch character budget (long queries from concurrent requests).

The per-request character cap alone let one caller send several capped requests of long
queries at once; round-robin by query count then filled a 256-slot batch with 2,000-
character queries (a minute of CPU on 2 cores) and every single-query caller behind it
passed its 30 s timeout (benchmarks/serving/stress.py, stall section).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.serving.batching import MicroBatcher, _Request, plan_batch


class Recorder:
    """A batched ``fn`` recording every batch (queries echo back as results)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, queries: list[str]) -> list[RetrievalResult]:
        with self.lock:
            self.batches.append(list(queries))
        return [RetrievalResult(query=q) for q in queries]


def test_plan_batch_char_budget_hand_computed() -> None:
    loop = asyncio.new_event_loop()
    try:
        a = _Request(["a" * 40] * 5, None, loop.create_future())  # 5 queries of 40 characters
        b = _Request(["b" * 5] * 3, None, loop.create_future())  # 3 of 5
        c = _Request(["c" * 10], None, loop.create_future())  # 1 of 10
        active = deque([a, b, c])
        # max_batch 8, max_chars 100. Round 1, 3 callers: share 8 // 3 = 2 queries, 100 // 3 = 33 characters.
        #   A: 1st query (40) always (a caller's first in a round); 2nd: 40 + 40 = 80 > 33 → stop. chars 40
        #   B: 5, then 5 + 5 = 10 ≤ 33 → 2 queries (share reached). chars 50;  C: 10 → chars 60, size 4
        # Round 2, A and B wait: share (8 - 4) // 2 = 2, (100 - 60) // 2 = 20 characters.
        #   A: 60 + 40 = 100 ≤ 100 → taken, chars 100; 2nd: 40 + 40 > 20 → stop.
        #   B: 100 + 5 = 105 > 100 → the batch is full.
        assert plan_batch(active, 8, max_chars=100) == [(a, 0, 2), (b, 0, 2), (c, 0, 1)]
        assert list(active) == [a, b]  # all were served; A (3 left) and B (1 left) go round again
        # Next batch: share 8 // 2 = 4, 100 // 2 = 50. A: 40, then 80 > 50 → stop; B: 5 → chars 45, done.
        # Round 2, only A: share 6, 55 characters: 45 + 40 = 85 ≤ 100 → taken; then 125 > 100 → full.
        assert plan_batch(active, 8, max_chars=100) == [(a, 2, 4), (b, 2, 3)]
        assert list(active) == [a] and a.unscheduled == 1
    finally:
        loop.close()


def test_plan_batch_without_char_budget_is_unchanged() -> None:
    loop = asyncio.new_event_loop()
    try:
        reqs = [_Request(["x" * 2000] * k, None, loop.create_future()) for k in (10, 1, 10)]
        # No character budget: room 8, 3 callers: share 8 // 3 = 2 → 2, 1, 2 (room 3); round 2 (A, C):
        # share 3 // 2 = 1 → 1, 1 (room 1); round 3: share max(1, 1 // 2) = 1 → A takes the last slot.
        assert plan_batch(deque(reqs), 8) == [(reqs[0], 0, 4), (reqs[1], 0, 1), (reqs[2], 0, 3)]
    finally:
        loop.close()


def test_long_query_requests_cannot_crowd_out_single_queries() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_batch=256, max_wait_ms=50, max_batch_chars=1_000)
    longs = [[f"L{r}.{i}:" + "x" * 195 for i in range(10)] for r in range(4)]  # 4 requests × 10 × 200 chars
    smalls = [[f"small{i}-xxx"] for i in range(3)]  # 3 callers × 1 query × 10 chars

    async def together() -> list:
        return await asyncio.gather(*(batcher.submit(qs) for qs in longs + smalls))

    out = asyncio.run(together())
    # Batch 1, 7 callers: share 256 // 7 = 36 queries but 1,000 // 7 = 142 characters each, so each long
    # request gives its first query only (200 each → 800), the small ones theirs (810, 820, 830). Round 2:
    # 830 + 200 > 1,000 → full. Without the budget, round 1 would take all 40 long queries (8,030 characters).
    assert rec.batches[0] == [longs[0][0], longs[1][0], longs[2][0], longs[3][0], *(s[0] for s in smalls)]
    # every batch after: 5 long queries (1,000 characters) at most
    assert all(sum(map(len, b)) <= 1_000 for b in rec.batches)
    assert sorted(q for b in rec.batches for q in b) == sorted(q for qs in longs + smalls for q in qs)
    assert [[r.query for r in res] for res in out] == longs + smalls


def test_query_longer_than_the_budget_runs_alone() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_batch=8, max_wait_ms=50, max_batch_chars=100)
    out = asyncio.run(batcher.submit(["x" * 500, "y", "z"]))
    # "x"*500 alone exceeds 100 but is a batch's first query: it runs alone; then "y" + "z" (2 characters).
    assert rec.batches == [["x" * 500], ["y", "z"]]
    assert [r.query for r in out] == ["x" * 500, "y", "z"]


def test_queries_over_the_retrievers_cut_are_scheduled_at_the_cut_length() -> None:
    # 8 callers each send one 131,072-character query the retriever cuts to 2,000: costed at 2,000, all
    # 8 and a 1-query caller share one 16,384-character batch. Costed as sent, each filled a batch alone
    # and the 1-query caller waited behind all 8.
    rec = Recorder()
    gate = threading.Event()

    def fn(queries: list[str]) -> list[RetrievalResult]:
        gate.wait(10)  # the first batch holds the worker until every caller is queued
        return rec(queries)

    batcher = MicroBatcher(fn, max_batch=256, max_wait_ms=0, cost=lambda q: min(len(q), 2000))
    longs = [[f"L{i} " + "x" * 131_000] for i in range(8)]

    async def together() -> list:
        first = asyncio.ensure_future(batcher.submit(["warm-up"]))
        await asyncio.sleep(0.05)
        rest = [asyncio.ensure_future(batcher.submit(qs)) for qs in [*longs, ["short"]]]
        await asyncio.sleep(0.05)
        gate.set()
        return await asyncio.gather(first, *rest)

    asyncio.run(together())
    assert rec.batches[0] == ["warm-up"]
    assert rec.batches[1] == [q[0] for q in longs] + ["short"], [len(b) for b in rec.batches]


def test_the_retrievers_query_cost_is_its_cut(toy_kb, hash_embedder) -> None:
    from gta_verl.retrieval.retriever import GraphRetriever

    r = GraphRetriever(toy_kb, hash_embedder)
    assert r.query_cost("x" * 131_072) == r.config.max_query_chars == 2000
    assert r.query_cost("capital of Japan") == 16
