"""Power-iteration PPR with one fused, multithreaded numba pass per iteration.

Same equation as :func:`gta_verl.retrieval.ppr.batched.batched_ppr` (GTA-RAG eq 7, igraph PRPACK
semantics), for a block of ``b`` queries at once:

    x ← α p + (1 − α) (M x + (dᵀ x) p)

with ``M`` the column-stochastic transition in CSR (row ``i`` holds the in-edges of ``i``),
``d`` the dangling-node indicator and ``p`` the personalization. Why a kernel of our own:
scipy's CSR × dense product is single-threaded and does not vectorize over the block's
columns, and the solver's vector updates (``α p + …``, the convergence norm) are separate
numpy passes over ``[N, b]``; measured, that ran under 1 GFLOP/s (docs/benchmarks.md).
Here one pass per iteration reads each row's in-edges once, accumulates the ``b`` columns
contiguously (the iterate is row-major ``[N, b]``, so a neighbour's ``b`` values are one
cache line run that LLVM vectorizes), writes the new iterate and its L1 change, with rows
split over numba threads. With α = 0.5 the error halves per iteration (L1 contraction 1 − α).
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

FUSED_CHUNK_ROWS = 2048  # rows per parallel work item: enough to amortize scheduling, many per thread


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def fused_step(indptr, indices, data, x, pers, alpha, lost, out, diff_parts):  # pragma: no cover - jit
    """One iteration for every row; ``diff_parts[t, :]`` gets chunk ``t``'s L1 change per column."""
    n, b = x.shape
    beta = 1.0 - alpha
    n_chunks = diff_parts.shape[0]
    for t in numba.prange(n_chunks):
        acc = np.empty(b, dtype=x.dtype)
        part = np.zeros(b, dtype=np.float64)
        for i in range(t * FUSED_CHUNK_ROWS, min(n, (t + 1) * FUSED_CHUNK_ROWS)):
            acc[:] = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                j = indices[k]
                w = data[k]
                for c in range(b):
                    acc[c] += w * x[j, c]
            for c in range(b):
                p = pers[i, c]
                v = alpha * p + beta * (acc[c] + lost[c] * p)
                part[c] += abs(v - x[i, c])
                out[i, c] = v
        diff_parts[t, :] = part


def fused_power_block(
    matrix: sp.csr_matrix,
    dangling: np.ndarray,
    pers: np.ndarray,
    alpha: float,
    tol: float,
    max_iter: int,
) -> tuple[np.ndarray, int]:
    """Power iteration on one block of personalizations.

    Args:
        matrix: ``csr [N, N]`` column-stochastic ``M`` (internal node order), in the dtype to
            iterate in (float32 halves the memory traffic; see ``tol``).
        dangling: ``int [n_d]`` indices of dangling nodes (zero columns of ``M``).
        pers: ``[N, b]`` personalization columns, each summing to 1, C-contiguous, same dtype
            as ``matrix``.
        alpha: Restart probability α.
        tol: Stop when every column's L1 change is ≤ ``tol``. In float32 the iterate's own
            rounding (≈ 6e-8 relative) puts a floor near 1e-7 under that change.
        max_iter: Iteration cap.

    Returns:
        ``([N, b]`` iterate, iterations run).
    """
    n, b = pers.shape
    x = pers.copy()
    out = np.empty_like(pers)
    parts = np.zeros(((n + FUSED_CHUNK_ROWS - 1) // FUSED_CHUNK_ROWS, b))
    indptr, indices = matrix.indptr, matrix.indices
    data = matrix.data.astype(pers.dtype, copy=False)
    for it in range(1, max_iter + 1):
        lost = x[dangling].sum(axis=0) if len(dangling) else np.zeros(b, dtype=pers.dtype)
        fused_step(
            indptr, indices, data, x, pers, pers.dtype.type(alpha), lost.astype(pers.dtype), out, parts
        )
        x, out = out, x
        if float(parts.sum(axis=0).max()) <= tol:
            return x, it
    return x, max_iter
