"""The ``bm25`` backend: lexical passage retrieval by BM25 (Lucene's variant, through ``bm25s``).

For a query of tokens ``t`` and a passage ``d`` of ``|d|`` tokens in a KB of ``N`` passages
with mean length ``avgdl``:

    s(q, d) = Σ_{t ∈ q} idf_t · tf_{t,d} / (tf_{t,d} + k1 (1 − b + b |d| / avgdl)),
    idf_t = ln(1 + (N − df_t + 0.5) / (df_t + 0.5))

(``df_t`` = passages holding ``t``, ``tf_{t,d}`` = its count in ``d``; a token repeated in the query
counts once per occurrence). A passage is its ``"title\\ntext"`` (:attr:`Passage.contents`, what
the encoders see), tokens are lowercase ``\\w+`` runs, with no stemming or stopword list. No
encoder is loaded. The top ``k_dense`` passages are R(q); passages matching no query token
score 0 and follow in index order, as a full sort would place them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from gta_verl.data.types import HitSource
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.passages import PassageRanker

_TOKEN = re.compile(r"\w+")


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

    def passage_scores(self, texts: Sequence[str]) -> np.ndarray:
        """``float32 [B, n_docs]`` BM25 scores (module docstring) of each query against every passage."""
        out = np.zeros((len(texts), self.kb.n_docs), dtype=np.float32)
        for b, text in enumerate(texts):
            ids = self._index.get_tokens_ids(tokenize(text)) if self.kb.n_docs else []
            if ids:  # no known token: every passage scores 0
                out[b] = self._index.get_scores_from_ids(ids)
        return out
