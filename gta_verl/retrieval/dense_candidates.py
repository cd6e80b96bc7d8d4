"""The dense part of R(q) from an approximate passage index, without scoring every passage.

The exact path scores every passage, ``s(q, d) = ⟨h_q, h_d⟩`` for ``d = 1..n_docs`` (``float32
[B, n_docs]``: one GEMM), and reads three things off each row: the top-K_d documents (R_d), and the
row's minimum and maximum, which the personalization's min–max normalization needs (``w_p (s − min) /
(max − min)`` on every document; GTA-RAG eq 7, HippoRAG 2). With ``passage_index`` approximate
(``ivf`` / ``hnsw`` / ``ivfpq``), :func:`dense_candidates` takes all three from the index:

* **top-K_d** = the best K_d of ``index_refine × K_d`` candidates, rescored exactly
  (:meth:`~gta_verl.retrieval.index.VectorIndex.search`): exact cosines, exact order among the
  candidates; a document the index does not propose is missed (recall, never score, is lost);
* **max** ≈ ``ŝ_max`` = the best rescored candidate: an exact cosine, ``≤`` the true maximum (equal
  when the index finds the best passage, which the top-K_d needs anyway);
* **min** ≈ ``ŝ_min`` = ``−`` the best rescored candidate of the same index searched with ``−q``
  (the passage nearest the query's antipode, ``max_d ⟨−q, h_d⟩ = −min_d ⟨q, h_d⟩``): an exact
  cosine, ``≥`` the true minimum (equal when that search finds it).

So ``[ŝ_min, ŝ_max] ⊆ [min, max]``: a passage scoring outside the range gets a normalized score a
little outside ``[0, 1]`` (below 0 when its cosine is below ``ŝ_min``). That is the approximation of the
personalization's dense part; the ``linear`` PPR carries it as it is (its passage basis is linear in
any dense part, :mod:`gta_verl.retrieval.ppr.linear`).

Any other passage's exact cosine is one dot product away: :class:`DenseRow` answers it for a document
outside the candidates (score fusion reads the cosines of graph hits).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from gta_verl.retrieval.index import VectorIndex
from gta_verl.retrieval.ppr.solve import topk_stable


def passage_vector_index(passage_emb: np.ndarray, config: Any) -> VectorIndex | None:
    """The approximate ``config.passage_index`` over ``passage_emb`` (``float32 [n_docs, dim]``), or
    ``None`` for ``flat`` (the exact scan needs no index) or an empty KB."""
    if config.passage_index == "flat" or not len(passage_emb):
        return None
    return VectorIndex(
        passage_emb,
        config.passage_index,
        config.ivf_nprobe,
        config.hnsw_m,
        "float32",
        config.hnsw_ef_search,
        config.index_refine,
    )


def passage_index_settings(config: Any) -> tuple[object, ...]:
    """The knobs a passage index is built from: another value means another index."""
    c = config
    return (c.passage_index, c.ivf_nprobe, c.hnsw_m, c.hnsw_ef_search, c.index_refine)


class DenseRow(Mapping[int, float]):
    """One query's dense scores, by document index, as far as the approximate index found them.

    A mapping over every document ``0..n_docs−1``: a candidate's score is its rescored cosine, any
    other document's is computed on demand (``⟨q, h_d⟩``, exact). :meth:`top` ranks the candidates.

    Args:
        ids: ``int64 [m]`` candidates, best first (−1 = none).
        scores: ``float32 [m]`` their exact cosines.
        query: ``float32 [dim]`` the query embedding.
        passage_emb: ``float32 [n_docs, dim]`` the passage embeddings (by reference).
    """

    def __init__(
        self, ids: np.ndarray, scores: np.ndarray, query: np.ndarray, passage_emb: np.ndarray
    ) -> None:
        keep = ids >= 0
        self.ids, self.scores = ids[keep], scores[keep]
        self.query, self.passage_emb = query, passage_emb
        self._known = dict(zip(self.ids.tolist(), self.scores.tolist(), strict=True))

    def __getitem__(self, doc: int) -> float:
        d = int(doc)
        if d not in self._known:
            if not 0 <= d < len(self.passage_emb):
                raise KeyError(doc)
            self._known[d] = float(np.dot(self.query, self.passage_emb[d]))
        return self._known[d]

    def __len__(self) -> int:
        return len(self.passage_emb)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.passage_emb)))

    def top(self, k: int) -> np.ndarray:
        """``int64 [≤ k]``: the best ``k`` candidates, best first (ties by document index)."""
        return self.ids[:k].astype(np.int64)


@dataclass(frozen=True, eq=False)
class DenseCandidates:
    """The dense part of a batch from an approximate passage index (module docstring).

    Attributes:
        ids: ``int64 [B, m]`` the best rescored candidates, best first (−1 = none).
        scores: ``float32 [B, m]`` their exact cosines.
        lo: ``float64 [B]`` ``ŝ_min``, the stand-in for each row's minimum cosine.
        hi: ``float64 [B]`` ``ŝ_max``, the stand-in for its maximum.
        queries: ``float32 [B, dim]`` the query embeddings.
        passage_emb: ``float32 [n_docs, dim]`` the passage embeddings (by reference).
    """

    ids: np.ndarray
    scores: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    queries: np.ndarray
    passage_emb: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, rows: int | np.integer) -> DenseRow: ...
    @overload
    def __getitem__(self, rows: np.ndarray) -> DenseCandidates: ...
    def __getitem__(self, rows: int | np.integer | np.ndarray) -> DenseRow | DenseCandidates:
        """Row ``b`` as a :class:`DenseRow`, or the batch restricted to ``rows`` (a mask or indices),
        as ``dense[b]`` / ``dense[mask]`` read a full score matrix."""
        if isinstance(rows, (int, np.integer)):
            return DenseRow(self.ids[rows], self.scores[rows], self.queries[rows], self.passage_emb)
        return DenseCandidates(
            self.ids[rows],
            self.scores[rows],
            self.lo[rows],
            self.hi[rows],
            self.queries[rows],
            self.passage_emb,
        )


#: A batch's dense scores: every passage's (``float32 [B, n_docs]``, exact) or the index's candidates.
DenseBatch = np.ndarray | DenseCandidates


def dense_candidates(
    index: VectorIndex, queries: np.ndarray, k: int, passage_emb: np.ndarray
) -> DenseCandidates:
    """Top-``k`` documents and the min–max range of each query's dense scores, from ``index``.

    Args:
        index: The approximate passage index (:func:`passage_vector_index`, ``refine`` ≥ 1).
        queries: ``float32 [B, dim]`` L2-normalized query embeddings.
        k: Documents wanted per query (≥ 1).
        passage_emb: The rows ``index`` was built from.

    Returns:
        The :class:`DenseCandidates`; a query the index finds nothing for gets ``lo = hi = 0``
        (a flat row: every document normalized to 1, as the exact path does for a flat row).
    """
    q = np.ascontiguousarray(queries, dtype=np.float32)
    scores, ids = index.search(q, max(1, k))
    anti, anti_ids = index.search(-q, 1)
    found = ids[:, 0] >= 0
    hi = np.where(found, scores[:, 0], 0.0).astype(np.float64)
    lo = np.where(anti_ids[:, 0] >= 0, -anti[:, 0].astype(np.float64), hi)
    return DenseCandidates(ids, scores, np.minimum(lo, hi), hi, q, passage_emb)


def dense_range(dense: DenseBatch) -> tuple[np.ndarray, np.ndarray]:
    """``(min float64 [B], max float64 [B])`` of each row's dense scores: exact for a full score
    matrix, the index's ``(ŝ_min, ŝ_max)`` for :class:`DenseCandidates`."""
    if isinstance(dense, DenseCandidates):
        return dense.lo, dense.hi
    return dense.min(axis=1).astype(np.float64), dense.max(axis=1).astype(np.float64)


def top_dense(row: np.ndarray | DenseRow, k: int) -> np.ndarray:
    """The best ``k`` documents of one row, best first, ties by document index."""
    if isinstance(row, DenseRow):
        return row.top(k)
    return topk_stable(row, k)
