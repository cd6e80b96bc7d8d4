"""How a hybrid result list is ordered: fusing the PPR ranking with the dense ranking.

GTA-RAG defines the hybrid *set* R(q) = Dedup(R_g(q) ∪ R_d(q)) (eq 9) but no order;
recall@k needs one, and the policy reads hits top-down. Every method takes the two
rankings (document indices, best first) and returns their deduplicated fusion.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _dedup_concat(*lists: Sequence[int]) -> list[int]:
    seen: set[int] = set()
    out: list[int] = []
    for lst in lists:
        for d in lst:
            d = int(d)
            if d not in seen:
                seen.add(d)
                out.append(d)
    return out


def _interleave(first: Sequence[int], second: Sequence[int]) -> list[int]:
    merged: list[int] = []
    for i in range(max(len(first), len(second))):
        merged.extend(x[i] for x in (first, second) if i < len(x))
    return _dedup_concat(merged)


def _rrf(graph: Sequence[int], dense: Sequence[int], rrf_k: float) -> list[int]:
    score: dict[int, float] = {}
    for ranking in (graph, dense):
        for rank, d in enumerate(ranking):
            score[int(d)] = score.get(int(d), 0.0) + 1.0 / (rrf_k + rank + 1)
    # ties (a document at the same rank in both) keep graph order first: stable sort
    order = _dedup_concat(_interleave(graph, dense))
    return sorted(order, key=lambda d: -score[d])


def fuse(
    graph: Sequence[int] | np.ndarray,
    dense: Sequence[int] | np.ndarray,
    method: str = "dense_head",
    dense_head: int = 1,
    rrf_k: float = 60.0,
) -> list[int]:
    """Fuse two rankings of document indices into one deduplicated ranking.

    Args:
        graph: Documents by PPR score, best first.
        dense: Documents by dense cosine, best first.
        method: ``dense_head``: the first ``dense_head`` dense documents, then the
            graph ranking, then the rest of the dense ranking. ``interleave``: g1, d1,
            g2, d2, …. ``rrf``: by Σ 1/(rrf_k + rank). ``graph_first`` /
            ``dense_first``: one whole list, then the other.
        dense_head: See ``dense_head``.
        rrf_k: See ``rrf``.

    Returns:
        Every document of either list exactly once.

    >>> fuse([5, 1, 2], [1, 7, 5], "dense_head", dense_head=1)
    [1, 5, 2, 7]
    >>> fuse([5, 1, 2], [1, 7, 5], "interleave")
    [5, 1, 7, 2]
    """
    g = [int(x) for x in graph]
    d = [int(x) for x in dense]
    if method == "dense_head":
        return _dedup_concat(d[:dense_head], g, d[dense_head:])
    if method == "interleave":
        return _interleave(g, d)
    if method == "rrf":
        return _rrf(g, d, rrf_k)
    if method == "graph_first":
        return _dedup_concat(g, d)
    if method == "dense_first":
        return _dedup_concat(d, g)
    raise ValueError(f"unknown fusion method {method!r}")
