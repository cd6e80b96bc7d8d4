"""The retriever as a named Ray actor with micro-batching (one per cluster).

The actor loads the KB from its directory inside ``__init__`` (nothing large
travels through closures or the object store), so a crash simply reloads it:
``max_restarts=-1`` keeps it serving. GPUs default to 0 because verl's placement
groups own them; give it ``num_gpus`` only where a GPU is free for PPR.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.batching import MicroBatcher
from gta_verl.retrieval.config import RetrieverConfig

logger = logging.getLogger(__name__)

DEFAULT_ACTOR_NAME = "gta_verl_graph_retriever"


def _import_factory(path: str) -> Any:
    import importlib

    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"embedder must be 'module:callable', got {path!r}")
    return getattr(importlib.import_module(module), attr)


class GraphRetrieverActor:
    """Body of the Ray actor (use :func:`get_or_create_retriever_actor`, not this class directly).

    Args:
        kb_dir: KB directory, loaded here in the actor process.
        config: ``RetrieverConfig.to_dict()`` (a plain dict pickles across versions).
        max_batch: Most queries in one batched call.
        max_wait_ms: How long a call waits for others to join its batch.
        embedder: ``"module:callable"`` import path of a zero-argument factory of the
            query encoder (default: ``load_embedder(kb.embedder_name)``).
    """

    def __init__(
        self,
        kb_dir: str,
        config: dict[str, Any] | None = None,
        max_batch: int = 256,
        max_wait_ms: float = 5.0,
        embedder: str | None = None,
    ) -> None:
        from gta_verl.retrieval.retriever import GraphRetriever

        self.kb_dir = str(kb_dir)
        enc = _import_factory(embedder)() if embedder else None
        self.retriever = GraphRetriever.from_kb_dir(kb_dir, RetrieverConfig.from_dict(config), enc)
        self.batcher = MicroBatcher(
            self.retriever.retrieve,
            validate=lambda q: self.retriever.prepare_queries([q]),
            max_batch=max_batch,
            max_wait_ms=max_wait_ms,
        )
        logger.info("retriever actor ready: %s (%d docs)", kb_dir, self.retriever.kb.n_docs)

    async def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """R(q) for each query; concurrent calls share one batched PPR."""
        return await self.batcher.submit(list(queries))

    async def stats(self) -> dict[str, Any]:
        """Request count, batch sizes, p50/p95 latency, KB directory and config."""
        return {**self.batcher.stats(), "kb_dir": self.kb_dir, "config": self.retriever.config.to_dict()}

    async def health(self) -> str:
        return "ok"


def get_or_create_retriever_actor(
    kb_dir: str | Path,
    config: RetrieverConfig | None = None,
    name: str = DEFAULT_ACTOR_NAME,
    num_cpus: float = 1,
    num_gpus: float = 0,
    max_restarts: int = -1,
    namespace: str | None = None,
    lifetime: str | None = None,
    max_batch: int = 256,
    max_wait_ms: float = 5.0,
    max_concurrency: int = 4096,
    embedder: str | None = None,
) -> Any:
    """Return the named retriever actor, creating it if it does not exist yet.

    Safe to call from every rollout worker: ``get_if_exists=True`` makes all of them
    share one actor. Needs ``ray.init`` to have been called. Ray destroys a
    non-detached actor when its creator's handle goes out of scope: keep the
    returned handle alive for the training run, or pass ``lifetime="detached"``.

    Args:
        kb_dir: KB directory (must be readable from the actor's node).
        config: Retriever config (default: GTA-RAG defaults).
        name: Actor name, unique in ``namespace``.
        num_cpus: CPUs reserved for the actor.
        num_gpus: GPUs reserved (0: verl's placement groups hold the GPUs).
        max_restarts: Restarts after a crash (−1 = forever).
        namespace: Ray namespace (``None`` = the job's).
        lifetime: ``"detached"`` to outlive the driver, else ``None``.
        max_batch: See :class:`GraphRetrieverActor`.
        max_wait_ms: See :class:`GraphRetrieverActor`.
        max_concurrency: Concurrent calls the async actor accepts.
        embedder: See :class:`GraphRetrieverActor`.

    Returns:
        A Ray ``ActorHandle``.
    """
    import ray

    kb_dir = Path(kb_dir).resolve()
    if not (kb_dir / "manifest.json").is_file():
        raise FileNotFoundError(
            f"{kb_dir} is not a KB directory (no manifest.json); build it with `gta-verl kb build`"
        )
    cls = ray.remote(GraphRetrieverActor)
    return cls.options(
        name=name,
        namespace=namespace,
        get_if_exists=True,
        lifetime=lifetime,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        max_restarts=max_restarts,
        max_concurrency=max_concurrency,
    ).remote(str(kb_dir), (config or RetrieverConfig()).to_dict(), max_batch, max_wait_ms, embedder)
