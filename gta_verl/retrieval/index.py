"""Faiss inner-product indexes over L2-normalized vectors (cosine search).

faiss 1.15 switches from its scalar kernel to BLAS only when a search has at least
``distance_compute_blas_threshold`` queries; its default (128000) keeps batched
searches on the scalar path, measured 8.6× slower for a 256-query batch here.
:func:`use_blas_for_batches` lowers it once per process.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numba
import numpy as np

from gta_verl.retrieval import gemm

BLAS_THRESHOLD = 8
CHUNK_ROWS = 16_384  # database rows per BLAS block: [B, 16384] float32 scores stay in cache
#: Rows an ``ivfpq`` index needs: 39 training points per centroid of each 8-bit (256-code) sub-quantizer.
PQ_MIN_ROWS = 39 * 256


def pq_subquantizers(dim: int) -> int:
    """Sub-quantizers of an ``ivfpq`` index: one per 8 dimensions (1 byte each), a divisor of ``dim``.

    >>> pq_subquantizers(384), pq_subquantizers(64), pq_subquantizers(30)
    (48, 8, 3)
    """
    return next(m for m in range(max(1, dim // 8), 0, -1) if dim % m == 0)


@numba.njit(cache=True, nogil=True)
def _insert(vals, ids, s, idx, sign):
    """Insert ``s`` (id ``idx``) into the full row ``vals``, kept sorted by ``sign · value`` descending.

    The last entry drops out; ties keep the earlier (lower-id) entry first.
    """
    pos = len(vals) - 1
    while pos > 0 and sign * vals[pos - 1] < sign * s:
        vals[pos] = vals[pos - 1]
        ids[pos] = ids[pos - 1]
        pos -= 1
    vals[pos] = s
    ids[pos] = idx


@numba.njit(cache=True, nogil=True)
def _topk_min_update(scores, offset, k, top_s, top_i, mins):
    """Fold a ``[B, m]`` score block into running top-``k`` (sorted desc) and minima."""
    n_b, m = scores.shape
    for b in range(n_b):
        lo = mins[b]
        for j in range(m):
            s = scores[b, j]
            if s < lo:
                lo = s
            if s > top_s[b, k - 1]:
                _insert(top_s[b], top_i[b], s, offset + j, 1.0)
        mins[b] = lo


@numba.njit(cache=True, nogil=True)
def _cand_update(scores, offset, top_s, top_i, bot_s, bot_i):
    """Fold a ``[B, m]`` block into running top-C (desc) and bottom-C (asc) candidate lists."""
    n_b, m = scores.shape
    c = top_s.shape[1]
    for b in range(n_b):
        for j in range(m):
            s = scores[b, j]
            if s > top_s[b, c - 1]:
                _insert(top_s[b], top_i[b], s, offset + j, 1.0)
            if s < bot_s[b, c - 1]:
                _insert(bot_s[b], bot_i[b], s, offset + j, -1.0)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def bf16_delta(dim: int) -> float:
    """Error bound of one bfloat16 inner product against the float32 one, per unit of ‖q‖·‖h‖.

    Rounding q and h to bfloat16 (unit roundoff u = 2⁻⁸) costs ≤ (2u + u²) Σ|q_i h_i| ≤
    (2u + u²)‖q‖‖h‖; float32 accumulation of ``dim`` terms ≤ dim·2⁻²⁴ of the same sum; rounding the
    output to bfloat16 ≤ u·|ŝ| ≤ u(1 + 2.1u)‖q‖‖h‖. Plus 1e-5 of margin.
    """
    u = 2.0**-8
    return (2 * u + u * u) + dim * 2.0**-24 + u * (1 + 2.1 * u) + 1e-5


BF16_DELTA = bf16_delta(1024)  # 0.0118371: every dimension up to 1024
BF16_CANDIDATES = 128  # candidates kept per query at each end before exact rescoring


class Bf16Scan:
    """Exact top-k and minimum of ``x · q`` via a bfloat16 pre-scan, certified per query.

    A bfloat16 GEMM (AMX / AVX512-BF16 through torch) scores every row within ``δ`` of its
    float32 score (:data:`BF16_DELTA` · ‖q‖ · max‖x‖). Every row of the exact top-k then has a
    bfloat16 score ≥ ŝ_(k) − 2δ (ŝ_(k) the k-th best bfloat16 score), so if the C-th kept
    candidate scores below that line, the candidates contain the exact top-k; they are
    rescored in float32. The same holds for the minimum at the other end. A query whose
    candidates do not clear the line (more than C rows within 2δ) is answered by the float32
    scan. Ties are broken by the lower row id, as in the float32 scan.

    Args:
        vectors: ``float32 [n, dim]`` (may be a read-only memory map).
        bf16_bits: Optional ``uint16 [n, dim]`` bfloat16 bit patterns of ``vectors`` (a shared map).
        max_norm: Optional largest row norm of ``vectors`` (computed when not given).
    """

    def __init__(
        self, vectors: np.ndarray, bf16_bits: np.ndarray | None = None, max_norm: float | None = None
    ) -> None:
        import torch

        self.x = vectors
        step = CHUNK_ROWS * 8
        norms = []
        bits = np.empty(vectors.shape, dtype=np.uint16) if bf16_bits is None else bf16_bits
        if bf16_bits is None or max_norm is None:
            for start in range(0, len(vectors), step):  # one pass: bit patterns and the largest row norm
                blk = np.ascontiguousarray(vectors[start : start + step], dtype=np.float32)
                norms.append(float(np.sqrt(np.einsum("ij,ij->i", blk, blk).max())))
                if bf16_bits is None:
                    bits[start : start + len(blk)] = (
                        torch.from_numpy(blk).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
                    )
        self.bits = bits
        self.max_norm = max_norm if max_norm is not None else max(norms)

    def search_with_min(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(scores [B, k], ids [B, k], mins [B], certified bool [B])``; uncertified rows are garbage."""
        import torch

        n_b, n = len(q), len(self.x)
        c = min(max(BF16_CANDIDATES, k + 1), n)
        top_s = np.full((n_b, c), -np.inf, np.float32)
        top_i = np.full((n_b, c), -1, np.int64)
        bot_s = np.full((n_b, c), np.inf, np.float32)
        bot_i = np.full((n_b, c), -1, np.int64)
        qt = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32)).to(torch.bfloat16)
        with warnings.catch_warnings():  # a read-only shared map: torch only reads it
            warnings.simplefilter("ignore", UserWarning)
            h = torch.from_numpy(self.bits).view(torch.bfloat16)
        rows = max(4096, (1 << 21) // max(n_b, 1))  # a [B, rows] float32 block stays ≤ 8 MB
        for start in range(0, n, rows):
            block = (qt @ h[start : start + rows].T).float().numpy()
            _cand_update(block, start, top_s, top_i, bot_s, bot_i)
        two_delta = 2 * bf16_delta(q.shape[1]) * np.linalg.norm(q, axis=1) * self.max_norm
        full = c >= n
        ok = full | ((top_s[:, -1] < top_s[:, k - 1] - two_delta) & (bot_s[:, -1] > bot_s[:, 0] + two_delta))
        out_s = np.zeros((n_b, k), np.float32)
        out_i = np.zeros((n_b, k), np.int64)
        mins = np.zeros(n_b, np.float32)
        for b in np.flatnonzero(ok):
            cand = np.unique(top_i[b])  # ascending id: a stable sort below breaks ties by lower id
            ex = gemm.scores(q[b], self.x[cand])
            order = np.argsort(-ex, kind="stable")[:k]
            out_s[b], out_i[b] = ex[order], cand[order]
            mins[b] = gemm.scores(q[b], self.x[np.unique(bot_i[b])]).min()
        return out_s, out_i, mins, ok


def use_blas_for_batches(threshold: int = BLAS_THRESHOLD) -> None:
    """Make faiss use BLAS for searches with ``>= threshold`` queries (process-wide)."""
    import faiss

    faiss.cvar.distance_compute_blas_threshold = threshold


def flat_vectors(index) -> np.ndarray:
    """A zero-copy ``float32 [n, dim]`` view of a flat index's stored vectors."""
    import faiss

    return faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)


class VectorIndex:
    """Top-k cosine search over ``vectors`` (``float32 [n, dim]``, rows L2-normalized).

    Args:
        vectors: The database; must be non-empty.
        kind: ``flat`` (exact), ``ivf`` (inverted lists, ``nlist ≈ 4√n``), ``hnsw``, or
            ``ivfpq`` (inverted lists of product-quantized codes, :func:`pq_subquantizers`
            bytes a row instead of ``4·dim``; its scores are approximate). ``ivf`` below
            ``4·39`` rows and ``ivfpq`` below :data:`PQ_MIN_ROWS` are built exact (too few
            rows to train).
        nprobe: Lists probed by ``ivf`` and ``ivfpq``.
        hnsw_m: Neighbours per node of ``hnsw``.
        ef_search: Candidates ``hnsw`` keeps while it searches (at least ``k``): faiss's default 16
            found 0.68 of the exact top-10 of 12k clustered 32-d vectors (40 asked), 128 found 0.94.
        refine: An approximate index returns ``refine × k`` candidates, rescored exactly against
            ``vectors`` (kept by reference): scores are exact inner products and the top-k is exact
            among the candidates; 0 = the index's own top-k and scores.
        scan: How ``flat``'s :meth:`search_with_min` scores rows: ``float32``, ``bfloat16`` (a
            certified-exact bfloat16 pre-scan, :class:`Bf16Scan`) or ``auto`` (bfloat16 where the
            CPU multiplies it natively, :func:`cpu_has_bf16`). The answers are the float32 ones.
    """

    def __init__(
        self,
        vectors: np.ndarray,
        kind: str = "flat",
        nprobe: int = 16,
        hnsw_m: int = 32,
        scan: str = "float32",
        ef_search: int = 128,
        refine: int = 0,
    ) -> None:
        import faiss

        use_blas_for_batches()
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if x.ndim != 2 or len(x) == 0:
            raise ValueError(f"VectorIndex needs a non-empty [n, dim] matrix, got shape {x.shape}")
        self.n, self.dim = x.shape
        self.kind = kind
        self.ef_search = ef_search
        # IVF needs ~39 training points per list; small tables get an exact index.
        index: faiss.Index
        if kind in ("ivf", "ivfpq") and self.n >= (39 * 4 if kind == "ivf" else PQ_MIN_ROWS):
            nlist = int(min(4 * np.sqrt(self.n), self.n // 39))
            quantizer = faiss.IndexFlatIP(self.dim)
            ivf = (
                faiss.IndexIVFFlat(quantizer, self.dim, nlist, faiss.METRIC_INNER_PRODUCT)
                if kind == "ivf"
                else faiss.IndexIVFPQ(
                    quantizer, self.dim, nlist, pq_subquantizers(self.dim), 8, faiss.METRIC_INNER_PRODUCT
                )
            )
            ivf.train(x)
            ivf.nprobe = max(1, min(nprobe, nlist))
            self._keep = quantizer  # the IVF index does not own its quantizer in Python
            index = ivf
        elif kind == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, max(hnsw_m, 4), faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexFlatIP(self.dim)
        index.add(x)
        self._index = index
        # a shared cache may swap in a mapped copy of the same rows (attach_shared_arrays)
        self.vectors: np.ndarray | None = x if refine and not isinstance(index, faiss.IndexFlat) else None
        self.refine = refine
        self._bf16: Bf16Scan | None = None
        if kind == "flat" and (scan == "bfloat16" or scan == "auto" and cpu_has_bf16()):
            self._bf16 = Bf16Scan(x)
        #: The file this index was read from (:meth:`from_faiss`); ``None`` when built here.
        self.source: Path | None = None

    @classmethod
    def from_faiss(
        cls,
        index: Any,
        kind: str,
        *,
        ef_search: int = 128,
        refine: int = 0,
        vectors: np.ndarray | None = None,
        bf16: Bf16Scan | None = None,
        source: Path | None = None,
    ) -> VectorIndex:
        """An index around an already built faiss index (e.g. read from a node cache): nothing is
        trained or added, so a replica starts in the time a read takes instead of an IVF/HNSW build.

        Args:
            index: The faiss index (``ntotal`` rows of ``d`` dims, inner-product metric).
            kind: What it is (``flat``, ``ivf``, ``ivfpq``, ``hnsw``): as :class:`VectorIndex`'s ``kind``.
            ef_search, refine: As :class:`VectorIndex`'s.
            vectors: ``float32 [ntotal, d]``, the indexed rows; kept only where ``refine`` rescores
                an approximate index's candidates.
            bf16: The flat index's bfloat16 pre-scan, if the settings use one.
            source: The file ``index`` was read from.
        """
        import faiss

        self = cls.__new__(cls)
        self.n, self.dim = int(index.ntotal), int(index.d)
        self.kind, self.ef_search, self.refine = kind, ef_search, refine
        self._index = index
        approximate = not isinstance(index, faiss.IndexFlat)
        if refine and approximate and vectors is None:
            raise ValueError("refine rescores an approximate index's candidates: pass the indexed vectors")
        self.vectors = vectors if refine and approximate else None
        self._bf16 = bf16
        self.source = source
        return self

    def check_shape(self, shape: tuple[int, ...], what: str) -> None:
        """Raise ``ValueError`` unless this index holds ``shape = (n, dim)`` vectors (``what`` names them)."""
        if (self.n, self.dim) != tuple(shape):
            raise ValueError(f"the index holds {self.n}×{self.dim} vectors, {what} are {shape[0]}×{shape[1]}")

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores float32 [B, k'], ids int64 [B, k'])``, ``k' = min(k, n)``, best first (id −1: none)."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(k, self.n)
        if self.vectors is not None:
            return self._refined(q, k)
        return self._search(q, k)

    def _refined(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``refine × k`` candidates rescored exactly: ``s = ⟨q, x_c⟩``, best first, ties by id."""
        assert self.vectors is not None
        _, cand = self._search(q, min(self.n, k * self.refine))
        exact = np.einsum("bd,bcd->bc", q, self.vectors[np.maximum(cand, 0)])
        exact[cand < 0] = -np.inf
        order = np.lexsort((cand, -exact), axis=1)[:, :k]
        ids = np.take_along_axis(cand, order, axis=1)
        scores = np.take_along_axis(exact, order, axis=1).astype(np.float32)
        return scores, np.where(np.isfinite(scores), ids, -1)

    def _search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        hnsw = getattr(self._index, "hnsw", None)
        if hnsw is not None:  # set per search: a shared cache may swap in a mapped index
            hnsw.efSearch = max(self.ef_search, k)
        scores, ids = self._index.search(q, k)
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
        if self._bf16 is not None and len(q):
            s, i, m, ok = self._bf16.search_with_min(q, k)
            if not ok.all():  # more than C rows within 2δ of the line: the float32 scan answers
                s[~ok], i[~ok], m[~ok] = self._exact_with_min(q[~ok], k)
            return s, i, m
        return self._exact_with_min(q, k)

    def _exact_with_min(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        top_s = np.full((len(q), k), -np.inf, dtype=np.float32)
        top_i = np.full((len(q), k), -1, dtype=np.int64)
        mins = np.full(len(q), np.inf, dtype=np.float32)
        xb = flat_vectors(self._index)  # re-read: a shared cache may swap in a mapped index
        for start in range(0, self.n, CHUNK_ROWS):
            block = gemm.scores(q, xb[start : start + CHUNK_ROWS])
            _topk_min_update(block, start, k, top_s, top_i, mins)
        return top_s, top_i, mins

    def min_scores(self, queries: np.ndarray) -> np.ndarray:
        """``float32 [B]``: lowest inner product of each query over the database.

        The best match of ``−q`` is the worst match of ``q``; HippoRAG 2's min–max
        normalization of triple scores needs it without scoring every triple twice.
        """
        scores, _ = self.search(-np.asarray(queries, dtype=np.float32), 1)
        return -scores[:, 0]
