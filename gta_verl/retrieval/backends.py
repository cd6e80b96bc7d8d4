"""The one seam through which every caller opens a retriever: by backend name, from its config.

``RetrieverConfig.backend`` names the backend (:data:`~gta_verl.retrieval.config.BACKENDS`):

========  ==============================================  ======================================
name      R(q)                                            built from the KB
========  ==============================================  ======================================
``graph`` GTA-RAG's hybrid: Dedup(R_g ∪ R_d) (eq 9)       encoder, triple index, PPR transition
``dense`` top ``k_dense`` by ``⟨h_q, h_d⟩`` (Search-R1)    encoder, passage embeddings
``bm25``  top ``k_dense`` by BM25 (``bm25s``)              passage texts (no encoder)
========  ==============================================  ======================================

Every backend answers ``retrieve(queries) -> list[RetrievalResult]`` and ``rank(queries, k)``
with the same validation, truncation and result format (:class:`RetrievalBackend`), so the
agent loop, the Ray replicas, the HTTP server, rewards and metrics run unchanged on any of
them. Trainer, agent loop, tool, HTTP server, Ray replicas, evaluation, synthesis validation
and the benchmarks open their retriever here and nowhere else
(``tests/retrieval/test_backends_seam_on_cpu.py`` checks it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeGuard

from gta_verl.retrieval.base import RetrievalBackend
from gta_verl.retrieval.config import BACKENDS, Backend, RetrieverConfig
from gta_verl.retrieval.passages import load_query_encoder

__all__ = ["BACKENDS", "open_kb_retriever", "open_retriever"]


def check_backend(name: str) -> Backend:
    """``name`` if it is a backend, else a ``ValueError`` listing the valid ones.

    >>> check_backend("bm25")
    'bm25'
    """
    if not _is_backend(name):
        raise ValueError(f"unknown retriever backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    return name


def _is_backend(name: str) -> TypeGuard[Backend]:
    return name in BACKENDS


def open_kb_retriever(
    kb: Any,
    config: RetrieverConfig | None = None,
    embedder: Any = None,
    allow_download: bool = False,
    fact_index: Any = None,
) -> RetrievalBackend:
    """The ``config.backend`` retriever over an already loaded KB.

    Args:
        kb: The knowledge base (:class:`~gta_verl.kb.knowledge_base.KnowledgeBase`).
        config: Knobs, ``backend`` included (default: the graph backend's defaults).
        embedder: The query encoder; default the one the KB's manifest names, loaded on
            ``config.encoder_device`` (never for ``bm25``, which reads no vectors).
        allow_download: Let that encoder be fetched from the model hub.
        fact_index: ``graph`` only: its unique-fact :class:`~gta_verl.retrieval.index.VectorIndex`,
            already built for ``config`` (a node cache's); default: built on opening.

    Raises:
        ValueError: An unknown backend (listing the valid ones), or an encoder other than the KB's.
    """
    config = config or RetrieverConfig()
    name = check_backend(config.backend)
    if fact_index is not None and name != "graph":
        raise ValueError(f"fact_index is the graph backend's; backend {name!r} has no fact index")
    if name == "bm25":
        from gta_verl.retrieval.bm25 import BM25Retriever

        return BM25Retriever(kb, config)
    if embedder is None:
        embedder = load_query_encoder(kb, config, allow_download)
    if name == "dense":
        from gta_verl.retrieval.dense import DenseRetriever

        return DenseRetriever(kb, embedder, config)
    from gta_verl.retrieval.retriever import GraphRetriever

    return GraphRetriever(kb, embedder, config, fact_index=fact_index)


def open_retriever(
    kb_dir: str | Path,
    config: RetrieverConfig | None = None,
    embedder: Any = None,
    allow_download: bool = False,
) -> RetrievalBackend:
    """Load the KB at ``kb_dir`` (checksums verified) and open its ``config.backend`` retriever.

    See :func:`open_kb_retriever` for the arguments.
    """
    from gta_verl.kb.store import load_kb

    config = config or RetrieverConfig()
    check_backend(config.backend)  # before seconds of KB loading
    return open_kb_retriever(load_kb(kb_dir), config, embedder, allow_download)
