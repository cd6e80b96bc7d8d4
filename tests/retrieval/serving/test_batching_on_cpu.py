"""The micro-batcher: bounded batches, round-robin fairness across callers, a character cap."""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.serving.batching import MicroBatcher, _Request, plan_batch


class Recorder:
    """A batched ``fn`` that records every batch it is given (queries echo back as results)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, queries: list[str], topk: int | None = None) -> list[RetrievalResult]:
        with self.lock:
            self.batches.append([f"{q}@{topk}" if topk else q for q in queries])
        return [RetrievalResult(query=q, flags=(f"k={topk}",) if topk else ()) for q in queries]


async def _together(batcher: MicroBatcher, requests: list[tuple[list[str], int | None]]):
    # All submits are scheduled in the same event-loop tick, inside one batching window.
    return await asyncio.gather(*(batcher.submit(qs, k) for qs, k in requests))


def test_large_request_is_split_and_small_callers_go_first() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_batch=4, max_wait_ms=50)
    big = [f"b{i}" for i in range(12)]
    out = asyncio.run(_together(batcher, [(big, None), (["s1"], None), (["s2"], None), (["s3"], None)]))
    # Round 1: 4 callers waiting, room 4 → share 4 // 4 = 1 each: [b0, s1, s2, s3].
    # Then only the big caller waits: 4 + 4 + 3 = the remaining 11 queries.
    assert rec.batches == [
        ["b0", "s1", "s2", "s3"],
        ["b1", "b2", "b3", "b4"],
        ["b5", "b6", "b7", "b8"],
        ["b9", "b10", "b11"],
    ]
    assert [r.query for r in out[0]] == big and [r.query for r in out[3]] == ["s3"]
    assert batcher.stats()["batch_size_max"] == 4


def test_topk_requests_batch_only_with_the_same_topk() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_batch=8, max_wait_ms=50, rank_fn=rec)
    out = asyncio.run(_together(batcher, [(["a"], None), (["b"], 3), (["c"], None), (["d"], 3), (["e"], 5)]))
    # Batch keys follow the first waiting caller: None takes a, c; then 3 takes b, d; then 5 takes e.
    assert rec.batches == [["a", "c"], ["b@3", "d@3"], ["e@5"]]
    assert out[1][0].flags == ("k=3",) and out[4][0].flags == ("k=5",) and out[0][0].flags == ()


def test_plan_batch_round_robin_shares() -> None:
    loop = asyncio.new_event_loop()
    try:
        reqs = [
            _Request([f"{n}{i}" for i in range(k)], None, loop.create_future())
            for n, k in (("A", 10), ("B", 1), ("C", 10))
        ]
        active = deque(reqs)
        # room 8, 3 callers: share 8 // 3 = 2 → A2 B1 C2 (room 3); round 2, A and C: share 3 // 2 = 1
        # → A1 C1 (room 1); round 3: share max(1, 1 // 2) = 1 → A1, room 0. A: 4, B: 1, C: 3.
        batch = plan_batch(active, 8)
        assert [(r.queries[0][0], s, e) for r, s, e in batch] == [("A", 0, 4), ("B", 0, 1), ("C", 0, 3)]
        # B is done; A and C were both served, so they keep their order.
        assert [r.queries[0][0] for r in active] == ["A", "C"]
        batch = plan_batch(active, 8)  # A 6 left, C 7 left: share 4 each
        assert [(r.queries[0][0], s, e) for r, s, e in batch] == [("A", 4, 8), ("C", 3, 7)]
    finally:
        loop.close()


def test_request_character_cap_gives_error_results() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_batch=4, max_wait_ms=1, max_request_chars=10)
    (out,) = asyncio.run(_together(batcher, [(["abcdef", "ghijk"], None)]))  # 6 + 5 = 11 > 10
    assert [r.error for r in out] == [
        "request holds 11 query characters > limit 10; split it into smaller requests"
    ] * 2
    assert rec.batches == []
    (out,) = asyncio.run(_together(batcher, [(["abcdef", "ghij"], None)]))  # 6 + 4 = 10: served
    assert all(r.ok for r in out) and rec.batches == [["abcdef", "ghij"]]


def test_invalid_query_and_failing_fn_become_error_results() -> None:
    def validate(q: str) -> None:
        if not q.strip():
            raise ValueError("empty")

    def boom(queries: list[str]) -> list[RetrievalResult]:
        raise RuntimeError("index gone")

    batcher = MicroBatcher(boom, validate=validate, max_batch=2, max_wait_ms=1)
    (out,) = asyncio.run(_together(batcher, [(["a", " ", "b", "c"], None)]))
    assert out[1].error == "invalid query: empty"
    assert [r.error for i, r in enumerate(out) if i != 1] == [
        "retrieval failed: RuntimeError: index gone"
    ] * 3


def test_cancelled_caller_frees_its_queries() -> None:
    rec = Recorder()
    batcher = MicroBatcher(rec, max_batch=2, max_wait_ms=20)

    async def scenario() -> list[RetrievalResult]:
        doomed = asyncio.create_task(batcher.submit([f"x{i}" for i in range(100)]))
        await asyncio.sleep(0)
        doomed.cancel()
        return await batcher.submit(["y"])

    out = asyncio.run(scenario())
    assert out[0].query == "y"
    assert sum(len(b) for b in rec.batches) <= 3  # at most one batch of x's ran, never all 100
