"""Local personalized PageRank by forward push (residual threshold), batched with numba.

Same equation as :mod:`gta_verl.retrieval.ppr.batched` (GTA-RAG eq 7, igraph PRPACK semantics):
``r = x / Σx`` with ``x = (I − (1−α) M)^{-1} p`` and ``M = A D^{-1}``. Forward push
(Andersen, Chung & Lang 2006) keeps an estimate ``e`` and a residual ``q`` (``q = p``
at the start) with the invariant

    π(p) = e + Σ_u q_u · π(1_u),        π(p) = α x,

and repeatedly *pushes* a node ``u`` whose residual exceeds ``ε · s_u``
(``s_u`` = weighted degree): ``e_u += α q_u``; every neighbour ``v`` gets
``(1−α) q_u w_uv / s_u``; ``q_u = 0``. With α = 0.5 the walk's mass halves every
step, so only a neighbourhood of the seeds is ever touched: the work is at most
``1 / (α ε)`` edge updates whatever the graph size (per-query cost flat in N).
The returned score is ``e + α q`` (the residual's own first step, a lower bound of
its contribution), divided by the exact ``Σ π = 1 − (1−α) p(isolated nodes)``.

Error: on an undirected graph ``0 ≤ π_v − (e_v + α q_v) ≤ ε s_v`` per node
(each leftover residual ``q_u < ε s_u`` reaches ``v`` with ``π_u(v) = s_v π_v(u) / s_u``).

Queries run in parallel over numba threads (one scratch set per thread, reset only
where touched, so nothing is O(N) per query). Output is the top-``k`` nodes of a
target set (the documents) per query: no dense ``[B, N]`` array is materialized.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from gta_verl.retrieval.ppr.transition import Transition

_JIT: dict[str, Any] = {"cache": True, "nogil": True, "fastmath": False}


@numba.njit(**_JIT)
def _push_one(indptr, indices, probs, thresh, seeds, vals, alpha, est, res, inq, seen, touched, queue):
    """Forward push of one query into zeroed scratch; returns the number of touched nodes."""
    n = len(thresh)
    nt = 0
    head = 0
    tail = 0
    for i in range(len(seeds)):
        u = seeds[i]
        if not seen[u]:
            seen[u] = True
            touched[nt] = u
            nt += 1
        res[u] += vals[i]
    for i in range(len(seeds)):
        u = seeds[i]
        if not inq[u] and res[u] > thresh[u]:
            inq[u] = True
            queue[tail] = u
            tail = (tail + 1) % n
    pending = tail  # queue length (every node is queued at most once at a time)
    beta = 1.0 - alpha
    while pending > 0:
        u = queue[head]
        head = (head + 1) % n
        pending -= 1
        inq[u] = False
        r = res[u]
        res[u] = 0.0
        est[u] += alpha * r
        m = beta * r
        for j in range(indptr[u], indptr[u + 1]):  # isolated node: no neighbours, mass lost
            v = indices[j]
            if not seen[v]:
                seen[v] = True
                touched[nt] = v
                nt += 1
            res[v] += m * probs[j]
            if not inq[v] and res[v] > thresh[v]:
                inq[v] = True
                queue[tail] = v
                tail = (tail + 1) % n
                pending += 1
    return nt


@numba.njit(**_JIT)
def push_row(indptr, indices, probs, thresh, s_ptr, s_ids, s_vals, alpha, b, t,
              est_t, res_t, inq_t, seen_t, touched_t, queue_t):  # fmt: skip
    """:func:`_push_one` of query ``b`` (row ``b`` of the seed CSR ``s_ptr/s_ids/s_vals``) on
    thread ``t``'s scratch rows (``*_t``: :func:`push_scratch`); returns the number of touched nodes."""
    seeds = s_ids[s_ptr[b] : s_ptr[b + 1]]
    vals = s_vals[s_ptr[b] : s_ptr[b + 1]]
    return _push_one(indptr, indices, probs, thresh, seeds, vals, alpha,
                     est_t[t], res_t[t], inq_t[t], seen_t[t], touched_t[t], queue_t[t])  # fmt: skip


@numba.njit(**_JIT)
def _topk_of_touched(touched, nt, is_target, perm, est, res, alpha, scale, k, out_ids, out_vals):
    """Write the best ``k`` target nodes (score desc, original id asc) and reset the scratch."""
    cand_ids = np.empty(nt, np.int64)
    cand_vals = np.empty(nt, np.float64)
    m = 0
    for i in range(nt):
        u = touched[i]
        if is_target[u]:
            cand_ids[m] = perm[u]
            cand_vals[m] = (est[u] + alpha * res[u]) * scale
            m += 1
    cand_ids = cand_ids[:m]
    cand_vals = cand_vals[:m]
    if m > k > 0:  # keep only values ≥ the k-th largest before sorting
        kth = np.partition(cand_vals, m - k)[m - k]
        keep = cand_vals >= kth
        cand_ids = cand_ids[keep]
        cand_vals = cand_vals[keep]
    by_id = np.argsort(cand_ids)
    cand_ids = cand_ids[by_id]
    cand_vals = cand_vals[by_id]
    order = np.argsort(-cand_vals, kind="mergesort")  # stable: ties by original id
    take = min(k, len(order))
    for i in range(take):
        out_ids[i] = cand_ids[order[i]]
        out_vals[i] = cand_vals[order[i]]
    for i in range(nt):
        est[touched[i]] = 0.0
        res[touched[i]] = 0.0


@numba.njit(parallel=True, **_JIT)
def _push_batch(indptr, indices, probs, thresh, is_target, perm, isolated, s_ptr, s_ids, s_vals,
                alpha, k, n_threads, out_ids, out_vals, out_touched,
                est_t, res_t, inq_t, seen_t, touched_t, queue_t):  # fmt: skip
    """Top-``k`` targets of every query's push; ``*_t`` = per-thread :func:`push_scratch` rows."""
    n_q = len(s_ptr) - 1
    for t in numba.prange(n_threads):
        est, res, seen, touched = est_t[t], res_t[t], seen_t[t], touched_t[t]
        for b in range(t, n_q, n_threads):
            lost = 0.0
            for i in range(s_ptr[b], s_ptr[b + 1]):
                if isolated[s_ids[i]]:
                    lost += s_vals[i]
            # rows sum to 1 and Σπ = 1 − (1−α) p(isolated): an isolated seed keeps only α of its mass
            scale = 1.0 / (1.0 - (1.0 - alpha) * lost)
            nt = push_row(indptr, indices, probs, thresh, s_ptr, s_ids, s_vals, alpha, b, t,
                           est_t, res_t, inq_t, seen_t, touched_t, queue_t)  # fmt: skip
            out_touched[b] = nt
            _topk_of_touched(touched, nt, is_target, perm, est, res, alpha, scale, k, out_ids[b], out_vals[b])
            for i in range(nt):
                seen[touched[i]] = False


@contextmanager
def push_scratch(tr: Transition, threads: int) -> Iterator[tuple[np.ndarray, ...]]:
    """Per-thread push scratch ``[threads, N]``, kept with the transition and reused across calls.

    ``(est, res, inq, seen, touched, queue)``: zero / False on entry and left so on exit (a push
    resets only what it touched). Allocating and zeroing it per call cost O(N) (≈ 34 bytes × N
    per thread: 272 MB at 8 M nodes), more than the push itself on large graphs. A concurrent
    caller that finds it in use gets fresh arrays.
    """
    lock, bufs = tr._cache.setdefault("push_scratch", (threading.Lock(), {}))
    n = tr.n_nodes

    def fresh() -> tuple[np.ndarray, ...]:
        return (
            np.zeros((threads, n)),
            np.zeros((threads, n)),
            np.zeros((threads, n), np.bool_),
            np.zeros((threads, n), np.bool_),
            np.empty((threads, n), np.int64),
            np.empty((threads, n), np.int64),
        )

    if not lock.acquire(blocking=False):
        yield fresh()
        return
    try:
        if threads not in bufs:
            bufs.clear()  # one cached set per transition
            bufs[threads] = fresh()
        try:
            yield bufs[threads]
        except BaseException:
            bufs.clear()  # possibly left dirty mid-push: never reuse it
            raise
    finally:
        lock.release()


def per_node(tr: Transition, name: str, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
    """A ``[N]`` array derived from ``tr`` (e.g. the push threshold ``eps · s``), cached for the last ``key``.

    Computing it per call is O(N) work (≈ 10 ms at 8 M nodes) on a path whose push is not.
    """
    hit = tr._cache.get(name)
    if hit is None or hit[0] != key:
        hit = (key, make())
        tr._cache[name] = hit
    return hit[1]


def push_threshold(tr: Transition, eps: float) -> np.ndarray:
    """``eps · s_u`` per node (internal order, as ``tr.strength``), cached per ``eps``."""
    return per_node(tr, "push_thresh", float(eps), lambda: eps * tr.strength)


@dataclass(frozen=True)
class PushResult:
    """Top-``k`` PPR nodes per query.

    Attributes:
        ids: ``int64 [B, k]`` original node ids, best first (−1 = fewer than ``k`` reached).
        scores: ``float64 [B, k]`` PPR scores ``r`` (rows of the full vector sum to 1).
        touched: ``int64 [B]`` nodes the push reached (its work, for benchmarks).
    """

    ids: np.ndarray
    scores: np.ndarray
    touched: np.ndarray


def push_graph(tr: Transition) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row-stochastic ``P = D^{-1} A`` in internal order (row ``u`` = where ``u`` pushes), cached."""
    if "push" not in tr._cache:
        if tr.sym is None:
            raise ValueError("push PPR needs an undirected graph's Transition (from build_transition)")
        s = tr.strength
        sqrt_s = np.sqrt(s)
        inv_sqrt = np.divide(1.0, sqrt_s, out=np.zeros_like(sqrt_s), where=sqrt_s > 0)
        p = (sp.diags(inv_sqrt) @ tr.sym @ sp.diags(sqrt_s)).tocsr()  # D^{-1/2} S D^{1/2} = D^{-1} A
        p.sort_indices()
        n = tr.n_nodes
        perm = tr.perm if tr.perm is not None else np.arange(n, dtype=np.int64)
        inv = np.empty(n, np.int64)
        inv[perm] = np.arange(n, dtype=np.int64)
        tr._cache["push"] = (p.indptr.astype(np.int64), p.indices.astype(np.int64), p.data, perm, inv)
    return tr._cache["push"]


def sparse_rows(personalization: np.ndarray | sp.spmatrix) -> sp.csr_matrix:
    """A ``[B, N]`` personalization as CSR with rows summing to 1 (non-negative, finite, no all-zero row)."""
    m = sp.csr_matrix(personalization, dtype=np.float64)
    m.eliminate_zeros()
    if not np.all(np.isfinite(m.data)) or np.any(m.data < 0):
        raise ValueError("personalization must be finite and non-negative")
    sums = np.asarray(m.sum(axis=1)).ravel()
    if np.any(sums <= 0):
        raise ValueError(f"personalization rows {np.flatnonzero(sums <= 0)[:5].tolist()} are all zero")
    return sp.csr_matrix(sp.diags(1.0 / sums) @ m)  # rows sum to 1, as igraph normalizes the reset


def push_ppr(
    transition: Transition,
    personalization: np.ndarray | sp.spmatrix,
    k: int = 10,
    alpha: float = 0.5,
    eps: float = 1e-7,
    targets: np.ndarray | int | None = None,
    n_threads: int | None = None,
) -> PushResult:
    """Top-``k`` personalized PageRank nodes per query by forward push (eq 7).

    Args:
        transition: From :func:`gta_verl.retrieval.ppr.transition.build_transition` (undirected).
        personalization: ``[B, N]`` non-negative (dense or scipy sparse; a sparse matrix
            is what keeps the cost independent of N); rows are normalized to sum 1.
        k: Nodes returned per query (``N`` = a full ranking of the touched nodes).
        alpha: Restart probability α (igraph damping 1 − α).
        eps: Residual threshold per unit of weighted degree (relative to the row sum);
            score error ≤ ``eps · s_v`` per node, work ≤ ``1 / (α eps)`` edge updates.
        targets: Nodes eligible for the output: ``int`` n → nodes ``0..n−1`` (the
            documents of a KB graph); a ``bool [N]`` mask; ``None`` = all nodes.
        n_threads: numba threads (queries are split over them); default numba's setting.

    Returns:
        :class:`PushResult` with original node ids.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha (restart probability) must be in (0, 1), got {alpha}")
    if eps <= 0 or k < 1:
        raise ValueError(f"need eps > 0 and k >= 1; got {eps}, {k}")
    indptr, indices, probs, perm, inv = push_graph(transition)
    n = transition.n_nodes
    pers = sparse_rows(personalization)
    if pers.shape[1] != n:
        raise ValueError(f"personalization must have shape [B, {n}], got {pers.shape}")
    if isinstance(targets, (int, np.integer)):  # the documents: cached, not O(N) per call
        is_target = per_node(transition, "push_targets", int(targets), lambda: perm < int(targets))
    else:
        mask = np.ones(n, np.bool_) if targets is None else np.asarray(targets, dtype=np.bool_)
        is_target = mask[perm]  # internal order
    isolated = per_node(transition, "push_isolated", None, lambda: transition.strength <= 0)
    b = pers.shape[0]
    threads = max(1, min(int(n_threads or numba.get_num_threads()), b))
    ids = np.full((b, k), -1, np.int64)
    scores = np.zeros((b, k), np.float64)
    touched = np.zeros(b, np.int64)
    with push_scratch(transition, threads) as scratch:
        _push_batch(
            indptr, indices, probs, push_threshold(transition, eps), is_target, perm, isolated,
            pers.indptr.astype(np.int64), inv[pers.indices], pers.data, float(alpha), int(k),
            threads, ids, scores, touched, *scratch,
        )  # fmt: skip
    return PushResult(ids=ids, scores=scores, touched=touched)
