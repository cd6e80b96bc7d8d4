"""The query path's products on torch equal numpy's (up to float32 summation order)."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.retrieval import gemm


def test_scores_match_numpy_for_batches_vectors_and_read_only_maps(tmp_path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 48)).astype(np.float32)
    path = tmp_path / "x.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")  # read-only, as the node-shared cache maps arrays
    q = rng.standard_normal((7, 48)).astype(np.float32)
    for db in (x, mapped, x[100:600], x[[5, 3, 900]]):
        want = np.asarray(q, np.float64) @ np.asarray(db, np.float64).T
        got = gemm.scores(q, db)
        assert got.shape == (7, len(db)) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
        np.testing.assert_allclose(gemm.scores(q[2], db), want[2], rtol=0, atol=1e-4)
    assert gemm.scores(q, x[:0]).shape == (7, 0)


def test_backend_switch_restores_numpy_and_rejects_unknown_names() -> None:
    q = np.ones((2, 3), np.float32)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    old = gemm.set_backend("numpy")
    try:
        assert gemm.backend() == "numpy"
        # rows 0..3 of x sum to 3, 12, 21, 30: q = ones gives those sums
        assert gemm.scores(q, x).tolist() == [[3.0, 12.0, 21.0, 30.0]] * 2
    finally:
        gemm.set_backend(old)
    assert gemm.backend() == "torch" and gemm.scores(q, x).tolist() == [[3.0, 12.0, 21.0, 30.0]] * 2
    with pytest.raises(ValueError, match="torch' or 'numpy"):
        gemm.set_backend("blas")
