"""Batched personalized PageRank (GTA-RAG eq 7) for many queries at once.

Equation implemented, for every query (row) of a batch:

    r = α p + (1 − α) (M r + (dᵀ r) p)

with ``M = Pᵀ`` the **column-stochastic** transition matrix (``M[v, u] = w_uv / s_u``,
``s_u`` the weighted degree ("strength") of ``u``), ``α`` the restart probability
(``igraph`` damping = 1 − α), ``p`` the personalization (reset) vector and ``d`` the
indicator of dangling nodes (strength 0). A walker on a dangling node restarts from
``p`` — exactly what igraph's PRPACK backend does (it passes the reset vector as
the dangling distribution), so results match
``Graph.personalized_pagerank(damping=1-α, reset=p, weights="weight",
implementation="prpack")`` to solver tolerance.

Two solvers, both batched as sparse-matrix × dense-block products:

* ``cg`` (default for undirected graphs): since ``r ∝ x = (I − (1−α) M)^{-1} p``
  (the dangling term only rescales, see :func:`batched_ppr`), and ``M = A D^{-1}`` with
  ``A`` symmetric, ``x = D^{1/2} y`` where ``(I − (1−α) S) y = D^{-1/2} p`` and
  ``S = D^{-1/2} A D^{-1/2}`` is symmetric with eigenvalues in [−1, 1]. The system is
  SPD with condition number ≤ (2 − α)/α = 3 at α = 0.5, so conjugate gradients gain
  ~0.27 digits per product where the power iteration gains 0.5 → ~2.5× fewer products.
* ``power``: plain power iteration on ``M``; used for any column-stochastic matrix.
* ``fused``: the same power iteration as one multithreaded numba pass per iteration
  (:mod:`gta_verl.retrieval.ppr.fused_power`), CPU only; the fastest CPU solver for blocks of queries.

Columns of the batch are processed in blocks of ``block_size`` so that a block's
dense iterate stays cache-resident while the sparse matrix streams through; each
block stops as soon as all its columns have converged.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal, overload

import numpy as np
import scipy.sparse as sp

from gta_verl.retrieval.ppr.transition import Transition, as_transition

Method = Literal["auto", "cg", "power", "fused"]
Backend = Literal["auto", "scipy", "torch"]


class _Ops:
    """The few array operations the solvers need, over scipy/numpy or torch."""

    def __init__(self, tr: Transition, backend: str, device: str, dtype: Any, use_sym: bool) -> None:
        self.backend = backend
        mat = tr.sym if use_sym else tr.matrix
        if mat is None:
            raise ValueError("method='cg' needs an undirected graph's Transition (from build_transition)")
        if backend == "scipy":
            self.mat = mat.astype(dtype)
            self.xp_dtype = dtype
            return
        import torch

        key = f"torch:{use_sym}:{device}:{np.dtype(dtype).name}"
        if key not in tr._cache:
            tdtype = torch.float32 if np.dtype(dtype) == np.float32 else torch.float64
            with warnings.catch_warnings():  # "sparse CSR support is in beta"
                warnings.simplefilter("ignore", UserWarning)
                tr._cache[key] = torch.sparse_csr_tensor(
                    torch.from_numpy(mat.indptr.astype(np.int64)),
                    torch.from_numpy(mat.indices.astype(np.int64)),
                    torch.from_numpy(mat.data.astype(dtype)),
                    size=mat.shape,
                    dtype=tdtype,
                    device=device,
                    check_invariants=False,  # built from a valid scipy CSR
                )
        self.mat = tr._cache[key]
        self.device = device

    def to(self, a: np.ndarray):
        if self.backend == "scipy":
            return np.ascontiguousarray(a, dtype=self.xp_dtype)
        import torch

        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device, self.mat.dtype)

    def back(self, a) -> np.ndarray:
        return a if self.backend == "scipy" else a.cpu().numpy()

    def matmul(self, x):
        return self.mat @ x

    def coldot(self, a, b):
        """Column-wise inner products ``[b]`` of two ``[N, b]`` blocks, without a temporary."""
        if self.backend == "scipy":
            return np.einsum("ij,ij->j", a, b)
        import torch

        return torch.einsum("ij,ij->j", a, b)

    def axpy(self, y, step, x, scratch=None):
        """``y += x * step`` in place (``step`` per column)."""
        if self.backend == "scipy":
            np.multiply(x, step, out=scratch)
            y += scratch
        else:
            y.addcmul_(x, step.unsqueeze(0))
        return y

    def copy(self, a):
        return a.copy() if self.backend == "scipy" else a.clone()


def _resolve_backend(backend: Backend, device: str) -> str:
    """``auto``: scipy on CPU, torch on an accelerator.

    On CPU, scipy's single-threaded product is the robust choice: torch's OpenMP
    threads busy-wait, and on a shared 2-core machine (rollout workers, other jobs)
    that made the torch path 5–30× slower in our measurements.
    """
    if backend == "scipy" and device != "cpu":
        raise ValueError("backend='scipy' runs on CPU only; use backend='torch' for device=" + device)
    if backend != "auto":
        return backend
    return "scipy" if device == "cpu" else "torch"


def _cg_block(ops: _Ops, rhs, c: float, tol: float, max_iter: int):
    """Solve ``(I − c S) y = rhs`` for every column of ``rhs`` [N, b] by batched CG.

    Conjugate gradients run independently per column (per-column step sizes); the
    block stops when every column's residual is below ``tol`` × its right-hand side.
    """
    y = rhs * 0
    res = ops.copy(rhs)
    direction = ops.copy(rhs)
    scratch = ops.copy(rhs) if ops.backend == "scipy" else None
    rs = ops.coldot(res, res)
    stop = rs * (tol * tol)
    for it in range(max_iter):
        if bool((rs <= stop).all()):
            return y, it
        a_dir = ops.matmul(direction)
        a_dir *= -c
        a_dir += direction  # (I − cS) d
        denom = ops.coldot(direction, a_dir)
        step = rs / (denom + (denom == 0))  # a converged (zero) column has denom 0: step 0
        ops.axpy(y, step, direction, scratch)
        ops.axpy(res, -step, a_dir, scratch)
        rs_new = ops.coldot(res, res)
        direction *= rs_new / (rs + (rs == 0))
        direction += res
        rs = rs_new
    return y, max_iter


def _power_block(ops: _Ops, pers, dangling, alpha: float, tol: float, max_iter: int):
    """Power iteration ``x ← α p + (1−α)(M x + (dᵀx) p)`` on a block ``pers`` [N, b]."""
    x = pers
    c = 1.0 - alpha
    for it in range(max_iter):
        lost = (x * dangling).sum(0)  # mass sitting on dangling nodes restarts from p
        x_new = alpha * pers + c * (ops.matmul(x) + lost * pers)
        diff = abs(x_new - x).sum(0)
        x = x_new
        if bool((diff <= tol).all()):
            return x, it + 1
    return x, max_iter


def _check_personalization(pers: np.ndarray, n: int) -> np.ndarray:
    pers = np.atleast_2d(np.asarray(pers, dtype=np.float64))
    if pers.ndim != 2 or pers.shape[1] != n:
        raise ValueError(f"personalization must have shape [B, {n}], got {pers.shape}")
    if not np.all(np.isfinite(pers)) or np.any(pers < 0):
        raise ValueError("personalization must be finite and non-negative")
    sums = pers.sum(axis=1)
    if np.any(sums <= 0):
        raise ValueError(f"personalization rows {np.flatnonzero(sums <= 0)[:5].tolist()} are all zero")
    return pers / sums[:, None]  # rows sum to 1 (igraph normalizes the reset vector too)


@overload
def batched_ppr(
    transition: Transition | sp.spmatrix,
    personalization: np.ndarray,
    alpha: float = ...,
    tol: float = ...,
    max_iter: int = ...,
    block_size: int = ...,
    method: Method = ...,
    backend: Backend = ...,
    device: str = ...,
    dtype: Any = ...,
    return_iterations: Literal[False] = ...,
) -> np.ndarray: ...
@overload
def batched_ppr(
    transition: Transition | sp.spmatrix,
    personalization: np.ndarray,
    alpha: float = ...,
    tol: float = ...,
    max_iter: int = ...,
    block_size: int = ...,
    method: Method = ...,
    backend: Backend = ...,
    device: str = ...,
    dtype: Any = ...,
    *,
    return_iterations: Literal[True],
) -> tuple[np.ndarray, list[int]]: ...
def batched_ppr(
    transition: Transition | sp.spmatrix,
    personalization: np.ndarray,
    alpha: float = 0.5,
    tol: float = 1e-8,
    max_iter: int = 100,
    block_size: int = 64,
    method: Method = "auto",
    backend: Backend = "auto",
    device: str = "cpu",
    dtype: Any = np.float64,
    return_iterations: bool = False,
) -> np.ndarray | tuple[np.ndarray, list[int]]:
    """Personalized PageRank for a batch of personalization vectors (eq 7).

    Solves ``r = α p + (1 − α)(M r + (dᵀ r) p)`` per row. With ``x = (I − (1−α) M)^{-1} p``
    (dangling columns of ``M`` zero), ``r = (α + (1−α) dᵀr) x``, and since ``r`` sums to 1,
    ``r = x / Σx``: the dangling term is a rescaling, which is how the solvers handle it exactly.

    Args:
        transition: A :class:`Transition` (from :func:`build_transition`), or a raw
            ``csr [N, N]`` **column-stochastic** matrix ``M = Pᵀ`` (column ``u`` holds the
            out-probabilities of node ``u``; all-zero column = dangling node).
        personalization: ``float [B, N]`` non-negative; rows are normalized to sum 1.
        alpha: Restart probability α in (0, 1) (igraph ``damping = 1 − α``).
        tol: ``cg``: relative residual 2-norm per column; ``power``: L1 change
            between iterates per column.
        max_iter: Iteration cap per block.
        block_size: Columns (queries) solved together; 32–128 keeps the iterate in cache.
        method: ``auto`` = ``cg`` when the transition is symmetrizable, else ``power``;
            ``fused`` = power iteration in one numba kernel per step (CPU; ignores ``backend``).
        backend: ``scipy``, ``torch`` (CPU via MKL, or GPU) or ``auto`` (scipy on CPU, torch on GPU).
        device: ``cpu`` or a torch device such as ``cuda``.
        dtype: ``np.float64`` (default, matches igraph to ~1e-12) or ``np.float32``.
        return_iterations: Also return the iteration count of every block.

    Returns:
        ``float64 [B, N]`` PPR scores in original node order, each row summing to 1
        (and the per-block iteration counts if requested).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha (restart probability) must be in (0, 1), got {alpha}")
    if tol <= 0 or max_iter < 1 or block_size < 1:
        raise ValueError(f"need tol > 0, max_iter >= 1, block_size >= 1; got {tol}, {max_iter}, {block_size}")
    tr = as_transition(transition)
    pers = _check_personalization(personalization, tr.n_nodes)
    if tr.perm is not None:
        pers = pers[:, tr.perm]
    if method == "auto":
        method = "cg" if tr.sym is not None else "power"
    if method == "cg" and tr.sym is None:
        raise ValueError("method='cg' needs an undirected graph's Transition (from build_transition)")
    if method == "fused" and device != "cpu":
        raise ValueError("method='fused' runs on CPU only; use 'cg' or 'power' with backend='torch'")
    if method == "fused":
        out, iters = _fused_blocks(tr, pers, alpha, tol, max_iter, block_size, dtype)
    else:
        ops = _Ops(tr, _resolve_backend(backend, device), device, dtype, use_sym=method == "cg")
        out, iters = _ops_blocks(ops, tr, pers, method, alpha, tol, max_iter, block_size)
    return (out, iters) if return_iterations else out


def _ops_blocks(
    ops: _Ops,
    tr: Transition,
    pers: np.ndarray,
    method: str,
    alpha: float,
    tol: float,
    max_iter: int,
    block_size: int,
) -> tuple[np.ndarray, list[int]]:
    """``method="cg"`` / ``"power"`` per block over ``ops``; rows of ``pers`` in internal order."""
    out = np.empty_like(pers)
    iters: list[int] = []
    sqrt_s = np.sqrt(tr.strength)
    inv_sqrt_s = np.divide(1.0, sqrt_s, out=np.zeros_like(sqrt_s), where=sqrt_s > 0)
    dangling = ops.to(tr.dangling.astype(np.float64)[:, None])
    for start in range(0, len(pers), block_size):
        block = pers[start : start + block_size].T  # [N, b]
        if method == "cg":
            y, it = _cg_block(ops, ops.to(block * inv_sqrt_s[:, None]), 1.0 - alpha, tol, max_iter)
            x = ops.back(y).astype(np.float64) * sqrt_s[:, None]
            x[tr.dangling] = block[tr.dangling]  # isolated nodes: x_i = p_i
        else:
            xb, it = _power_block(ops, ops.to(block), dangling, alpha, tol, max_iter)
            x = ops.back(xb).astype(np.float64)
        out[start : start + block_size] = _distribution_rows(x)
        iters.append(it)
    return _unpermute(tr, out), iters


def _distribution_rows(x: np.ndarray) -> np.ndarray:
    """``[N, b]`` solver columns → ``float64 [b, N]`` rows that are non-negative and sum to 1."""
    x = np.maximum(x.astype(np.float64, copy=False), 0.0)  # round-off can leave -1e-17 on unreachable nodes
    return (x / x.sum(axis=0, keepdims=True)).T


def _unpermute(tr: Transition, out: np.ndarray) -> np.ndarray:
    if tr.perm is None:
        return out
    restored = np.empty_like(out)
    restored[:, tr.perm] = out
    return restored


def _fused_blocks(
    tr: Transition, pers: np.ndarray, alpha: float, tol: float, max_iter: int, block_size: int, dtype: Any
) -> tuple[np.ndarray, list[int]]:
    """``method="fused"``: :func:`fused_power_block` per block; rows of ``pers`` in internal order."""
    from gta_verl.retrieval.ppr.fused_power import fused_power_block

    key = f"fused:{np.dtype(dtype).name}"
    if key not in tr._cache:  # built once per Transition: the matrix in the iterate's dtype, dangling ids
        tr._cache[key] = (tr.matrix.astype(dtype), np.flatnonzero(tr.dangling))
    mat, dangling = tr._cache[key]
    out = np.empty_like(pers)
    iters: list[int] = []
    for start in range(0, len(pers), block_size):
        block = np.ascontiguousarray(pers[start : start + block_size].T, dtype=dtype)  # [N, b]
        xb, it = fused_power_block(mat, dangling, block, alpha, tol, max_iter)
        out[start : start + block_size] = _distribution_rows(xb)
        iters.append(it)
    return _unpermute(tr, out), iters
