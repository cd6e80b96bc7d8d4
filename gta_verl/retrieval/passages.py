"""What the passage-only backends share: a KB's query encoder and top-k over one score per passage.

The ``dense`` and ``bm25`` backends (:mod:`gta_verl.retrieval.dense`, :mod:`gta_verl.retrieval.bm25`)
differ only in how they score a query against every passage, ``s(q, d)``; ranking, batching,
query checks and the result format are :class:`PassageRanker`'s, so both answer ``retrieve`` and
``rank`` exactly as the graph backend does (one :class:`~gta_verl.data.types.RetrievalResult`
per query, hits best first, ties by document index).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from gta_verl.data.types import HitSource, RetrievalHit, RetrievalResult
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.ppr import topk_stable
from gta_verl.retrieval.queries import prepare_queries, query_cost

#: The encoder a KB without an ``embedder_name`` in its manifest was built with.
DEFAULT_ENCODER = "all-MiniLM-L6-v2"


def load_query_encoder(kb: Any, config: RetrieverConfig | None, allow_download: bool = False) -> Any:
    """The encoder named by the KB's manifest, on ``config.encoder_device``, never cached to disk.

    The encoder is never downloaded unless ``allow_download``; queries are not cached because
    RL issues millions of distinct ones.
    """
    from gta_verl.kb.embed import load_embedder

    name = getattr(kb, "embedder_name", "") or DEFAULT_ENCODER
    device = getattr(config, "encoder_device", "cpu")
    return load_embedder(name, device=device, cache=False, allow_download=allow_download)


def check_encoder(kb: Any, embedder: Any) -> None:
    """Refuse a query encoder other than the one the KB's passages were embedded with.

    Raises:
        ValueError: If the names differ (both known) or the dimensions differ.
    """
    kb_name, emb_name = getattr(kb, "embedder_name", ""), getattr(embedder, "name", "")
    if kb_name and emb_name and kb_name != emb_name:
        raise ValueError(f"the KB was embedded with {kb_name!r} but the query encoder is {emb_name!r}")
    dim = kb.passage_emb.shape[1]
    if dim != getattr(embedder, "dim", dim):
        raise ValueError(f"embedder dim {embedder.dim} != KB embedding dim {dim}")


class PassageRanker:
    """R(q) = the top-K passages by a score ``s(q, d)`` over every passage ``d`` of the KB.

    Subclasses set :attr:`source` and implement :meth:`passage_scores`. ``retrieve`` returns
    the top ``k_dense`` passages per query (the graph backend's ``mode="dense"`` count; Search-R1
    serves 3, the default); ``rank`` the top ``k``, for recall@k.

    Args:
        kb: The knowledge base (its ``passages``; ``n_docs``).
        config: Knobs; the graph knobs (``mode``, ``k_graph``, PPR, fusion) do not apply.
    """

    source: HitSource = "dense"

    def __init__(self, kb: Any, config: RetrieverConfig | None = None) -> None:
        self.kb = kb
        self.config = config or RetrieverConfig()

    def passage_scores(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [B, n_docs]``: ``s(q, d)`` of each prepared query against every passage."""
        raise NotImplementedError

    def top_passages(self, texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int64 [B, k], scores float32 [B, k])``: each query's best ``k`` passages, best first.

        Exact: every passage scored (:meth:`passage_scores`), ties by document index. A backend
        with an index of its own may override it (ids −1 = fewer than ``k`` found).
        """
        scores = self.passage_scores(texts)
        ids = np.stack([topk_stable(row, k) for row in scores]) if len(scores) else np.zeros((0, k), np.int64)
        return ids, np.take_along_axis(scores, ids, axis=1)

    def prepare_queries(self, queries: Sequence[str]) -> tuple[list[str], list[tuple[str, ...]]]:
        """:func:`gta_verl.retrieval.queries.prepare_queries` under this config's limits."""
        return prepare_queries(queries, self.config)

    def query_cost(self, query: str) -> int:
        """:func:`gta_verl.retrieval.queries.query_cost` under this config's limits."""
        return query_cost(query, self.config)

    def warm(self) -> PassageRanker:
        """Nothing is built lazily: the index is ready once constructed."""
        return self

    def with_config(self, config: RetrieverConfig) -> PassageRanker:
        """A retriever sharing this one's KB and index, with another config of the same backend.

        Raises:
            ValueError: If ``config.backend`` names another backend.
        """
        if config.backend != self.config.backend:
            raise ValueError(
                f"with_config keeps the backend ({self.config.backend!r}); open a {config.backend!r} "
                "retriever with gta_verl.retrieval.backends.open_retriever instead"
            )
        other = copy.copy(self)
        other.config = config
        return other

    def _hit(self, doc: int, score: float) -> RetrievalHit:
        p = self.kb.passages[doc]
        return RetrievalHit(doc_id=p.doc_id, title=p.title, text=p.text, score=score, source=self.source)

    def _run(self, queries: Sequence[str], k: int) -> list[RetrievalResult]:
        texts, flags = self.prepare_queries(queries)
        results: list[RetrievalResult] = []
        step = self.config.batch_size  # bounds the [B, n_docs] score matrix
        for start in range(0, len(texts), step):
            t0 = time.perf_counter()
            chunk = texts[start : start + step]
            ids, scores = self.top_passages(chunk, k)
            ms = (time.perf_counter() - t0) * 1000
            for b, text in enumerate(chunk):
                found = zip(ids[b].tolist(), scores[b].tolist(), strict=True)
                hits = tuple(self._hit(d, s) for d, s in found if d >= 0)
                results.append(RetrievalResult(query=text, hits=hits, flags=flags[start + b], latency_ms=ms))
        return results

    def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """The top ``k_dense`` passages of every query, best first (ties by document index).

        Raises:
            ValueError / TypeError: On an empty, whitespace or non-string query (the
                Ray and HTTP clients turn this into an error result).
        """
        return self._run(queries, self.config.k_dense)

    def rank(self, queries: Sequence[str], k: int | None = None) -> list[RetrievalResult]:
        """The first ``k`` passages per query (all by default), for recall@k."""
        k = self.kb.n_docs if k is None else min(k, self.kb.n_docs)
        if k < 1:
            raise ValueError(f"rank() needs k >= 1, got {k}")
        return self._run(queries, k)
