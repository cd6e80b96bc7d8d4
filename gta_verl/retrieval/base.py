"""The retrieval-environment interface every consumer codes against.

Every in-process backend (:mod:`gta_verl.retrieval.backends`: ``graph``, ``dense``, ``bm25``),
the Ray actor client and the HTTP client satisfy :class:`Retriever`, so synthesis
validation, the agent loop and evaluation run the same code path with the same
config whichever backend and transport is deployed. The backends also satisfy
:class:`RetrievalBackend`, which the serving layer (replicas, HTTP server) and the
recall evaluation use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.config import RetrieverConfig


@runtime_checkable
class Retriever(Protocol):
    """R(q): a batch of queries → one :class:`RetrievalResult` per query, in order."""

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Retrieve for every query; a failure yields a result with ``error`` set."""
        ...


@runtime_checkable
class AsyncRetriever(Protocol):
    """Async variant used inside verl agent loops (Ray actor client, HTTP client)."""

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Retrieve for every query without blocking the event loop; never raises."""
        ...


@runtime_checkable
class RetrievalBackend(Retriever, Protocol):
    """An in-process retriever as :func:`gta_verl.retrieval.backends.open_retriever` returns it."""

    kb: Any
    config: RetrieverConfig

    def rank(self, queries: Sequence[str], k: int | None = None) -> list[RetrievalResult]:
        """The first ``k`` documents per query (all by default), best first: for recall@k."""
        ...

    def prepare_queries(self, queries: Sequence[str]) -> tuple[list[str], list[tuple[str, ...]]]:
        """Validated, truncated texts and per-query flags (raises on a bad query)."""
        ...

    def query_cost(self, query: str) -> int:
        """The micro-batcher's cost of ``query`` (characters retrieval works on)."""
        ...

    def warm(self) -> Any:
        """Build what the first query would build lazily; returns the retriever."""
        ...

    def with_config(self, config: RetrieverConfig) -> Any:
        """The same backend over the same KB and index with another config."""
        ...
