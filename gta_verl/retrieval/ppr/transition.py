"""The KB graph prepared for personalized PageRank: the transition every solver reads.

:func:`build_transition` (or :func:`transition_from_edges`) builds it once per KB: the
column-stochastic ``M = A D^{-1}``, its symmetric form ``S = D^{-1/2} A D^{-1/2}`` for the
conjugate-gradient and push solvers, the weighted degrees, and a bandwidth-reducing node order.
Solvers keep what they derive from it (push graphs, torch tensors, scratch) in its ``_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

RCM_MAX_NODES = 2_000_000  # larger graphs keep their node order (see transition_from_edges)


@dataclass(frozen=True, eq=False)
class Transition:
    """A graph prepared for :func:`batched_ppr` (build it once per KB with :func:`build_transition`).

    Attributes:
        matrix: ``csr [N, N]`` column-stochastic ``M = A D^{-1}`` (columns of dangling
            nodes are zero), in internal node order.
        sym: ``csr [N, N]`` symmetric ``S = D^{-1/2} A D^{-1/2}`` when the graph is
            undirected, else ``None`` (then only the power iteration applies).
        strength: ``float64 [N]`` weighted degree ``s`` in internal order.
        perm: ``int64 [N]`` internal index → original node id (a bandwidth-reducing
            reordering for cache locality), or ``None`` for the identity.
    """

    matrix: sp.csr_matrix
    sym: sp.csr_matrix | None
    strength: np.ndarray
    perm: np.ndarray | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def n_nodes(self) -> int:
        return self.matrix.shape[0]

    @property
    def dangling(self) -> np.ndarray:
        """``bool [N]`` nodes without outgoing weight (internal order)."""
        return self.strength <= 0.0


def transition_from_edges(
    n_nodes: int, edges: np.ndarray, weights: np.ndarray | None = None, reorder: bool = True
) -> Transition:
    """Build a :class:`Transition` of an undirected weighted graph from an edge list.

    A self-loop ``(u, u, w)`` adds ``2w`` to ``A[u, u]`` (igraph counts a loop twice in
    an undirected vertex's strength), so results agree with igraph's PRPACK.

    Args:
        n_nodes: N.
        edges: ``int [E, 2]`` node pairs.
        weights: ``float [E]`` non-negative weights; ``None`` → all 1.
        reorder: Renumber nodes by reverse Cuthill–McKee so neighbours sit close in
            memory (fewer cache misses in the sparse product); invisible to callers. Skipped
            above ``RCM_MAX_NODES``: scipy's RCM ran > 15 min on a 1M-document graph (8 M nodes,
            73 M edges) and the fused kernel was not faster with it
            (``benchmarks/retrieval/fused_kernel.py``).

    Returns:
        The prepared transition.

    Raises:
        ValueError: On out-of-range node ids, shape mismatch or negative/non-finite weights.
    """
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    w = np.ones(len(edges)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(edges),):
        raise ValueError(f"weights has shape {w.shape}, expected ({len(edges)},)")
    if len(edges) and (edges.min() < 0 or edges.max() >= n_nodes):
        raise ValueError(f"edge endpoints must lie in [0, {n_nodes}); got {edges.min()}..{edges.max()}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("edge weights must be finite and non-negative")
    rows = np.concatenate([edges[:, 0], edges[:, 1]])
    cols = np.concatenate([edges[:, 1], edges[:, 0]])
    adj = sp.csr_matrix((np.concatenate([w, w]), (rows, cols)), shape=(n_nodes, n_nodes))
    adj.sum_duplicates()
    perm = None
    if reorder and 1 < n_nodes <= RCM_MAX_NODES:
        from scipy.sparse.csgraph import reverse_cuthill_mckee

        perm = np.asarray(reverse_cuthill_mckee(adj, symmetric_mode=True), dtype=np.int64)
        adj = adj[perm][:, perm].tocsr()
    strength = np.asarray(adj.sum(axis=0)).ravel()
    inv = np.divide(1.0, strength, out=np.zeros_like(strength), where=strength > 0)
    inv_sqrt = np.sqrt(inv)
    matrix = (adj @ sp.diags(inv)).tocsr()
    sym = (sp.diags(inv_sqrt) @ adj @ sp.diags(inv_sqrt)).tocsr()
    for m in (matrix, sym):
        m.sort_indices()
    return Transition(matrix=matrix, sym=sym, strength=strength, perm=perm)


def build_transition(graph: Any, weight_attr: str | None = "weight", reorder: bool = True) -> Transition:
    """Build the transition of an undirected ``igraph.Graph`` (the KB graph).

    Args:
        graph: Undirected igraph graph; ``graph.es[weight_attr]`` holds edge weights.
        weight_attr: Edge attribute with weights, or ``None`` for unweighted.
        reorder: See :func:`transition_from_edges`.

    Raises:
        ValueError: If the graph is directed (use :func:`batched_ppr` with a raw
            column-stochastic matrix and ``method="power"`` instead).
    """
    if graph.is_directed():
        raise ValueError("build_transition expects an undirected graph (the KB graph is undirected)")
    edges = np.asarray(graph.get_edgelist(), dtype=np.int64).reshape(-1, 2)
    has_w = weight_attr is not None and weight_attr in graph.es.attributes()
    weights = np.asarray(graph.es[weight_attr], dtype=np.float64) if has_w else None
    return transition_from_edges(graph.vcount(), edges, weights, reorder=reorder)


def as_transition(transition: Transition | sp.spmatrix) -> Transition:
    """``transition`` itself, or a raw column-stochastic matrix wrapped as a directed :class:`Transition`."""
    if isinstance(transition, Transition):
        return transition
    m = sp.csr_matrix(transition, dtype=np.float64)
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"transition must be square, got {m.shape}")
    col = np.asarray(m.sum(axis=0)).ravel()
    if np.any(np.abs(col[col > 0] - 1.0) > 1e-6):
        raise ValueError("a raw transition matrix must be column-stochastic (M = Pᵀ); columns sum to 1 or 0")
    m.sort_indices()
    return Transition(matrix=m, sym=None, strength=col, perm=None)
