"""Dense products of the query path on torch's thread pool (the encoder's), not numpy's BLAS.

A query goes through the encoder (torch, an OpenMP team), then dense passage scores,
the triple scan and the passage-basis GEMV. Done with numpy's ``@``, those products run
on numpy's OpenBLAS, a second pool whose threads busy-wait after every call; on a
2-core machine they then hold the cores while torch's team runs the next query's
encoder, whose barriers wait for descheduled threads. On the bundled MuSiQue KB one
``retrieve([q])`` took 138 ms (p50) that way and 48.6 ms on torch, the encoder alone
being 34.5 ms of it (`benchmarks/retrieval/inprocess.py`, docs/benchmarks/inprocess.md). Running
the products on torch keeps the whole query on one pool, with the threads the caller
gave torch (a replica's share of its node).

``set_backend("numpy")`` restores numpy's ``@`` (the reference in that benchmark).
The two give the same float32 numbers up to summation order.
"""

from __future__ import annotations

import warnings

import numpy as np

_BACKEND = "torch"


def set_backend(name: str) -> str:
    """Use ``"torch"`` (default) or ``"numpy"`` for :func:`scores`; returns the previous one."""
    global _BACKEND
    if name not in ("torch", "numpy"):
        raise ValueError(f"gemm backend must be 'torch' or 'numpy', got {name!r}")
    old, _BACKEND = _BACKEND, name
    return old


def backend() -> str:
    """The backend :func:`scores` uses now."""
    return _BACKEND


def _tensor(x: np.ndarray):  # torch stays an import-time-optional dependency here
    import torch

    with warnings.catch_warnings():  # read-only shared maps: torch only reads them
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(x)


def scores(q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Inner products ``q @ x.T``.

    Args:
        q: ``float32 [B, d]`` (or ``[d]``) queries.
        x: ``float32 [n, d]`` database rows (may be a read-only memory map).

    Returns:
        ``float32 [B, n]`` (or ``[n]`` for a 1-D ``q``).
    """
    q = np.ascontiguousarray(q, dtype=np.float32)
    x = np.asarray(x, dtype=np.float32)
    if _BACKEND == "numpy" or x.size == 0 or q.size == 0:
        return q @ x.T
    import torch

    with torch.inference_mode():
        if q.ndim == 1:
            return torch.mv(_tensor(x), _tensor(q)).numpy()
        return torch.matmul(_tensor(q), _tensor(x).T).numpy()
