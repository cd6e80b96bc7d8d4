"""How a hybrid result list is ordered: fusing the PPR ranking with the dense ranking.

GTA-RAG defines the hybrid *set* R(q) = Dedup(R_g(q) ∪ R_d(q)) (eq 9) but no order;
recall@k needs one, and the policy reads hits top-down. Every method takes the two
rankings (document indices, best first) and returns their deduplicated fusion; the
score-level method (``score``) also reads the PPR scores of the graph ranking and the
dense cosine of every candidate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

DenseScores = Mapping[int, float] | Sequence[float] | np.ndarray


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


def score_fusion(
    graph: Sequence[int],
    dense: Sequence[int],
    graph_scores: Sequence[float],
    dense_scores: DenseScores,
    dense_weight: float,
) -> list[int]:
    """Order the candidates ``graph ∪ dense`` by λ·dense + (1 − λ)·PPR, both normalized.

    Over the candidate set C: the dense cosine is min–max normalized over C (every
    candidate's cosine is known, so both ends are real documents); the PPR score is
    divided by the best PPR score of the graph ranking (PPR is a probability whose
    natural floor is 0), and a candidate outside the graph ranking gets 0, a lower
    bound of its true PPR score, which we do not compute. Both terms are then 1 for
    the best document of their retriever. Ties keep the interleaved order g1, d1, g2 …

    Args:
        graph: Documents by PPR score, best first.
        dense: Documents by dense cosine, best first.
        graph_scores: PPR scores of ``graph``, aligned with it.
        dense_scores: Dense cosine by document index (a full row or a mapping) for
            every document of ``graph`` and ``dense``.
        dense_weight: λ ∈ [0, 1]; 1 = dense order of C, 0 = PPR order then dense.

    Returns:
        Every document of either list exactly once.

    Raises:
        ValueError: If ``graph_scores`` and ``graph`` differ in length or λ ∉ [0, 1].

    >>> score_fusion([5, 1], [1, 7], [0.4, 0.2], {5: 0.1, 1: 0.9, 7: 0.5}, 0.5)
    [1, 5, 7]
    """
    if len(graph_scores) != len(graph):
        raise ValueError(f"graph_scores has {len(graph_scores)} entries for {len(graph)} graph documents")
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")
    order = _interleave(graph, dense)
    cos = np.array([float(dense_scores[d]) for d in order], dtype=np.float64)
    span = cos.max() - cos.min() if len(cos) else 0.0
    d_norm = (cos - cos.min()) / span if span > 0 else np.ones_like(cos)
    ppr = dict(zip((int(g) for g in graph), (float(x) for x in graph_scores), strict=True))
    top = max(ppr.values(), default=0.0)
    g_norm = np.array([ppr.get(d, 0.0) / top if top > 0 else 0.0 for d in order])
    fused = dense_weight * d_norm + (1.0 - dense_weight) * g_norm
    return [order[i] for i in np.argsort(-fused, kind="stable")]


def fuse(
    graph: Sequence[int] | np.ndarray,
    dense: Sequence[int] | np.ndarray,
    method: str = "dense_head",
    dense_head: int = 1,
    rrf_k: float = 60.0,
    graph_scores: Sequence[float] | np.ndarray | None = None,
    dense_scores: DenseScores | None = None,
    dense_weight: float = 0.5,
) -> list[int]:
    """Fuse two rankings of document indices into one deduplicated ranking.

    Args:
        graph: Documents by PPR score, best first.
        dense: Documents by dense cosine, best first.
        method: ``dense_head``: the first ``dense_head`` dense documents, then the
            graph ranking, then the rest of the dense ranking. ``interleave``: g1, d1,
            g2, d2, …. ``rrf``: by Σ 1/(rrf_k + rank). ``graph_first`` /
            ``dense_first``: one whole list, then the other. ``score``: by
            normalized scores (:func:`score_fusion`).
        dense_head: See ``dense_head``.
        rrf_k: See ``rrf``.
        graph_scores: PPR scores aligned with ``graph`` (``score`` only).
        dense_scores: Dense cosine by document index (``score`` only).
        dense_weight: λ of ``score``.

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
    if method == "score":
        if graph_scores is None or dense_scores is None:
            raise ValueError("fusion 'score' needs graph_scores and dense_scores")
        return score_fusion(g, d, [float(x) for x in graph_scores], dense_scores, dense_weight)
    raise ValueError(f"unknown fusion method {method!r}")
