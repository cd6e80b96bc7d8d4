"""Cumulative time per stage of batched retrieval: where a served replica's time goes.

A retriever keeps one :class:`StageClock` and adds each batch's stage times to it (a few
``perf_counter`` calls per batch, not per query). A replica reports :meth:`StageClock.snapshot` in its
``stats``; a benchmark takes two snapshots and divides the difference by the queries answered in between
(``benchmarks/serving/served_throughput.py``).
"""

from __future__ import annotations

import threading
from typing import Any


class StageClock:
    """Seconds per stage, batches and queries, summed since creation (thread-safe).

    >>> c = StageClock()
    >>> c.add(4, encode=0.5, ppr=1.0); c.add(2, encode=0.25)
    >>> c.snapshot()
    {'batches': 2, 'queries': 6, 'seconds': {'encode': 0.75, 'ppr': 1.0}}
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = {}
        self._batches = 0
        self._queries = 0

    def add(self, queries: int, **seconds: float) -> None:
        """One batch of ``queries`` and the seconds each named stage took in it."""
        with self._lock:
            self._batches += 1
            self._queries += queries
            for name, s in seconds.items():
                self._seconds[name] = self._seconds.get(name, 0.0) + s

    def add_seconds(self, **seconds: float) -> None:
        """More seconds for stages of a batch already counted by :meth:`add`."""
        with self._lock:
            for name, s in seconds.items():
                self._seconds[name] = self._seconds.get(name, 0.0) + s

    def snapshot(self) -> dict[str, Any]:
        """``{"batches", "queries", "seconds": {stage: s}}`` so far."""
        with self._lock:
            return {"batches": self._batches, "queries": self._queries, "seconds": dict(self._seconds)}
