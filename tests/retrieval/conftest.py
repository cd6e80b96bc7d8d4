"""Fixtures of the retrieval tests: a hand-built 10-document KB and its offline encoder."""

from __future__ import annotations

from pathlib import Path

import pytest

from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb


@pytest.fixture(scope="session")
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture(scope="session")
def toy_kb(hash_embedder):
    return make_toy_kb(hash_embedder)


@pytest.fixture(scope="session")
def toy_kb_dir(toy_kb, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gta_verl.kb.store import save_kb

    out = tmp_path_factory.mktemp("toy_kb") / "kb"
    save_kb(toy_kb, out)
    return out
