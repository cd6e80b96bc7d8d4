"""The linear PPR's top documents on a candidate set, without a pass over every document (``basis_index``).

The scores are :func:`.linear.linear_ppr_docs`'s (module docstring of :mod:`.linear`): for query ``b``
and document ``v``

    r_v = β_v + π_v,    β_v = (a Z q + c g)_v / T,    π_v = (G p_E)_v / T ≥ 0,
    T = mᵀ p_E + a (1ᵀ G E) q + c 1ᵀ G 1_D,

the *basis part* ``β`` (the dense seeds' response, read off the passage basis) and the *push part*
``π`` (the ≤ 5 entity seeds' response, a forward push: local). :func:`linear_top_approx` computes
``r_v`` exactly, with the same formula, on a candidate set only:

1. ``C`` = the ``n_cand`` documents a :class:`~.basis_index.BasisIndex` proposes for ``[a q ; c]`` —
   the largest ``β_v`` when its search is exact;
2. the push from the entity seeds; it reports ``π`` on ``C`` and the documents it reached with
   ``π_v ≥ β_(k) − β_min`` (``β_(k)`` the k-th largest ``β`` on ``C``, ``β_min`` the smallest; at most
   :data:`PUSH_DOCS` of them, the largest ``π``). Any other document ``v ∉ C`` has, when the search is
   exact, ``β_v ≤ β_min``, so ``r_v < β_min + β_(k) − β_min = β_(k)`` ≤ the k-th best ``r`` on ``C``: it
   cannot be in the top ``k``;
3. ``r_v`` on ``C`` ∪ those documents, top ``k`` by score, ties by document index.

So with an exact search (every list probed, or ``C`` = every document) and at most :data:`PUSH_DOCS`
documents passing step 2, the top ``k`` equals the exact path's (up to float round-off at ties); an
approximate search loses only documents it does not propose, never a score. Nothing here is
proportional to ``n_docs``: one index search, one local push, ``O((n_cand + PUSH_DOCS) · dim)``
rescoring per query.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from gta_verl.retrieval.ppr.basis_index import BasisIndex
from gta_verl.retrieval.ppr.linear import PassageBasis, response_mass
from gta_verl.retrieval.ppr.push import push_graph, push_row, push_scratch, push_threshold
from gta_verl.retrieval.ppr.transition import Transition

#: Documents outside the candidates that the push may add per query (step 2 of the module docstring).
PUSH_DOCS = 1024


@numba.njit(cache=True, nogil=True)
def _reached_docs(
    touched, nt, perm, n_docs, est, res, alpha, f, floor, out_ids, out_vals
):  # pragma: no cover
    """Write the reached documents with push part ``(est + α res) · f ≥ floor`` (the largest when more
    than ``len(out_ids)``) to ``out_*``; return how many."""
    ids = np.empty(nt, np.int64)
    vals = np.empty(nt, np.float64)
    m = 0
    for i in range(nt):
        u = touched[i]
        v = perm[u]
        if v < n_docs:
            val = (est[u] + alpha * res[u]) * f
            if val >= floor:
                ids[m] = v
                vals[m] = val
                m += 1
    cap = len(out_ids)
    if m > cap:
        keep = np.argsort(-vals[:m], kind="mergesort")[:cap]
        ids = ids[keep]
        vals = vals[keep]
        m = cap
    out_ids[:m] = ids[:m]
    out_vals[:m] = vals[:m]
    return m


@numba.njit(parallel=True, cache=True, nogil=True)
def _push_on_docs(indptr, indices, probs, thresh, perm, inv, n_docs, s_ptr, s_ids, s_vals, alpha, scale,
                  cand, floor, n_threads, cand_push, extra_ids, extra_vals, n_extra, out_touched,
                  est_t, res_t, inq_t, seen_t, touched_t, queue_t):  # fmt: skip
    """Every query's push part ``π`` on its candidates ``cand[b]`` and on the reached documents above
    ``floor[b]`` (step 2 of the module docstring); scratch rows ``*_t`` as :func:`.push.push_scratch`."""
    n_q = len(s_ptr) - 1
    for t in numba.prange(n_threads):
        est, res, seen, touched = est_t[t], res_t[t], seen_t[t], touched_t[t]
        for b in range(t, n_q, n_threads):
            nt = push_row(indptr, indices, probs, thresh, s_ptr, s_ids, s_vals, alpha, b, t,
                           est_t, res_t, inq_t, seen_t, touched_t, queue_t)  # fmt: skip
            out_touched[b] = nt
            f = scale[b] / alpha  # est + α·res approximates π = α G p from below (push.py)
            for j in range(cand.shape[1]):
                d = cand[b, j]
                if d >= 0:
                    u = inv[d]  # untouched nodes hold est = res = 0
                    cand_push[b, j] = (est[u] + alpha * res[u]) * f
            n_extra[b] = _reached_docs(touched, nt, perm, n_docs, est, res, alpha, f, floor[b],
                                       extra_ids[b], extra_vals[b])  # fmt: skip
            for i in range(nt):
                u = touched[i]
                est[u] = 0.0
                res[u] = 0.0
                seen[u] = False


def basis_part(
    basis: PassageBasis, docs: np.ndarray, q: np.ndarray, a: np.ndarray, c: np.ndarray, total: np.ndarray
) -> np.ndarray:
    """``float64 [B, m]``: ``β_v = (a (Z q)_v + c g_v) / T`` for the documents ``docs`` ``int64 [B, m]``
    (−1 = none: −inf)."""
    safe = np.maximum(docs, 0)
    zq = np.einsum("bd,bmd->bm", q, basis.doc_response[safe]).astype(np.float64)
    out = (a[:, None] * zq + c[:, None] * basis.ones_response[safe]) / total[:, None]
    out[docs < 0] = -np.inf
    return out


def _prune_floor(beta: np.ndarray, k: int) -> np.ndarray:
    """``float64 [B]``: ``max(β_(k) − β_min, 0)`` over each row's candidates (0 when fewer than ``k``)."""
    valid = np.isfinite(beta)
    lowest = np.where(valid, beta, np.inf).min(axis=1)
    srt = -np.sort(-np.where(valid, beta, -np.inf), axis=1)
    kth = srt[:, k - 1] if beta.shape[1] >= k else np.full(len(beta), -np.inf)
    return np.where(np.isfinite(kth), np.maximum(kth - lowest, 0.0), 0.0)


def _seed_push(
    tr: Transition,
    basis: PassageBasis,
    seeds: sp.csr_matrix,
    total: np.ndarray,
    cand: np.ndarray,
    floor: np.ndarray,
    eps: float,
    n_threads: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run :func:`_push_on_docs`: ``(π on cand [B, C], extra ids [B, P], their π [B, P], touched [B])``,
    ``P`` the most extra documents of a row (ids −1 past each row's count)."""
    indptr, indices, probs, perm, inv = push_graph(tr)
    n_b = seeds.shape[0]
    threads = max(1, min(int(n_threads or numba.get_num_threads()), n_b))
    cand_push = np.zeros(cand.shape)
    extra_ids = np.full((n_b, PUSH_DOCS), -1, np.int64)
    extra_vals = np.zeros((n_b, PUSH_DOCS))
    n_extra = np.zeros(n_b, np.int64)
    touched = np.zeros(n_b, np.int64)
    with push_scratch(tr, threads) as scratch:
        _push_on_docs(
            indptr, indices, probs, push_threshold(tr, eps), perm, inv, basis.n_docs,
            seeds.indptr.astype(np.int64), inv[seeds.indices], seeds.data, float(basis.alpha), 1.0 / total,
            np.ascontiguousarray(cand, dtype=np.int64), floor, threads, cand_push, extra_ids, extra_vals,
            n_extra, touched, *scratch,
        )  # fmt: skip
    width = int(n_extra.max()) if n_b else 0
    return cand_push, extra_ids[:, :width], extra_vals[:, :width], touched


def linear_top_approx(
    tr: Transition,
    basis: PassageBasis,
    index: BasisIndex,
    seeds: sp.csr_matrix,
    query_emb: np.ndarray,
    a: np.ndarray,
    c: np.ndarray,
    k: int,
    n_cand: int,
    eps: float = 1e-6,
    n_threads: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-``k`` documents of ``p_b = seeds_b + a_b E q_b + c_b 1_D`` on candidates only (module docstring).

    Args:
        tr, basis, seeds, query_emb, a, c, eps, n_threads: As :func:`.linear.linear_ppr_docs`.
        index: A :class:`~.basis_index.BasisIndex` over ``basis``.
        k: Documents kept per query.
        n_cand: Candidates asked of ``index`` per query (``≥ k``).

    Returns:
        ``(ids int64 [B, k], scores float64 [B, k], nodes the push touched int64 [B])``, best first,
        ties by document index; ids −1 (score 0) where fewer than ``k`` documents were scored.
    """
    seeds = sp.csr_matrix(seeds, dtype=np.float64)
    q = np.ascontiguousarray(query_emb, dtype=np.float32)
    a = np.asarray(a, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    total = response_mass(basis, seeds, q, a, c)
    cand = index.search(q, a, c, max(n_cand, k))
    beta = basis_part(basis, cand, q, a, c, total)
    floor = _prune_floor(beta, k)
    cand_push, extra, extra_push, touched = _seed_push(tr, basis, seeds, total, cand, floor, eps, n_threads)
    extra = np.where((extra[:, :, None] == cand[:, None, :]).any(axis=2), -1, extra)  # already a candidate
    ids = np.concatenate([cand, extra], axis=1)
    scores = np.concatenate([beta + cand_push, basis_part(basis, extra, q, a, c, total) + extra_push], axis=1)
    scores[ids < 0] = -np.inf
    order = np.lexsort((ids, -scores), axis=1)[:, :k]
    top_ids = np.take_along_axis(ids, order, axis=1)
    top = np.take_along_axis(scores, order, axis=1)
    found = np.isfinite(top)
    # float32 round-off on documents with ~0 score, as linear_ppr_docs clips
    return np.where(found, top_ids, -1), np.where(found, np.maximum(top, 0.0), 0.0), touched
