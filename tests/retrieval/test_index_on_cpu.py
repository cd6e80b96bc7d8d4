"""VectorIndex.search_with_min: top-k and the minimum from one pass equal faiss's two searches."""

from __future__ import annotations

import numpy as np

from gta_verl.retrieval import index as index_mod
from gta_verl.retrieval.index import VectorIndex


def test_hand_computed_top2_and_min() -> None:
    # unit vectors e0, e1, −e0, (e0+e1)/√2; query e0 → scores 1, 0, −1, 0.7071
    s = np.sqrt(0.5)
    x = np.array([[1, 0], [0, 1], [-1, 0], [s, s]], dtype=np.float32)
    scores, ids, mins = VectorIndex(x).search_with_min(np.array([[1.0, 0.0]]), 2)
    assert ids.tolist() == [[0, 3]]
    np.testing.assert_allclose(scores, [[1.0, s]], atol=1e-6)
    np.testing.assert_allclose(mins, [-1.0])


def test_blocks_agree_with_two_faiss_searches(monkeypatch) -> None:
    monkeypatch.setattr(index_mod, "CHUNK_ROWS", 37)  # many blocks, a ragged last one
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:9] + 0.3 * rng.standard_normal((9, 16)).astype(np.float32)
    vi = VectorIndex(x)
    scores, ids, mins = vi.search_with_min(q, 5)
    ref_s, ref_i = vi.search(q, 5)
    np.testing.assert_array_equal(ids, ref_i)
    np.testing.assert_allclose(scores, ref_s, atol=1e-5)
    np.testing.assert_allclose(mins, vi.min_scores(q), atol=1e-5)
    np.testing.assert_allclose(mins, (q @ x.T).min(1), atol=1e-5)


def test_approximate_index_falls_back_to_two_searches() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    vi = VectorIndex(x, kind="hnsw")
    scores, ids, mins = vi.search_with_min(x[:3], 4)
    assert ids.shape == (3, 4) and ids[:, 0].tolist() == [0, 1, 2]
    np.testing.assert_allclose(mins, (x[:3] @ x.T).min(1), atol=1e-5)
