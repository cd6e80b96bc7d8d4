"""Exact PPR of the hybrid personalization by linearity: a precomputed passage basis + a local push.

The retriever's personalization (HippoRAG 2, GTA-RAG eq 7) is the sum of a *sparse* part, ≤ 5
entity seeds, and a *dense* part, ``w_p`` × min–max-normalized dense score on every document:

    p = p_E + a · E q + c · 1_D,    a = w_p / (max − min),  c = −w_p · min / (max − min)

(``E`` ``[n_docs, dim]`` the passage embeddings, ``q`` the query embedding, max/min of ``E q``;
a flat ``E q`` gives ``a = 0, c = w_p``). PPR with igraph's PRPACK semantics is
``r = y / 1ᵀy`` with ``y = G p`` and ``G = (I − (1 − α) M)^{-1}`` (the dangling term only
rescales; see :func:`gta_verl.retrieval.ppr.batched.batched_ppr`). ``G`` is linear, so on the documents

    y_D = (G p_E)_D + a · Z q + c · g,       Z = (G E)_D  [n_docs, dim],  g = (G 1_D)_D  [n_docs]
    1ᵀy = mᵀ p_E + a · (1ᵀ G E) q + c · 1ᵀ G 1_D,   m = Gᵀ 1  [N]

``Z``, ``g``, ``1ᵀ G E``, ``1ᵀ G 1_D`` and ``m`` depend only on the graph and the passage
embeddings: they are solved once per KB (``dim + 2`` right-hand sides, :func:`build_passage_basis`).
Per query, the dense part is one GEMV against ``Z`` (the same size as the dense passage scores)
and the sparse part is a forward push from ≤ 5 seeds (:mod:`gta_verl.retrieval.ppr.push`), which is
local: its work does not grow with the graph. The normalizer ``1ᵀy`` is exact (from ``m``), so
the push's only error is its leftover residual, which carries the sparse part's share of the mass
(≈ 1 % on the bundled KB, where the dense part holds the rest).

The GEMV against ``Z`` is then the one per-query step whose cost grows with ``n_docs``. Opt-in
(``RetrieverConfig.basis_index``), :mod:`.linear_approx` scores only the candidates that a
maximum-inner-product index over the rows of ``[Z | g]`` proposes for ``[a q ; c]``
(:mod:`.basis_index`), plus the documents the push reached, with the same formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from gta_verl.retrieval import gemm
from gta_verl.retrieval.ppr.fused_power import fused_power_block
from gta_verl.retrieval.ppr.push import push_graph, push_row, push_scratch, push_threshold
from gta_verl.retrieval.ppr.transition import Transition


@dataclass(frozen=True, eq=False)
class PassageBasis:
    """The graph's response to the dense part of the personalization (one per KB and α).

    Attributes:
        doc_response: ``float32 [n_docs, dim]`` ``Z = (G E)_D``, rows in document order.
        ones_response: ``float64 [n_docs]`` ``g = (G 1_D)_D``.
        emb_mass: ``float64 [dim]`` ``1ᵀ G E`` (total mass of each embedding column's response).
        ones_mass: ``1ᵀ G 1_D``.
        node_mass: ``float64 [N]`` ``m = Gᵀ 1`` in original node order (mass of ``G e_u``).
        alpha: The restart probability α the basis was solved for.
    """

    doc_response: np.ndarray
    ones_response: np.ndarray
    emb_mass: np.ndarray
    ones_mass: float
    node_mass: np.ndarray
    alpha: float

    @property
    def n_docs(self) -> int:
        return self.doc_response.shape[0]


def _solve_block(mat: sp.csr_matrix, rhs: np.ndarray, alpha: float, tol: float) -> np.ndarray:
    """``G rhs`` for one block ``rhs`` ``[N, b]`` (any sign) by the fused power iteration, no dangling
    restart.

    ``x ← α b + (1 − α) M x`` converges to ``α G b`` (L1 contraction 1 − α); columns are scaled to
    unit L1 first so that ``tol`` is relative. Returns float64 ``[N, b]``.
    """
    scale = np.abs(rhs).sum(axis=0, dtype=np.float64)
    scale[scale == 0] = 1.0
    b = np.ascontiguousarray(rhs / scale.astype(rhs.dtype), dtype=mat.dtype)
    x, _ = fused_power_block(mat, np.zeros(0, dtype=np.int64), b, alpha, tol, max_iter=200)
    return x.astype(np.float64) * (scale / alpha)


def build_passage_basis(
    tr: Transition,
    passage_emb: np.ndarray,
    alpha: float = 0.5,
    tol: float = 1e-7,
    block: int | None = None,
    dtype: type = np.float32,
) -> PassageBasis:
    """Solve the ``dim + 2`` systems of :class:`PassageBasis` (documents are nodes ``0..n_docs−1``).

    Args:
        tr: The KB graph's transition (undirected; from ``build_transition``).
        passage_emb: ``float [n_docs, dim]`` passage embeddings (the dense scores' ``E``).
        alpha: Restart probability α.
        tol: Relative L1 change at which each column stops (float32's floor is ≈ 1e-7).
        block: Columns solved together (memory ≈ ``N · block`` × 24 bytes); default 64, fewer
            above 2 M nodes so that a block stays near 3 GB.
        dtype: Iterate dtype of the solver.

    Returns:
        The basis; building it costs about ``dim + 2`` queries of the fused solver.
    """
    if tr.sym is None:
        raise ValueError("the passage basis needs an undirected graph's Transition (from build_transition)")
    n = tr.n_nodes
    emb = np.asarray(passage_emb)
    n_docs, dim = emb.shape
    indptr, indices, probs, perm, inv = push_graph(tr)  # also the transposed system's matrix, below
    doc_pos = inv[:n_docs]  # internal positions of documents 0..n_docs−1
    block = block or int(np.clip(2**27 // max(n, 1), 8, 64))
    mat = tr.matrix.astype(dtype)
    cols = np.concatenate([emb, np.ones((n_docs, 1), emb.dtype)], axis=1)  # [E | 1_D]
    doc_resp = np.empty((n_docs, dim + 1))
    col_mass = np.empty(dim + 1)
    for start in range(0, dim + 1, block):
        rhs = np.zeros((n, min(block, dim + 1 - start)), dtype=dtype)
        rhs[doc_pos] = cols[:, start : start + block]
        sol = _solve_block(mat, rhs, alpha, tol)
        doc_resp[:, start : start + block] = sol[doc_pos]
        col_mass[start : start + block] = sol.sum(axis=0)
        del rhs, sol
    # m = Gᵀ1 solves the transposed system: Mᵀ = D^{-1} A is the push graph's row-stochastic P
    p_rows = sp.csr_matrix((probs.astype(dtype), indices, indptr), shape=(n, n))
    node_mass = np.empty(n)
    node_mass[perm] = _solve_block(p_rows, np.ones((n, 1), dtype=dtype), alpha, tol)[:, 0]
    return PassageBasis(
        doc_response=np.ascontiguousarray(doc_resp[:, :dim], dtype=np.float32),
        ones_response=doc_resp[:, dim].copy(),
        emb_mass=col_mass[:dim].copy(),
        ones_mass=float(col_mass[dim]),
        node_mass=node_mass,
        alpha=float(alpha),
    )


@numba.njit(parallel=True, cache=True, nogil=True)
def _push_add(
    indptr,
    indices,
    probs,
    thresh,
    perm,
    n_docs,
    s_ptr,
    s_ids,
    s_vals,
    alpha,
    scale,
    n_threads,
    out,
    out_touched,
    est_t,
    res_t,
    inq_t,
    seen_t,
    touched_t,
    queue_t,
):  # pragma: no cover - jit
    """Add ``scale_b · (G p_b)`` on documents to ``out[b]`` for every query's sparse seeds (forward push).

    ``*_t`` are per-thread scratch rows ``[n_threads, N]`` (zero / False on entry, left so on exit:
    only touched entries are reset, so a call costs nothing proportional to N).
    """
    n_q = len(s_ptr) - 1
    for t in numba.prange(n_threads):
        est, res, seen, touched = est_t[t], res_t[t], seen_t[t], touched_t[t]
        for b in range(t, n_q, n_threads):
            nt = push_row(indptr, indices, probs, thresh, s_ptr, s_ids, s_vals, alpha, b, t,
                           est_t, res_t, inq_t, seen_t, touched_t, queue_t)  # fmt: skip
            out_touched[b] = nt
            for i in range(nt):
                u = touched[i]
                v = perm[u]
                if v < n_docs:
                    # est + α·res approximates π = α G p from below (push.py's error bound)
                    out[b, v] += (est[u] + alpha * res[u]) / alpha * scale[b]
                est[u] = 0.0
                res[u] = 0.0
                seen[u] = False


def response_mass(
    basis: PassageBasis, seeds: sp.csr_matrix, q: np.ndarray, a: np.ndarray, c: np.ndarray
) -> np.ndarray:
    """``float64 [B]``: each row's normalizer ``1ᵀy = mᵀ p_E + a (1ᵀ G E) q + c 1ᵀ G 1_D`` (module docstring).

    Raises:
        ValueError: If a row's normalizer is not positive (an all-zero personalization).
    """
    a = np.asarray(a, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    # einsum, not @: a [B, dim] float64 GEMV would wake numpy's BLAS pool (see gemm.py)
    total = (
        seeds @ basis.node_mass
        + a * np.einsum("bd,d->b", q.astype(np.float64), basis.emb_mass)
        + c * basis.ones_mass
    )
    if np.any(total <= 0):
        raise ValueError(f"personalization rows {np.flatnonzero(total <= 0)[:5].tolist()} are all zero")
    return np.asarray(total, dtype=np.float64)


def _basis_scores(
    basis: PassageBasis, seeds: sp.csr_matrix, q: np.ndarray, a: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The basis part ``a Z q + c g`` of every document's score, and each row's normalizer.

    Returns:
        ``(float64 [B, n_docs]`` scores divided by the row's normalizer, ``float64 [B]`` the normalizers)``.
    """
    a = np.asarray(a, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    total = response_mass(basis, seeds, q, a, c)
    out = gemm.scores(q, basis.doc_response).astype(np.float64)  # [B, n_docs]
    out *= a[:, None]
    out += c[:, None] * basis.ones_response[None, :]
    out /= total[:, None]
    return out, total


def _add_seed_push(
    tr: Transition,
    basis: PassageBasis,
    seeds: sp.csr_matrix,
    total: np.ndarray,
    eps: float,
    n_threads: int | None,
    out: np.ndarray,
    touched: np.ndarray,
) -> None:
    """Add the sparse seeds' part of the documents' scores to ``out`` in place (forward push).

    Row ``b`` is scaled by ``1 / total[b]``; ``touched[b]`` gets the nodes its push touched.
    """
    indptr, indices, probs, perm, inv = push_graph(tr)
    threads = max(1, min(int(n_threads or numba.get_num_threads()), seeds.shape[0]))
    with push_scratch(tr, threads) as scratch:
        _push_add(
            indptr,
            indices,
            probs,
            push_threshold(tr, eps),
            perm,
            basis.n_docs,
            seeds.indptr.astype(np.int64),
            inv[seeds.indices],
            seeds.data,
            float(basis.alpha),
            1.0 / total,
            threads,
            out,
            touched,
            *scratch,
        )


def linear_ppr_docs(
    tr: Transition,
    basis: PassageBasis,
    seeds: sp.csr_matrix,
    query_emb: np.ndarray,
    a: np.ndarray,
    c: np.ndarray,
    eps: float = 1e-6,
    n_threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """PPR scores of every document for ``p_b = seeds_b + a_b E q_b + c_b 1_D`` (module docstring).

    Args:
        tr: The transition the basis was built on.
        basis: From :func:`build_passage_basis` with the retriever's α.
        seeds: ``csr [B, N]`` non-negative sparse part (entity seeds), original node order.
        query_emb: ``float32 [B, dim]`` query embeddings ``q``.
        a: ``float [B]`` coefficient of ``E q``; ``c``: ``float [B]`` coefficient of ``1_D``
            (together ``a E q + c 1_D ≥ 0`` on every document).
        eps: Push residual threshold per unit of weighted degree, in units of the
            personalization as given (entity weights ≤ 1, document weights ``w_p`` × [0, 1]): a
            document's unnormalized score ``y_v`` is low by at most ``eps · s_v / α``. Stated on
            this scale, not on the normalized probability (which shrinks as ``1/n_docs``), both the
            push's work (≤ ``‖p_E‖₁ / (α eps)`` edge updates) and its error relative to the gaps
            between documents' scores stay the same as the corpus grows.
        n_threads: numba threads for the push (queries are split over them).

    Returns:
        ``(float64 [B, n_docs]`` PPR probabilities of the documents (the same numbers as the
        document entries of ``batched_ppr``'s rows), ``int64 [B]`` nodes the push touched).
    """
    seeds = sp.csr_matrix(seeds, dtype=np.float64)
    out, total = _basis_scores(basis, seeds, np.asarray(query_emb, dtype=np.float32), a, c)
    touched = np.zeros(seeds.shape[0], np.int64)
    if seeds.nnz:
        _add_seed_push(tr, basis, seeds, total, eps, n_threads, out, touched)
    np.maximum(out, 0.0, out=out)  # float32 GEMV round-off on documents with ~0 score
    return out, touched
