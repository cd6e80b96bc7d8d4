"""The retrieval-environment interface every consumer codes against.

The in-process :class:`gta_verl.retrieval.retriever.GraphRetriever`, the Ray actor
client and the HTTP client all satisfy :class:`Retriever`, so synthesis
validation, the agent loop and evaluation run the same code path with the same
config whichever transport is deployed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from gta_verl.data.types import RetrievalResult


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
