"""The one entry to PPR for the retriever: top documents of a batch of hybrid personalizations.

A retriever's personalization (HippoRAG 2, GTA-RAG eq 7) has a sparse part, the entity seeds,
and a dense part, ``passage_node_weight`` × the min–max-normalized dense score on the documents
(all of them, or the best ``passage_seed_top``). :func:`ppr_top_docs` takes both parts and the
:class:`~gta_verl.retrieval.ppr.choice.Solver` chosen for the config, and answers with the
top-``k`` documents whichever solver runs: ``linear`` keeps the dense part in its affine form
(one GEMV against the passage basis), the others get the whole personalization.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import scipy.sparse as sp

from gta_verl.retrieval.ppr.basis_index import BasisIndex
from gta_verl.retrieval.ppr.batched import batched_ppr
from gta_verl.retrieval.ppr.choice import Solver
from gta_verl.retrieval.ppr.linear import PassageBasis, linear_ppr_docs
from gta_verl.retrieval.ppr.linear_approx import linear_top_approx
from gta_verl.retrieval.ppr.push import push_ppr
from gta_verl.retrieval.ppr.transition import Transition


class SolverKnobs(Protocol):
    """The knobs the solvers read: ``RetrieverConfig`` has them (its docstring says what each does)."""

    # Read-only properties, so that a frozen dataclass (and a Literal-typed field) satisfies them.
    @property
    def alpha(self) -> float: ...
    @property
    def passage_node_weight(self) -> float: ...
    @property
    def passage_seed_top(self) -> int: ...
    @property
    def ppr_push_eps(self) -> float: ...
    @property
    def ppr_linear_eps(self) -> float: ...
    @property
    def ppr_tol(self) -> float: ...
    @property
    def ppr_max_iter(self) -> int: ...
    @property
    def ppr_block_size(self) -> int: ...
    @property
    def ppr_dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def index_refine(self) -> int: ...


#: Each row's ``(min, max)`` dense score, ``float64 [B]`` each: all the ``linear`` solver reads of them.
DenseRange = tuple[np.ndarray, np.ndarray]


def topk_stable(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest of ``x`` [n], best first, ties by index.

    Equals ``np.argsort(-x, kind="stable")[:k]`` in O(n + k log k).

    >>> topk_stable(np.array([0.1, 0.5, 0.5, 0.2]), 2).tolist()
    [1, 2]
    """
    n = len(x)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, np.int64)
    if k >= n // 4:
        return np.argsort(-x, kind="stable")[:k]
    kth = np.partition(x, n - k)[n - k]
    cand = np.flatnonzero(x >= kth)  # ascending index; ties at the k-th value all kept
    return cand[np.argsort(-x[cand], kind="stable")[:k]]


def _top_docs(scores: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` best scores (all when ``n`` is 0 or ≥ len), any order."""
    if n <= 0 or n >= len(scores):
        return np.arange(len(scores))
    return np.argpartition(-scores, n - 1)[:n]


def minmax_rows(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Rows of ``x`` rescaled to [0, 1] by their ``lo`` / ``hi``; a flat row becomes all 1."""
    span = hi - lo
    return np.where(span[:, None] > 0, (x - lo[:, None]) / np.where(span > 0, span, 1)[:, None], 1.0)


def passage_part(
    dense: np.ndarray, rows: np.ndarray, weight: float, top: int, shape: tuple[int, int]
) -> sp.csr_matrix:
    """The dense part of the personalization on ``rows``: ``weight`` × min–max dense score.

    Args:
        dense: ``float [B, n_docs]`` passage cosines.
        rows: Rows of ``dense`` that get a dense part (the seeded queries).
        weight: ``passage_node_weight``.
        top: Documents seeded per row: the best ``top`` by dense score, or ``0`` = all.
        shape: ``(B, N)`` of the personalization (documents are nodes ``0..n_docs−1``).

    Returns:
        ``csr float64 [B, N]``, empty outside ``rows``.
    """
    dense_norm = minmax_rows(dense, dense.min(axis=1), dense.max(axis=1))
    r_parts, c_parts = [], []
    for b in rows:
        docs = _top_docs(dense[b], top)
        r_parts.append(np.full(len(docs), b, dtype=np.int64))
        c_parts.append(docs)
    r, k = np.concatenate(r_parts), np.concatenate(c_parts)
    return sp.csr_matrix((weight * dense_norm[r, k], (r, k)), shape=shape)


def ppr_top_docs(
    solver: Solver,
    transition: Transition,
    seeds: sp.csr_matrix,
    dense: np.ndarray | DenseRange,
    query_emb: np.ndarray,
    k: int,
    config: SolverKnobs,
    basis: Callable[[], PassageBasis],
    basis_index: Callable[[], BasisIndex | None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Top-``k`` PPR documents (eq 7) of every row's hybrid personalization.

    Args:
        solver: From :func:`~gta_verl.retrieval.ppr.choice.choose_solver`.
        transition: The KB graph's transition (documents are nodes ``0..n_docs−1``).
        seeds: ``csr [B, N]`` entity seeds; every row has some.
        dense: ``float32 [B, n_docs]`` passage cosines of the same queries, or, for the ``linear``
            solver only, just each row's ``(min float64 [B], max float64 [B])`` (all it reads of
            them: the dense part is affine in ``E q``).
        query_emb: ``float32 [B, dim]`` their embeddings (the ``linear`` solver's GEMV).
        k: Documents kept per query.
        config: The solver knobs (a ``RetrieverConfig``).
        basis: Returns the KB's passage basis (called only by the ``linear`` solver).
        basis_index: Returns the index over the basis rows (``basis_index`` knob), or ``None`` for
            the exact GEMV; read only by the ``linear`` solver
            (:func:`~gta_verl.retrieval.ppr.linear_approx.linear_top_approx`).

    Returns:
        ``(ids int64 [B, k], scores float64 [B, k], nodes the push touched int64 [B] or None)``,
        best first, ties by document index (ids −1, score 0: fewer than ``k`` found by an index).
    """
    if solver.method == "linear":
        lo, hi = dense if isinstance(dense, tuple) else _row_range(dense)
        index = basis_index() if basis_index is not None else None
        return _linear_top(transition, basis(), seeds, query_emb, lo, hi, k, config, index)
    if isinstance(dense, tuple):
        raise ValueError(f"the {solver.method!r} solver needs every passage's dense score, not their range")
    return _whole_personalization_top(solver, transition, seeds, dense, k, config)


def _whole_personalization_top(
    solver: Solver,
    transition: Transition,
    seeds: sp.csr_matrix,
    dense: np.ndarray,
    k: int,
    config: SolverKnobs,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`ppr_top_docs` for the solvers that take the whole personalization (``push``, ``fused``,
    ``cg``, ``power``): the entity seeds plus the dense part on every document (or the best
    ``passage_seed_top``)."""
    method = solver.method
    if method == "linear":
        raise ValueError("the linear solver keeps the dense part affine: it is _linear_top's")
    n_docs = dense.shape[1]
    pers = seeds
    if config.passage_node_weight > 0:
        pers = (
            seeds
            + passage_part(
                dense, np.arange(len(dense)), config.passage_node_weight, config.passage_seed_top, seeds.shape
            )
        ).tocsr()
        pers.sum_duplicates()
    if method == "push":
        res = push_ppr(transition, pers, k=k, alpha=config.alpha, eps=config.ppr_push_eps, targets=n_docs)
        return res.ids, res.scores, res.touched
    full = batched_ppr(
        transition,
        pers.toarray(),
        alpha=config.alpha,
        tol=config.ppr_tol,
        max_iter=config.ppr_max_iter,
        block_size=config.ppr_block_size,
        method=method,
        device=config.device,
        dtype=np.float32 if config.ppr_dtype == "float32" else np.float64,
    )[:, :n_docs]
    ids = np.stack([topk_stable(row, k) for row in full])
    return ids, np.take_along_axis(full, ids, axis=1), None


def _row_range(dense: np.ndarray) -> DenseRange:
    return dense.min(axis=1).astype(np.float64), dense.max(axis=1).astype(np.float64)


def _linear_top(
    transition: Transition,
    basis: PassageBasis,
    seeds: sp.csr_matrix,
    q: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    k: int,
    config: SolverKnobs,
    index: BasisIndex | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-``k`` documents by :func:`~gta_verl.retrieval.ppr.linear.linear_ppr_docs`, or on the
    ``index``'s candidates by :func:`~gta_verl.retrieval.ppr.linear_approx.linear_top_approx`.

    The dense part ``w_p (E q − min)/(max − min)`` is affine in ``E q``: ``a E q + c 1``.
    """
    span = hi - lo
    safe = np.where(span > 0, span, 1.0)
    w = config.passage_node_weight
    a = np.where(span > 0, w / safe, 0.0)
    offset = np.where(span > 0, -w * lo / safe, w)  # a flat row is normalized to 1 everywhere
    n_cand = k * config.index_refine
    if index is not None and n_cand < basis.n_docs:  # else the GEMV is no dearer than the candidates
        return linear_top_approx(
            transition, basis, index, seeds, q, a, offset, k, n_cand, config.ppr_linear_eps
        )
    scores, touched = linear_ppr_docs(transition, basis, seeds, q, a, offset, eps=config.ppr_linear_eps)
    ids = np.stack([topk_stable(row, k) for row in scores])
    return ids, np.take_along_axis(scores, ids, axis=1), touched
