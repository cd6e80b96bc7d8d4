"""Faiss inner-product indexes over L2-normalized vectors (cosine search).

faiss 1.15 switches from its scalar kernel to BLAS only when a search has at least
``distance_compute_blas_threshold`` queries; its default (128000) keeps batched
searches on the scalar path, measured 8.6× slower for a 256-query batch here.
:func:`use_blas_for_batches` lowers it once per process.
"""

from __future__ import annotations

import numba
import numpy as np

BLAS_THRESHOLD = 8
CHUNK_ROWS = 16_384  # database rows per BLAS block: [B, 16384] float32 scores stay in cache


@numba.njit(cache=True, nogil=True)
def _topk_min_update(scores, offset, k, top_s, top_i, mins):
    """Fold a ``[B, m]`` score block into running top-``k`` (sorted desc) and minima."""
    n_b, m = scores.shape
    for b in range(n_b):
        lo = mins[b]
        worst = top_s[b, k - 1]
        for j in range(m):
            s = scores[b, j]
            if s < lo:
                lo = s
            if s > worst:  # insertion into the short sorted list; ties keep the lower id
                pos = k - 1
                while pos > 0 and top_s[b, pos - 1] < s:
                    top_s[b, pos] = top_s[b, pos - 1]
                    top_i[b, pos] = top_i[b, pos - 1]
                    pos -= 1
                top_s[b, pos] = s
                top_i[b, pos] = offset + j
                worst = top_s[b, k - 1]
        mins[b] = lo


def use_blas_for_batches(threshold: int = BLAS_THRESHOLD) -> None:
    """Make faiss use BLAS for searches with ``>= threshold`` queries (process-wide)."""
    import faiss

    faiss.cvar.distance_compute_blas_threshold = threshold


def _flat_vectors(index) -> np.ndarray:
    """A zero-copy ``float32 [n, dim]`` view of a flat index's stored vectors."""
    import faiss

    return faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)


class VectorIndex:
    """Top-k cosine search over ``vectors`` (``float32 [n, dim]``, rows L2-normalized).

    Args:
        vectors: The database; must be non-empty.
        kind: ``flat`` (exact), ``ivf`` (inverted lists, ``nlist ≈ 4√n``) or ``hnsw``.
        nprobe: Lists probed by ``ivf``.
        hnsw_m: Neighbours per node of ``hnsw``.
    """

    def __init__(self, vectors: np.ndarray, kind: str = "flat", nprobe: int = 16, hnsw_m: int = 32) -> None:
        import faiss

        use_blas_for_batches()
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if x.ndim != 2 or len(x) == 0:
            raise ValueError(f"VectorIndex needs a non-empty [n, dim] matrix, got shape {x.shape}")
        self.n, self.dim = x.shape
        self.kind = kind
        # IVF needs ~39 training points per list; small tables get an exact index.
        if kind == "ivf" and self.n >= 39 * 4:
            nlist = int(min(4 * np.sqrt(self.n), self.n // 39))
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
            index.train(x)
            index.nprobe = max(1, min(nprobe, nlist))
            self._keep = quantizer  # the IVF index does not own its quantizer in Python
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, max(hnsw_m, 4), faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexFlatIP(self.dim)
        index.add(x)
        self._index = index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(scores float32 [B, k'], ids int64 [B, k'])``, ``k' = min(k, n)``, best first."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        scores, ids = self._index.search(q, min(k, self.n))
        return scores, ids

    def search_with_min(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Top-``k`` and each query's lowest inner product, in **one** pass for ``flat``.

        HippoRAG 2's min–max normalization needs the worst triple score as well as the
        best ``k``; the exact index scores every vector anyway, so both come out of the
        same BLAS products (blocks of ``CHUNK_ROWS`` rows), instead of a second search
        with ``−q``. Approximate indexes fall back to :meth:`search` + :meth:`min_scores`.

        Returns:
            ``(scores float32 [B, k'], ids int64 [B, k'], mins float32 [B])``.
        """
        import faiss

        q = np.ascontiguousarray(queries, dtype=np.float32)
        if not isinstance(self._index, faiss.IndexFlat):
            scores, ids = self.search(q, k)
            return scores, ids, self.min_scores(q)
        k = min(k, self.n)
        top_s = np.full((len(q), k), -np.inf, dtype=np.float32)
        top_i = np.full((len(q), k), -1, dtype=np.int64)
        mins = np.full(len(q), np.inf, dtype=np.float32)
        xb = _flat_vectors(self._index)  # re-read: a shared cache may swap in a mapped index
        for start in range(0, self.n, CHUNK_ROWS):
            block = q @ xb[start : start + CHUNK_ROWS].T
            _topk_min_update(block, start, k, top_s, top_i, mins)
        return top_s, top_i, mins

    def min_scores(self, queries: np.ndarray) -> np.ndarray:
        """``float32 [B]``: lowest inner product of each query over the database.

        The best match of ``−q`` is the worst match of ``q``; HippoRAG 2's min–max
        normalization of triple scores needs it without scoring every triple twice.
        """
        scores, _ = self.search(-np.asarray(queries, dtype=np.float32), 1)
        return -scores[:, 0]
