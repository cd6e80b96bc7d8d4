"""The ``dense`` backend: dense-only passage retrieval, as Search-R1's retrieval server answers.

``s(q, d) = ⟨h_q, h_d⟩``, the inner product of the query's and the passage's embeddings (cosine:
both are L2-normalized), over the KB's own passage embeddings with the KB's own encoder; the
top ``k_dense`` passages are R(q). Its answers equal the graph backend's ``mode="dense"``
ablation; unlike it, nothing of the graph (triple index, PPR transition) is built or held.

By default every passage is scored (``passage_index="flat"``: one GEMM, exact). Opt-in,
``passage_index`` = ``ivf`` / ``hnsw`` / ``ivfpq`` searches a faiss index for
``index_refine × k`` candidates and rescores them exactly, ``s(q, d)`` for the candidates only:
the scores stay exact cosines and the top-k is exact among the candidates, so only recall can
drop (measured against the exact top-k in ``tests/retrieval/test_passage_index_on_cpu.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gta_verl.data.types import HitSource
from gta_verl.retrieval import gemm
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.dense_candidates import passage_index_settings, passage_vector_index
from gta_verl.retrieval.index import VectorIndex
from gta_verl.retrieval.passages import PassageRanker, check_encoder


class DenseRetriever(PassageRanker):
    """Top-K passages by ``⟨h_q, h_d⟩`` (open it with :func:`gta_verl.retrieval.backends.open_retriever`).

    Args:
        kb: The knowledge base (``passage_emb float32 [n_docs, dim]``, L2-normalized rows;
            a read-only memory map is used as it is).
        embedder: The KB's encoder: ``name``, ``dim``, ``encode(texts) -> float32 [n, dim]``.
        config: Knobs (``k_dense``, ``batch_size``, query limits, ``passage_index``,
            ``index_refine``, ``ivf_nprobe``, ``hnsw_m``, ``hnsw_ef_search``).

    Raises:
        ValueError: If the embedder differs from the KB's (name or dimension).
    """

    source: HitSource = "dense"

    def __init__(self, kb: Any, embedder: Any, config: RetrieverConfig | None = None) -> None:
        super().__init__(kb, config)
        check_encoder(kb, embedder)
        self.embedder = embedder
        self._passage_emb = np.ascontiguousarray(kb.passage_emb, dtype=np.float32)
        self._index: VectorIndex | None = passage_vector_index(self._passage_emb, self.config)

    def with_config(self, config: RetrieverConfig) -> PassageRanker:
        """As :meth:`PassageRanker.with_config`; other passage index settings rebuild the index."""
        other = super().with_config(config)
        if passage_index_settings(config) != passage_index_settings(self.config):
            return DenseRetriever(self.kb, self.embedder, config)
        return other

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)

    def passage_scores(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [B, n_docs]`` inner products of the encoded queries with every passage."""
        return gemm.scores(self._encode(texts), self._passage_emb)

    def top_passages(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` passages per query: exact, or the approximate index's candidates rescored.

        Returns:
            ``(ids int64 [B, k], scores float32 [B, k])`` best first; ids −1 where the index
            found fewer than ``k`` candidates.
        """
        if self._index is None or k * self.config.index_refine >= self.kb.n_docs:  # a full scan is no dearer
            return super().top_passages(texts, k)
        scores, ids = self._index.search(self._encode(texts), k)
        return ids, scores
