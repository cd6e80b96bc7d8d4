"""The linear PPR on a basis index's candidates (``basis_index``) against the exact GEMV path."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from gta_verl.retrieval.ppr.basis_index import augmented_rows, build_basis_index
from gta_verl.retrieval.ppr.linear import PassageBasis, build_passage_basis, linear_ppr_docs
from gta_verl.retrieval.ppr.linear_approx import PUSH_DOCS, _prune_floor, linear_top_approx
from gta_verl.retrieval.ppr.transition import transition_from_edges


def _basis(z: list[list[float]], g: list[float]) -> PassageBasis:
    n = len(z)
    return PassageBasis(np.asarray(z, np.float32), np.asarray(g), np.zeros(2), 1.0, np.ones(n), 0.5)


def test_augmented_rows_hand_computed() -> None:
    """x = [Z | g]: (1, 0, 1) with ‖x‖² = 2 and (0, 1, 0) with ‖x‖² = 1; R² = 2, so the extra coordinate
    is √(2 − 2) = 0 and √(2 − 1) = 1, and every row is divided by √2, then padded to 8 dimensions."""
    rows = augmented_rows(_basis([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0]))
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(rows, [[s, 0, s, 0, 0, 0, 0, 0], [0, s, 0, s, 0, 0, 0, 0]], atol=1e-7)
    # ⟨x̃_v, [a q ; c ; 0]⟩ = ⟨x_v, [a q ; c]⟩ / R: q = (0, 1), a = 1, c = 0.5 → 0.5/√2 and 1/√2
    u = np.array([0.0, 1.0, 0.5, 0, 0, 0, 0, 0], np.float32)
    np.testing.assert_allclose(rows @ u, [0.5 * s, 1.0 * s], atol=1e-7)


def test_basis_index_search_ranks_by_the_inner_product() -> None:
    # dense parts a·Zq + c·g for q = (1, 0), a = 1, c = 1: rows 0..3 → 0.9, 0.2 + 1 = 1.2, −1, 0.5
    b = _basis([[0.9, 0.0], [0.2, 0.3], [-1.0, 0.0], [0.0, 0.5]], [0.0, 1.0, 0.0, 0.5])
    index = build_basis_index(b, "hnsw")
    ids = index.search(np.array([[1.0, 0.0]], np.float32), np.array([1.0]), np.array([1.0]), 3)
    assert ids.tolist() == [[1, 0, 3]]
    with pytest.raises(ValueError, match="exact GEMV"):
        build_basis_index(b, "flat")


def test_prune_floor_hand_computed() -> None:
    beta = np.array([[0.5, 0.2, 0.4, -np.inf]])
    assert _prune_floor(beta, 2).tolist() == pytest.approx([0.4 - 0.2])  # β_(2) − β_min
    assert _prune_floor(beta, 3).tolist() == [0.0]  # β_(3) = β_min
    assert _prune_floor(beta, 4).tolist() == [0.0]  # fewer than k candidates: every reached document


def test_star_graph_hand_computed() -> None:
    """The star of test_linear_on_cpu: r_D = (35, 29, 9)/165. The basis part alone (p = (0.2, 0.1, 0.15, 0)):
    y3 = ½(y0 + y1), y0 = 0.2 + ¼y3, y1 = 0.1 + ¼y3 → y3 = 0.2, y = (0.25, 0.15, 0.15): one candidate =
    document 0; fewer than k = 2 candidates, so every document the entity push reaches (0 and 1, not the
    isolated 2) is scored: the top 2 are 0 and 1 with their exact scores."""
    tr = transition_from_edges(4, np.array([[0, 3], [1, 3]]))
    basis = build_passage_basis(tr, np.array([[1.0], [0.0], [0.5]]), alpha=0.5, dtype=np.float64, tol=1e-13)
    seeds = sp.csr_matrix(([1.0], ([0], [3])), shape=(1, 4))
    q, a, c = np.array([[1.0]], np.float32), np.array([0.1]), np.array([0.1])
    ids, scores, touched = linear_top_approx(
        tr, basis, build_basis_index(basis, "hnsw"), seeds, q, a, c, k=2, n_cand=1, eps=1e-14
    )
    assert ids.tolist() == [[0, 1]] and touched.tolist() == [3]
    np.testing.assert_allclose(scores[0], [35 / 165, 29 / 165], atol=1e-7)


@pytest.fixture(scope="module")
def graph() -> tuple:
    """400 documents, 600 entities, random weighted edges; 8 queries with 3 entity seeds each."""
    rng = np.random.default_rng(5)
    n, n_docs, dim, n_q = 1000, 400, 16, 8
    doc_links = np.stack(
        [np.arange(n_docs), rng.integers(n_docs, n, n_docs)], axis=1
    )  # every document linked
    edges = np.concatenate([rng.integers(0, n, size=(3000, 2)), doc_links])
    edges = edges[edges[:, 0] != edges[:, 1]]
    tr = transition_from_edges(n, edges, rng.uniform(0.5, 2.0, len(edges)))
    emb = rng.normal(size=(n_docs, dim))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    q = rng.normal(size=(n_q, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    dense = q.astype(np.float64) @ emb.T
    lo, hi = dense.min(axis=1), dense.max(axis=1)
    a, c = 0.05 / (hi - lo), -0.05 * lo / (hi - lo)
    cols = rng.choice(np.arange(n_docs, n), size=3 * n_q)
    seeds = sp.csr_matrix(
        (rng.uniform(0.1, 1.0, 3 * n_q), (np.repeat(np.arange(n_q), 3), cols)), shape=(n_q, n)
    )
    basis = build_passage_basis(tr, emb, alpha=0.5)
    return tr, basis, seeds, q, a, c


@pytest.mark.parametrize("k", [1, 3, 10])
def test_exhaustive_index_gives_the_exact_top_k(graph, k) -> None:
    """Every IVF list probed = an exact search, and ≤ PUSH_DOCS documents: the exact top-k (module docstring),
    from 2k candidates of 400 documents plus the push's."""
    tr, basis, seeds, q, a, c = graph
    assert basis.n_docs <= PUSH_DOCS
    full, _ = linear_ppr_docs(tr, basis, seeds, q, a, c, eps=1e-7)
    want = np.argsort(-full, axis=1, kind="stable")[:, :k]
    index = build_basis_index(basis, "ivf", nprobe=10**6)
    assert index.index._index.nprobe == index.index._index.nlist > 1  # a real IVF index, every list probed
    ids, scores, _ = linear_top_approx(tr, basis, index, seeds, q, a, c, k=k, n_cand=2 * k, eps=1e-7)
    assert ids.tolist() == want.tolist()
    np.testing.assert_allclose(scores, np.take_along_axis(full, want, axis=1), rtol=1e-5, atol=1e-9)


def test_a_partial_search_keeps_exact_scores(graph) -> None:
    """One IVF list probed: documents can be missed, but every returned score is the exact one."""
    tr, basis, seeds, q, a, c = graph
    full, _ = linear_ppr_docs(tr, basis, seeds, q, a, c, eps=1e-7)
    ids, scores, _ = linear_top_approx(
        tr, basis, build_basis_index(basis, "ivf", nprobe=1), seeds, q, a, c, k=10, n_cand=10, eps=1e-7
    )
    assert (ids >= 0).all()
    np.testing.assert_allclose(scores, np.take_along_axis(full, ids, axis=1), rtol=1e-5, atol=1e-9)
    assert (np.diff(scores, axis=1) <= 0).all()
