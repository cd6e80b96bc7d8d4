"""Fixtures of the serving tests: the toy KB's graph retriever, shared by the HTTP modules."""

from __future__ import annotations

import pytest

from gta_verl.retrieval.retriever import GraphRetriever


@pytest.fixture(scope="module")
def retriever(toy_kb, hash_embedder) -> GraphRetriever:
    return GraphRetriever(toy_kb, hash_embedder)
