"""Comparing a retriever's PPR rankings with the exact solver's (shared by the PPR-method tests)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from gta_verl.retrieval.config import RetrieverConfig


def exact_config(cfg: RetrieverConfig, tol: float = 1e-8) -> RetrieverConfig:
    """The reference: float64 conjugate gradients to a ``tol`` relative residual (igraph to ~1e-10 at
    1e-8)."""
    return dataclasses.replace(cfg, ppr_method="cg", ppr_dtype="float64", ppr_tol=tol)


def assert_same_rankings(ours: Sequence, exact: Sequence, atol: float, min_share: float = 0.99) -> None:
    """Ordered top-k doc ids identical on ≥ ``min_share`` of the queries; hit scores within ``atol``."""
    same = [
        [h.doc_id for h in a.hits] == [h.doc_id for h in b.hits] for a, b in zip(ours, exact, strict=True)
    ]
    assert np.mean(same) >= min_share
    for a, b in zip(ours, exact, strict=True):
        np.testing.assert_allclose([h.score for h in a.hits], [h.score for h in b.hits], atol=atol)
