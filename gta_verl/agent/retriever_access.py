"""How an agent-loop process reaches the retrieval environment R(q).

verl creates one agent-loop instance per trajectory, so the retriever client is
made once per process and cached here (keyed by the settings that select it).
Precedence:

1. a client injected with :func:`set_process_retriever_client` (tests, the
   out-of-trainer runner, evaluation);
2. ``gta.agent.retriever_transport``:
   ``ray`` / ``auto`` with Ray initialised → the job-wide actor
   ``gta.retriever.actor_name``, looked up by name and created with
   ``get_if_exists`` when missing (the trainer normally creates it first);
   ``inprocess`` / ``auto`` without Ray → the ``gta.retriever.backend`` retriever loaded from
   ``gta.retriever.kb_dir`` inside this process (:func:`gta_verl.retrieval.backends.open_retriever`);
   ``http`` → a retriever server at ``gta.agent.retriever_url``.

Creating a client may load a KB (seconds), so callers run
:func:`get_retriever_client` in an executor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Any

from gta_verl.agent.config import AgentConfig, agent_config_from_trainer_config
from gta_verl.retrieval.base import AsyncRetriever
from gta_verl.retrieval.section import RetrieverSection
from gta_verl.strict_config import node_at

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
_CLIENTS: dict[tuple[Any, ...], AsyncRetriever] = {}
_INJECTED: list[AsyncRetriever] = []


def set_process_retriever_client(client: AsyncRetriever | None) -> None:
    """Make every agent loop of this process use ``client`` (``None`` clears it)."""
    with _LOCK:
        _INJECTED.clear()
        if client is not None:
            _INJECTED.append(client)


def clear_retriever_cache() -> None:
    """Forget injected and cached clients (tests)."""
    with _LOCK:
        _INJECTED.clear()
        _CLIENTS.clear()


def retriever_section(trainer_config: Any) -> RetrieverSection:
    """``gta.retriever`` of the trainer config as :class:`~gta_verl.retrieval.section.RetrieverSection`."""
    return RetrieverSection.from_mapping(node_at(trainer_config, "gta", "retriever"))


def get_retriever_client(trainer_config: Any, agent: AgentConfig) -> AsyncRetriever:
    """Return this process's retriever client for the config (blocking; see module doc)."""
    with _LOCK:
        if _INJECTED:
            return _INJECTED[0]
    section = retriever_section(trainer_config)
    transport = agent.retriever_transport
    if transport == "auto":
        transport = "ray" if _ray_initialized() else "inprocess"
    key = (
        transport,
        section.kb_dir,
        section.actor_name,
        agent.retriever_url,
        section.retrieval,
    )
    with _LOCK:  # held while creating: concurrent trajectories wait for one client
        if key not in _CLIENTS:
            _CLIENTS[key] = _make_client(transport, section, agent)
            logger.info("gta agent loop: retriever client %s (%s)", type(_CLIENTS[key]).__name__, transport)
        return _CLIENTS[key]


def _ray_initialized() -> bool:
    try:
        import ray
    except ImportError:  # pragma: no cover - ray ships with verl
        return False
    return bool(ray.is_initialized())


def _require_kb_dir(section: RetrieverSection, transport: str) -> str:
    if not section.kb_dir:
        raise ValueError(
            f"gta.retriever.kb_dir is not set, but the agent loop needs it for the {transport} retriever; "
            "set gta.retriever.kb_dir=/path/to/kb (built by `gta-verl kb build`)"
        )
    return str(section.kb_dir)


def _make_client(transport: str, section: RetrieverSection, agent: AgentConfig) -> AsyncRetriever:
    from gta_verl.retrieval.serving import clients as rclient

    if transport == "http":
        return rclient.HTTPRetrieverClient(agent.retriever_url, timeout_s=section.timeout_s)
    if transport == "ray":
        import ray

        try:  # normally the trainer created it before the first rollout
            handle, recreate = ray.get_actor(section.actor_name), None
            if section.kb_dir:  # the client may recreate a service killed for good
                recreate = section.spec().create
        except ValueError:
            spec = section.spec(_require_kb_dir(section, transport))
            handle, recreate = spec.create(), spec.create  # the client keeps the handle alive
        return rclient.RayRetrieverClient(
            handle, timeout_s=section.timeout_s, recreate=recreate, name=section.actor_name
        )
    from gta_verl.retrieval.backends import open_retriever

    retriever = open_retriever(_require_kb_dir(section, transport), section.retrieval)
    return rclient.InProcessRetrieverClient(retriever)


async def aretrieve_guarded(client: AsyncRetriever, queries: Sequence[str], timeout_s: float) -> list[Any]:
    """One batched call for ``queries`` within ``timeout_s``; any failure becomes a result per query.

    ``aretrieve`` never raises by contract; the guard keeps a broken client (a dead actor
    handle, a hung server) from killing the rollout: the policy sees the failure instead.
    Shared by ``gta_search_agent`` and the ``tool_agent`` tool, so both report failures alike.

    Returns:
        One :class:`gta_verl.data.types.RetrievalResult` per query, in order.
    """
    from gta_verl.data.types import RetrievalResult

    shown = queries[0] if len(queries) == 1 else list(queries)
    try:
        results = await asyncio.wait_for(client.aretrieve(list(queries)), timeout=timeout_s)
        if len(results) != len(queries):
            noun = "query" if len(queries) == 1 else "queries"
            raise RuntimeError(f"retriever returned {len(results)} results for {len(queries)} {noun}")
        return list(results)
    except asyncio.CancelledError:
        raise
    except asyncio.TimeoutError:
        logger.warning("gta agent loop: retrieval timed out after %.1fs for %r", timeout_s, shown)
        error = f"timeout after {timeout_s:g}s"
    except Exception as exc:  # becomes an observation + metric
        logger.warning("gta agent loop: retrieval failed for %r: %r", shown, exc)
        error = f"{type(exc).__name__}: {exc}"
    return [RetrievalResult(query=q, error=error) for q in queries]


def in_process_client(retriever: Any) -> AsyncRetriever:
    """Wrap a synchronous :class:`~gta_verl.retrieval.base.Retriever` as an ``AsyncRetriever``."""
    from gta_verl.retrieval.serving.clients import InProcessRetrieverClient

    return InProcessRetrieverClient(retriever)


#: How long the trainer waits for the retriever service to load its KB before failing the job.
READY_TIMEOUT_S = 900.0


def start_job_retriever(trainer_config: Any) -> Any | None:
    """Create the job's retriever actor now (non-blocking); ``None`` when rollouts do not use one.

    Called by the gta trainers before verl starts its workers, so the KB loads while they
    start and :func:`wait_retriever_ready` can block on it before the first rollout. The
    agent loops later find the same actor by name (``gta.retriever.actor_name``).
    The caller keeps the handle for the job: Ray destroys a non-detached actor with its owner.

    Raises:
        ValueError: ``gta.retriever.kb_dir`` is not set.
        FileNotFoundError: ``kb_dir`` is not a KB directory (raised by
            :meth:`gta_verl.retrieval.serving.service.RetrieverSpec.create`).
    """
    transport = agent_config_from_trainer_config(trainer_config).retriever_transport
    if transport not in ("auto", "ray") or not _ray_initialized():
        return None
    section = retriever_section(trainer_config)
    return section.spec(_require_kb_dir(section, "ray")).create()


def wait_retriever_ready(handle: Any, kb_dir: Any, timeout_s: float = READY_TIMEOUT_S) -> Any:
    """Block until the retriever actor answers ``health`` (its KB is loaded); return the answer.

    Raises:
        RuntimeError: naming ``kb_dir``, when the actor failed to load the KB or did not
            answer within ``timeout_s`` seconds.
    """
    import ray

    try:
        return ray.get(handle.health.remote(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError as exc:
        raise RuntimeError(
            f"gta-verl: the retriever actor did not load the KB at {kb_dir} within {timeout_s:g}s; "
            "check the actor's log (ray logs) or the KB size"
        ) from exc
    except Exception as exc:  # any actor failure fails the job with the KB named
        raise RuntimeError(f"gta-verl: the retriever actor could not load the KB at {kb_dir}: {exc}") from exc
