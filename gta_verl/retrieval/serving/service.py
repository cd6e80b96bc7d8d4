"""The named retriever service: one Ray actor in front of N replica actors.

:func:`get_or_create_retriever_actor` creates (or finds) the named :class:`RetrieverService`
from a :class:`RetrieverSpec`. The service is the one handle every agent-loop worker finds by
name: it starts the replicas (:class:`~gta_verl.retrieval.serving.replica.RetrieverReplica`),
publishes the ready ones with a version number, pings them, replaces a replica that died for
good and scales between the autoscaling bounds (:mod:`gta_verl.retrieval.serving.routing`).
Clients route to replicas directly with power-of-two-choices over their own outstanding calls,
so the service is not on the data path; its own ``retrieve`` routes the same way for callers
holding a plain handle. GPUs are never reserved because verl's placement groups own them.

Why actors and not Ray Serve: measured by ``benchmarks/serving/serve_vs_actors.py``
(``docs/benchmarks/serve_vs_actors.md``), decided in ``docs/scale.md`` ("Serving: actors vs Ray Serve").
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.serving.batching import error_results
from gta_verl.retrieval.serving.config import DEFAULT_ACTOR_NAME, ServingConfig
from gta_verl.retrieval.serving.replica import RetrieverReplica, check_kb_dir
from gta_verl.retrieval.serving.routing import (
    autoscale_delta,
    disk_digest,
    first_line,
    is_actor_error,
    is_dead_for_good,
    pick_replica,
    plan_versions,
    replica_options,
)

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------- the service
@dataclass
class _Slot:
    index: int
    generation: int
    handle: Any
    ready: bool = False
    error: str | None = None
    failures: int = 0
    load: int = 0
    retiring: bool = False
    digest: str | None = None  # KB version the replica loaded


class RetrieverService:
    """Named Ray actor in front of the replicas (create it with ``RetrieverSpec.create``).

    Args:
        spec: The :class:`RetrieverSpec` (or a mapping of its fields): KB directory, retriever
            and serving config, names.
    """

    MAX_CREATE_FAILURES = 3
    PING_TIMEOUT_S = 10.0

    def __init__(self, spec: RetrieverSpec | dict[str, Any]) -> None:
        self.spec = spec if isinstance(spec, RetrieverSpec) else RetrieverSpec(**spec)
        self.serving = self.spec.serving
        self.slots: list[_Slot] = []
        self.version = 0
        self.replaced = 0
        self.routed_retries = 0
        self.kb_digest: str | None = None  # the one KB version this service answers from
        self._out: dict[tuple[int, int], int] = {}
        self._rng = random.Random(0)
        self._streak = 0
        self._monitor: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        # Replica names carry this incarnation's id: a restarted or recreated service starts while Ray
        # may still be tearing down the dead one's replicas (fate-shared, cleaned up asynchronously);
        # reusing their names raised ActorAlreadyExistsError in __init__ and killed the new service.
        self.incarnation = uuid.uuid4().hex[:8]
        for i in range(self.serving.num_replicas):
            self.slots.append(self._start(i, 0))

    # ---------------------------------------------------------------- replicas
    def _start(self, index: int, generation: int) -> _Slot:
        import ray

        s = self.serving
        opts = replica_options(s, index, ray.nodes())
        handle = (
            ray.remote(RetrieverReplica)
            .options(
                name=f"{self.spec.name}.{self.incarnation}.replica{index}.g{generation}",
                namespace=self.spec.namespace,
                max_restarts=self.spec.max_restarts,
                max_concurrency=self.spec.max_concurrency,
                **opts,
            )
            .remote(
                self.spec.kb_dir,
                self.spec.config,
                s.max_batch,
                s.max_wait_ms,
                self.spec.embedder,
                s.share_arrays,
            )
        )
        return _Slot(index, generation, handle)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _ensure_monitor(self) -> None:
        if self._monitor is None or self._monitor.done():
            self._monitor = asyncio.get_running_loop().create_task(self._monitor_loop())
            for slot in self.slots:
                if not slot.ready and slot.error is None:
                    self._spawn(self._await_ready(slot))

    async def _await_ready(self, slot: _Slot) -> None:
        try:
            info = await slot.handle.health.remote()
        except Exception as exc:  # the constructor failed: record why
            if slot is not self._current(slot.index, slot.generation):
                return
            slot.failures += 1
            slot.error = first_line(exc)
            logger.error("retriever replica %d failed to start: %s", slot.index, slot.error)
            if slot.failures < self.MAX_CREATE_FAILURES:
                await asyncio.sleep(0.5 * 2**slot.failures)
                self._replace(slot, keep_failures=True)
            return
        if slot is self._current(slot.index, slot.generation):
            slot.ready, slot.error, slot.failures = True, None, 0
            slot.digest = info.get("kb_digest") if isinstance(info, dict) else None
            self._align_versions()
            self.version += 1

    def _current(self, index: int, generation: int) -> _Slot | None:
        for s in self.slots:
            if s.index == index and s.generation == generation:
                return s
        return None

    def _replace(self, slot: _Slot, keep_failures: bool = False) -> None:
        import ray

        new = self._start(slot.index, slot.generation + 1)
        new.failures = slot.failures if keep_failures else 0
        self.slots[self.slots.index(slot)] = new
        self.version += 1
        self.replaced += 0 if keep_failures else 1
        try:
            ray.kill(slot.handle, no_restart=True)
        except Exception:  # already gone
            pass
        self._spawn(self._await_ready(new))

    async def _check(self, slot: _Slot) -> None:
        """Ping one ready replica; replace it if it is dead for good."""
        try:
            slot.load = await asyncio.wait_for(slot.handle.load.remote(), self.PING_TIMEOUT_S)
            # a replica Ray restarted in place re-ran its constructor: it may hold a newer KB
            slot.digest = await asyncio.wait_for(slot.handle.kb_version.remote(), self.PING_TIMEOUT_S)
        except Exception as exc:
            if is_dead_for_good(exc) and slot in self.slots and slot.ready:
                logger.warning("retriever replica %d died (%s): replacing it", slot.index, first_line(exc))
                self._replace(slot)

    def _align_versions(self) -> None:
        """Apply :func:`plan_versions`: keep one pinned KB version, replace replicas off it."""
        ready = [s for s in self.slots if s.ready and not s.retiring]
        pin, replace = plan_versions([s.digest for s in ready], self.kb_digest, disk_digest(self.spec.kb_dir))
        if pin != self.kb_digest:
            logger.info("retriever service: serving KB version %s (was %s)", pin, self.kb_digest)
            self.kb_digest, self.version = pin, self.version + 1
        for i in replace:
            logger.info(
                "retriever replica %d serves KB %s, not %s: replacing it",
                ready[i].index,
                ready[i].digest,
                pin,
            )
            self._replace(ready[i])

    def _serving(self, slot: _Slot) -> bool:
        """Routed to: ready, not retiring, and on the pinned KB version."""
        return slot.ready and not slot.retiring and (self.kb_digest is None or slot.digest == self.kb_digest)

    async def _monitor_loop(self) -> None:
        while True:
            ready = [s for s in self.slots if s.ready and not s.retiring]
            await asyncio.gather(*(self._check(s) for s in ready))
            self._align_versions()
            delta, self._streak = autoscale_delta(
                [s.load for s in ready], len(ready), self.serving, self._streak
            )
            if delta > 0:
                slot = self._start(max(s.index for s in self.slots) + 1, 0)
                self.slots.append(slot)
                self._spawn(self._await_ready(slot))
            elif delta < 0:
                self._spawn(self._retire(ready[-1]))
            await asyncio.sleep(self.serving.monitor_interval_s)

    async def _retire(self, slot: _Slot) -> None:
        import ray

        slot.retiring = True
        self.version += 1  # clients stop routing to it at their next refresh
        await asyncio.sleep(max(5.0, 4 * self.serving.monitor_interval_s))
        if slot in self.slots:
            self.slots.remove(slot)
        ray.kill(slot.handle, no_restart=True)

    # ---------------------------------------------------------------- API
    async def replicas(self) -> dict[str, Any]:
        """``{"version", "replicas": [(key, handle)], "error"}`` of the ready replicas."""
        self._ensure_monitor()
        live = [s for s in self.slots if self._serving(s)]
        errors = [
            f"replica {s.index}: {s.error}"
            for s in self.slots
            if s.error and s.failures >= self.MAX_CREATE_FAILURES
        ]
        return {
            "version": self.version,
            "replicas": [((s.index, s.generation), s.handle) for s in live],
            "error": "; ".join(errors) if errors and not live else None,
        }

    async def report_failure(self, key: tuple[int, int]) -> None:
        """A client saw a transport error on replica ``key``: check it now."""
        self._ensure_monitor()
        slot = self._current(*key)
        if slot is not None and slot.ready:
            await self._check(slot)

    async def health(self, timeout_s: float = 600.0) -> dict[str, Any]:
        """Wait until every replica has loaded the KB.

        Raises:
            RuntimeError: A replica could not start (e.g. ``kb_dir`` unreadable on its
                node), naming the replica, ``kb_dir`` and the replica's own error.
            TimeoutError: Not ready within ``timeout_s`` (e.g. no node fits the placement).
        """
        self._ensure_monitor()
        deadline = time.monotonic() + timeout_s
        while True:
            failed = [s for s in self.slots if s.error and s.failures >= self.MAX_CREATE_FAILURES]
            if failed:
                s = failed[0]
                raise RuntimeError(
                    f"retriever replica {s.index} could not load kb_dir={self.spec.kb_dir}: {s.error}"
                )
            if all(s.ready for s in self.slots):
                return {
                    "status": "ok",
                    "replicas": len(self.slots),
                    "kb_dir": self.spec.kb_dir,
                    "version": self.version,
                    "kb_digest": self.kb_digest,
                    "replica_kb_digests": [s.digest for s in self.slots],
                }
            if time.monotonic() > deadline:
                pending = [s.index for s in self.slots if not s.ready]
                raise TimeoutError(
                    f"retriever replicas {pending} not ready after {timeout_s:g} s "
                    f"(placement={self.serving.placement!r}: does a node fit them?)"
                )
            await asyncio.sleep(0.05)

    async def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Route one call (power of two choices); a transport error is retried once elsewhere."""
        self._ensure_monitor()
        tried: set[tuple[int, int]] = set()
        for _ in range(2):
            live = [s for s in self.slots if self._serving(s) and (s.index, s.generation) not in tried]
            if not live:
                break
            slot = live[pick_replica([self._out.get((s.index, s.generation), 0) for s in live], self._rng)]
            key = (slot.index, slot.generation)
            self._out[key] = self._out.get(key, 0) + 1
            try:
                return await slot.handle.retrieve.remote(list(queries))
            except Exception as exc:
                if not is_actor_error(exc):
                    raise
                tried.add(key)
                self.routed_retries += 1
                self._spawn(self._check(slot))
            finally:
                self._out[key] -= 1
        return error_results(queries, "retrieval failed: no live retriever replica")

    async def stats(self) -> dict[str, Any]:
        """Per-replica batcher stats plus the service's counters."""
        self._ensure_monitor()
        live = [s for s in self.slots if s.ready]
        per = await asyncio.gather(*(s.handle.stats.remote() for s in live), return_exceptions=True)
        agg: dict[str, Any] = {"requests": 0, "queries": 0, "errors": 0, "batches": 0, "batch_size_max": 0}
        for st in per:
            if isinstance(st, dict):
                for k in ("requests", "queries", "errors", "batches"):
                    agg[k] += st.get(k, 0)
                agg["batch_size_max"] = max(agg["batch_size_max"], st.get("batch_size_max", 0))
        good = [st for st in per if isinstance(st, dict)]
        for k in ("latency_ms_p50", "latency_ms_p95", "batch_size_mean"):
            agg[k] = max((st.get(k, 0.0) for st in good), default=0.0)  # worst replica
        return {
            **agg,
            "replicas": len(live),
            "replaced": self.replaced,
            "version": self.version,
            "routed_retries": self.routed_retries,
            "kb_dir": self.spec.kb_dir,
            "kb_digest": self.kb_digest,
            "config": self.spec.config.to_dict(),
            "per_replica": good,
        }

    async def shutdown(self) -> None:
        """Kill every replica (the service itself is killed by its owner)."""
        import ray

        if self._monitor is not None:
            self._monitor.cancel()
        for s in self.slots:
            try:
                ray.kill(s.handle, no_restart=True)
            except Exception:
                pass
        self.slots = []


@dataclass(frozen=True)
class RetrieverSpec:
    """Everything needed to (re)create the named retriever service (picklable).

    The typed configs travel as they are to the service and from it to every replica, and
    ``kb_dir`` is made absolute here, once, on the creating node (a Ray worker's working
    directory is not the driver's). A client holding a spec may recreate a service that was
    killed for good (``ray.kill(handle)``); without one it fails fast with a clear message.

    Attributes:
        kb_dir: KB directory, readable at this path on every replica's node.
        config: The retriever config, ``backend`` included (a mapping of its fields is accepted).
        serving: Replicas, placement, batching (a mapping of its fields is accepted).
    """

    kb_dir: str
    config: RetrieverConfig = field(default_factory=RetrieverConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    name: str = DEFAULT_ACTOR_NAME
    namespace: str | None = None
    lifetime: str | None = None
    embedder: str | None = None
    max_restarts: int = -1
    max_concurrency: int = 4096

    def __post_init__(self) -> None:
        object.__setattr__(self, "kb_dir", str(Path(self.kb_dir).resolve()))
        if not isinstance(self.config, RetrieverConfig):
            object.__setattr__(self, "config", RetrieverConfig.from_mapping(self.config))
        if not isinstance(self.serving, ServingConfig):
            object.__setattr__(self, "serving", ServingConfig.from_mapping(self.serving))

    def create(self) -> Any:
        """Create the service, or return the live one of that name (``get_if_exists``)."""
        import ray

        check_kb_dir(self.kb_dir, "on the creating node")
        return (
            ray.remote(RetrieverService)
            .options(
                name=self.name,
                namespace=self.namespace,
                get_if_exists=True,
                lifetime=self.lifetime,
                num_cpus=0,  # routing bookkeeping only; replicas reserve the CPUs
                max_restarts=self.max_restarts,
                max_concurrency=self.max_concurrency,
            )
            .remote(self)
        )


def get_or_create_retriever_actor(
    kb_dir: str | Path,
    config: RetrieverConfig | None = None,
    name: str = DEFAULT_ACTOR_NAME,
    num_cpus: float | None = None,
    num_gpus: float = 0,
    max_restarts: int = -1,
    namespace: str | None = None,
    lifetime: str | None = None,
    max_batch: int | None = None,
    max_wait_ms: float | None = None,
    max_concurrency: int = 4096,
    embedder: str | None = None,
    serving: ServingConfig | None = None,
) -> Any:
    """Return the named retriever service, creating it (and its replicas) if missing.

    Safe to call from every rollout worker: ``get_if_exists=True`` makes all of them
    share one service. Needs ``ray.init``. Ray destroys a non-detached actor when its
    creator's handle goes out of scope: keep the handle alive for the training run, or
    pass ``lifetime="detached"``. The handle answers ``retrieve``/``stats``/``health``
    like one replica; ``ray.get(handle.health.remote())`` waits until every replica has
    loaded the KB and raises naming ``kb_dir`` when a replica cannot read it.

    Args:
        kb_dir: KB directory (readable at this path on the replicas' nodes).
        config: Retriever config (default: GTA-RAG defaults).
        name: Service name, unique in ``namespace``.
        num_cpus: CPUs reserved per replica; ``None`` keeps ``serving.num_cpus``.
        num_gpus: Must be 0: verl's placement groups hold the GPUs.
        max_restarts: Restarts of the service and of each replica after a crash (−1 = forever).
        namespace: Ray namespace (``None`` = the job's).
        lifetime: ``"detached"`` to outlive the driver, else ``None``.
        max_batch: ``None`` keeps ``serving.max_batch``; a value replaces it.
        max_wait_ms: ``None`` keeps ``serving.max_wait_ms``; a value replaces it.
        max_concurrency: Concurrent calls each actor accepts.
        embedder: See :class:`~gta_verl.retrieval.serving.replica.RetrieverReplica`.
        serving: Replicas, autoscaling bounds, placement (default: one replica).

    Returns:
        A Ray ``ActorHandle`` of the service.
    """
    if num_gpus:
        raise ValueError("the retriever takes no GPU (verl's placement groups hold them); use num_gpus=0")
    # only what the caller passed replaces the serving config's own settings
    given: dict[str, Any] = {"num_cpus": num_cpus, "max_batch": max_batch, "max_wait_ms": max_wait_ms}
    serving = dataclasses.replace(
        serving or ServingConfig(), **{k: v for k, v in given.items() if v is not None}
    )
    return RetrieverSpec(
        kb_dir=str(kb_dir),
        config=config or RetrieverConfig(),
        serving=serving,
        name=name,
        namespace=namespace,
        lifetime=lifetime,
        embedder=embedder,
        max_restarts=max_restarts,
        max_concurrency=max_concurrency,
    ).create()
