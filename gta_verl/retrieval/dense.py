"""The ``dense`` backend: dense-only passage retrieval, as Search-R1's retrieval server answers.

``s(q, d) = ⟨h_q, h_d⟩``, the inner product of the query's and the passage's embeddings (cosine:
both are L2-normalized), over the KB's own passage embeddings with the KB's own encoder; the
top ``k_dense`` passages are R(q). Its answers equal the graph backend's ``mode="dense"``
ablation; unlike it, nothing of the graph (triple index, PPR transition) is built or held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gta_verl.data.types import HitSource
from gta_verl.retrieval import gemm
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.passages import PassageRanker, check_encoder


class DenseRetriever(PassageRanker):
    """Top-K passages by ``⟨h_q, h_d⟩`` (open it with :func:`gta_verl.retrieval.backends.open_retriever`).

    Args:
        kb: The knowledge base (``passage_emb float32 [n_docs, dim]``, L2-normalized rows;
            a read-only memory map is used as it is).
        embedder: The KB's encoder: ``name``, ``dim``, ``encode(texts) -> float32 [n, dim]``.
        config: Knobs (``k_dense``, ``batch_size``, query limits).

    Raises:
        ValueError: If the embedder differs from the KB's (name or dimension).
    """

    source: HitSource = "dense"

    def __init__(self, kb: Any, embedder: Any, config: RetrieverConfig | None = None) -> None:
        super().__init__(kb, config)
        check_encoder(kb, embedder)
        self.embedder = embedder
        self._passage_emb = np.ascontiguousarray(kb.passage_emb, dtype=np.float32)

    def passage_scores(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [B, n_docs]`` inner products of the encoded queries with every passage."""
        q = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        return gemm.scores(q, self._passage_emb)
