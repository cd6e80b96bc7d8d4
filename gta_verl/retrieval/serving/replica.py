"""One retriever replica: a Ray actor that loads the KB and answers batched queries.

The replica serves whichever backend its config names (``graph``, ``dense``, ``bm25``), opened
through :mod:`gta_verl.retrieval.backends`.

The service (:mod:`gta_verl.retrieval.serving.service`) starts these; nothing else creates
them. Each replica loads the KB from its directory inside ``__init__`` (nothing large travels
through closures or the object store) and, with ``share_arrays``, memory-maps the big arrays
from a node-local cache so replicas on one node share one copy
(:mod:`gta_verl.retrieval.serving.shared_arrays`). Concurrent calls share one batched PPR
through a :class:`~gta_verl.retrieval.serving.batching.MicroBatcher`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.base import RetrievalBackend
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.serving.batching import MicroBatcher

logger = logging.getLogger(__name__)


def _import_factory(path: str) -> Any:
    import importlib

    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"embedder must be 'module:callable', got {path!r}")
    return getattr(importlib.import_module(module), attr)


def replica_threads(assigned_cpus: float | None) -> int:
    """Threads for one replica's torch, numba and faiss pools: its reserved CPUs, at least 1.

    Ray already exports ``OMP_NUM_THREADS = max(1, int(num_cpus))`` to an actor, which torch
    follows, but numba (the PPR push) and faiss start one thread per core regardless, so
    replicas sharing a node would oversubscribe it.

    >>> replica_threads(2.0), replica_threads(0.5), replica_threads(None)
    (2, 1, 1)
    """
    return max(1, int(assigned_cpus or 0))


def limit_threads(n: int) -> dict[str, int]:
    """Cap torch, numba and faiss (OpenMP) at ``n`` threads in this process; returns what each uses."""
    import faiss
    import numba
    import torch

    torch.set_num_threads(n)
    # numba.config sets NUMBA_NUM_THREADS at import from the environment, out of mypy's sight
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    faiss.omp_set_num_threads(n)
    return {
        "torch": torch.get_num_threads(),
        "numba": numba.get_num_threads(),
        "faiss": faiss.omp_get_max_threads(),
    }


def check_kb_dir(kb_dir: str | Path, where: str) -> Path:
    """``kb_dir`` as a path, or a ``FileNotFoundError`` saying how to build it and where it was missing."""
    path = Path(kb_dir)
    if not (path / "manifest.json").is_file():
        what = "does not exist" if not path.exists() else "is not a KB directory (no manifest.json)"
        raise FileNotFoundError(
            f"retriever kb_dir {path} {what} {where}; build it with `gta-verl kb build` "
            "and make it readable at the same path on every retrieval node"
        )
    return path


class RetrieverReplica:
    """Body of one retriever replica (created by the service, not directly).

    Args:
        kb_dir: KB directory, loaded here in the replica process.
        config: The retriever config, ``backend`` included (a mapping of its fields is accepted).
        max_batch: Most queries in one batched call.
        max_wait_ms: How long a call waits for others to join its batch.
        embedder: ``"module:callable"`` import path of a zero-argument factory of the
            query encoder (default: ``load_embedder(kb.embedder_name)``).
        share_arrays: Memory-map the KB arrays from a node-local cache.

    Raises:
        FileNotFoundError: If ``kb_dir`` is missing or unreadable on this node (the
            service reports it from ``health``).
    """

    def __init__(
        self,
        kb_dir: str,
        config: RetrieverConfig | dict[str, Any] | None = None,
        max_batch: int = 256,
        max_wait_ms: float = 5.0,
        embedder: str | None = None,
        share_arrays: bool = True,
    ) -> None:
        import socket

        from gta_verl.retrieval.backends import open_retriever
        from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever

        self.kb_dir = str(kb_dir)
        check_kb_dir(kb_dir, f"on node {socket.gethostname()}")
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        self.threads = limit_threads(replica_threads(cpus))  # no more threads than reserved CPUs
        enc = _import_factory(embedder)() if embedder else None
        cfg = config if isinstance(config, RetrieverConfig) else RetrieverConfig.from_mapping(config)
        self.retriever: RetrievalBackend = (
            load_shared_retriever(kb_dir, cfg, enc) if share_arrays else open_retriever(kb_dir, cfg, enc)
        )
        self.retriever.warm()  # graph: transition (and passage basis) before health answers, not in a rollout
        self.batcher = MicroBatcher(
            self.retriever.retrieve,
            validate=lambda q: self.retriever.prepare_queries([q]),
            cost=self.retriever.query_cost,
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
        )
        self.in_flight = 0
        from gta_verl.kb.store import manifest_digest

        self.kb_digest = manifest_digest(self.retriever.kb.manifest)  # the version this process serves
        logger.info(
            "retriever replica ready: %s (%d docs, KB %s)", kb_dir, self.retriever.kb.n_docs, self.kb_digest
        )

    async def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """R(q) for each query; concurrent calls share one batched PPR."""
        queries = list(queries)
        self.in_flight += len(queries)
        try:
            return await self.batcher.submit(queries)
        finally:
            self.in_flight -= len(queries)

    async def stats(self) -> dict[str, Any]:
        """Request count, batch sizes, p50/p95 latency, seconds per stage (``stages``), pid, KB directory
        and config."""
        clock = getattr(self.retriever, "clock", None)  # the graph backend's seconds per stage
        return {
            **self.batcher.stats(),
            "stages": clock.snapshot() if clock is not None else None,
            "pid": os.getpid(),
            "kb_dir": self.kb_dir,
            "kb_digest": self.kb_digest,
            "config": self.retriever.config.to_dict(),
        }

    async def kb_version(self) -> str:
        """:func:`gta_verl.kb.store.manifest_digest` of the KB this replica loaded."""
        return self.kb_digest

    async def load(self) -> int:
        """Queries waiting or running in this replica (autoscaling signal and liveness ping)."""
        return self.in_flight

    async def health(self) -> dict[str, Any]:
        """Answered once the KB is loaded (the constructor has returned)."""
        import socket

        import ray

        return {
            "status": "ok",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "n_docs": self.retriever.kb.n_docs,
            "backend": self.retriever.config.backend,
            "threads": self.threads,
            "kb_digest": self.kb_digest,
        }
