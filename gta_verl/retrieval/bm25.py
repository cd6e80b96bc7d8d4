"""The ``bm25`` backend: lexical passage retrieval by BM25 (Lucene's variant, through ``bm25s``).

For a query of tokens ``t`` and a passage ``d`` of ``|d|`` tokens in a KB of ``N`` passages
with mean length ``avgdl``:

    s(q, d) = Σ_{t ∈ q} idf_t · tf_{t,d} / (tf_{t,d} + k1 (1 − b + b |d| / avgdl)),
    idf_t = ln(1 + (N − df_t + 0.5) / (df_t + 0.5))

(``df_t`` = passages holding ``t``, ``tf_{t,d}`` = its count in ``d``; a token repeated in the query
counts once per occurrence). A passage is its ``"title\\ntext"`` (:attr:`Passage.contents`, what
the encoders see), tokens are lowercase ``\\w+`` runs, with no stemming or stopword list. No
encoder is loaded. The top ``k_dense`` passages are R(q); passages matching no query token
score 0 and follow in index order, as a full sort would place them. A query of which no token
occurs in the KB gets no passage and the flag ``no_known_query_token``: every passage would score
0, and the first ``k`` of the KB would read as an answer.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from gta_verl.data.types import HitSource, RetrievalResult
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.passages import PassageRanker

_TOKEN = re.compile(r"\w+")
#: Flag of a query none of whose tokens occurs in the KB (answered with no passage).
FLAG_NO_KNOWN_TOKEN = "no_known_query_token"


def tokenize(text: str) -> list[str]:
    """Lowercase ``\\w+`` tokens of ``text``.

    >>> tokenize("Who founded Rüppell's Café?")
    ['who', 'founded', 'rüppell', 's', 'café']
    """
    return _TOKEN.findall(text.lower())


class BM25Retriever(PassageRanker):
    """Top-K passages by BM25 (open it with :func:`gta_verl.retrieval.backends.open_retriever`).

    Args:
        kb: The knowledge base (its ``passages``; embeddings are not read).
        config: Knobs (``bm25_k1``, ``bm25_b``, ``k_dense``, ``batch_size``, query limits).
    """

    source: HitSource = "bm25"

    def __init__(self, kb: Any, config: RetrieverConfig | None = None) -> None:
        import bm25s

        super().__init__(kb, config)
        self._index = bm25s.BM25(k1=self.config.bm25_k1, b=self.config.bm25_b, method="lucene")
        corpus = [tokenize(p.contents) for p in kb.passages]
        if corpus:
            self._index.index(corpus, show_progress=False)

    def with_config(self, config: RetrieverConfig) -> PassageRanker:
        """As :meth:`PassageRanker.with_config`; new ``bm25_k1`` / ``bm25_b`` rebuild the index."""
        if (config.bm25_k1, config.bm25_b) != (self.config.bm25_k1, self.config.bm25_b):
            super().with_config(config)  # the backend check
            return BM25Retriever(self.kb, config)
        return super().with_config(config)

    def _known_ids(self, text: str) -> list[int]:
        return self._index.get_tokens_ids(tokenize(text)) if self.kb.n_docs else []

    def _run(self, queries: Sequence[str], k: int) -> list[RetrievalResult]:
        results = super()._run(queries, k)
        return [
            r
            if self._known_ids(r.query)
            else dataclasses.replace(r, hits=(), flags=(*r.flags, FLAG_NO_KNOWN_TOKEN))
            for r in results
        ]

    def passage_scores(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [B, n_docs]`` BM25 scores (module docstring) of each query against every passage."""
        out = np.zeros((len(texts), self.kb.n_docs), dtype=np.float32)
        for b, text in enumerate(texts):
            ids = self._known_ids(text)
            if ids:  # no known token: every passage scores 0
                out[b] = self._index.get_scores_from_ids(ids)
        return out
