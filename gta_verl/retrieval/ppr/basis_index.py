"""A maximum-inner-product index over the linear PPR's basis rows ``[Z | g]`` (opt-in ``basis_index``).

The dense part of a document's linear-PPR score (module docstring of :mod:`.linear`) is, before the
row's normalizer,

    (a · Z q + c · g)_v = ⟨x_v, u⟩,    x_v = [Z_v | g_v]  (row v of X = [Z | g], float32 [n_docs, dim + 1]),
                                        u = [a q ; c]     (a ≥ 0, c of either sign),

so the documents with the largest dense part are the maximum-inner-product rows of ``X`` for the query
``u``. A faiss index over ``X`` proposes them with work that does not grow linearly with ``n_docs``
(``ivf``: ``nprobe`` of ``≈ 4√n`` lists; ``hnsw``: a graph walk), where the exact path is one GEMV
against every row of ``Z``.

Inner product as cosine (Bachrach et al., RecSys 2014): with rows of unequal norms, IVF's lists and
HNSW's neighbourhoods serve inner products poorly, so every row gets one more coordinate,
``√(R² − ‖x_v‖²)`` with ``R = max_v ‖x_v‖``, and is divided by ``R``: all rows are unit vectors, the
query gets 0 in that coordinate, and ``⟨x̃_v, ũ⟩ = ⟨x_v, u⟩ / (R ‖u‖)`` ranks the documents as
``⟨x_v, u⟩`` does. Rows are zero-padded to a multiple of 8 dimensions (``ivfpq``'s one byte per 8).
The index only proposes candidates: their scores are computed exactly from ``Z`` and ``g``
(:mod:`.linear_approx`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gta_verl.retrieval.index import VectorIndex
from gta_verl.retrieval.ppr.linear import PassageBasis

_BLOCK = 65_536  # rows of X built at a time (a float64 [block, dim] temporary stays small)


@dataclass(frozen=True, eq=False)
class BasisIndex:
    """A faiss index over the augmented rows ``x̃_v`` of one :class:`~.linear.PassageBasis` (module docstring).

    Attributes:
        index: The faiss index (``refine`` 0: candidates only).
        basis: The basis whose rows it holds.
        settings: ``(kind, nprobe, hnsw_m, ef_search)`` it was built with.
    """

    index: VectorIndex
    basis: PassageBasis
    settings: tuple[object, ...]

    def search(self, q: np.ndarray, a: np.ndarray, c: np.ndarray, n: int) -> np.ndarray:
        """``int64 [B, min(n, n_docs)]``: the documents with the largest ``⟨x_v, [a q ; c]⟩`` per query,
        as the index finds them (−1 = none).

        Args:
            q: ``float32 [B, dim]`` query embeddings.
            a: ``float [B]`` the coefficients of ``Z q`` (≥ 0).
            c: ``float [B]`` the coefficients of ``g``.
            n: Candidates wanted per query.
        """
        dim = self.basis.doc_response.shape[1]
        u = np.zeros((len(q), self.index.dim), dtype=np.float32)
        u[:, :dim] = np.asarray(a, dtype=np.float32)[:, None] * q
        u[:, dim] = c
        norm = np.linalg.norm(u, axis=1, keepdims=True)
        u /= np.where(norm > 0, norm, 1.0)
        _, ids = self.index.search(u, n)
        return ids


def augmented_rows(basis: PassageBasis) -> np.ndarray:
    """``float32 [n_docs, d']``: the unit rows ``x̃_v = [Z_v | g_v | √(R² − ‖x_v‖²) | 0…] / R``, ``d'`` the
    smallest multiple of 8 ≥ ``dim + 2`` (module docstring)."""
    z, g = basis.doc_response, basis.ones_response
    n, dim = z.shape
    width = -(-(dim + 2) // 8) * 8
    rows = np.zeros((n, width), dtype=np.float32)
    sq = np.empty(n)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        blk = z[start:stop].astype(np.float64)
        sq[start:stop] = np.einsum("ij,ij->i", blk, blk) + g[start:stop] ** 2
        rows[start:stop, :dim] = z[start:stop]
        rows[start:stop, dim] = g[start:stop]
    r2 = float(sq.max()) if n else 0.0
    rows[:, dim + 1] = np.sqrt(np.maximum(r2 - sq, 0.0))
    if r2 > 0:
        rows /= np.float32(np.sqrt(r2))
    return rows


def build_basis_index(
    basis: PassageBasis, kind: str, nprobe: int = 16, hnsw_m: int = 32, ef_search: int = 128
) -> BasisIndex:
    """A :class:`BasisIndex` of ``kind`` (``ivf`` / ``hnsw`` / ``ivfpq``, as
    :class:`~gta_verl.retrieval.index.VectorIndex` builds them) over ``basis``'s rows.

    Memory: faiss keeps its own copy of the rows (``4 d'`` bytes a row for ``ivf`` / ``hnsw``, ``d'/8``
    for ``ivfpq``); the float32 rows built here are freed once it has them.

    Raises:
        ValueError: On ``kind="flat"`` (the exact GEMV needs no index) or an empty basis.
    """
    if kind == "flat":
        raise ValueError("basis_index='flat' is the exact GEMV against Z: there is no index to build")
    settings = (kind, nprobe, hnsw_m, ef_search)
    index = VectorIndex(augmented_rows(basis), kind, nprobe, hnsw_m, "float32", ef_search, refine=0)
    return BasisIndex(index=index, basis=basis, settings=settings)
