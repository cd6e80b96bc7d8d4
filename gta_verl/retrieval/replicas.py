"""Replicated retriever: the named service actor, its placement, routing and autoscaling rules.

:class:`RetrieverService` is the one handle every agent-loop worker finds by name.
It starts the replicas (:class:`~gta_verl.retrieval.actor.GraphRetrieverActor`),
publishes the ready ones with a version number, pings them, replaces a replica
that died for good and scales between the autoscaling bounds. Clients route to
replicas directly with power-of-two-choices over their own outstanding calls
(:func:`pick_replica`), so the service is not on the data path; its own
``retrieve`` routes the same way for callers holding a plain handle.

Why actors and not Ray Serve: measured by ``benchmarks/serve_vs_actors.py``, see ``docs/scale.md``
("Serving: actors vs Ray Serve").
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.batching import error_results
from gta_verl.retrieval.config import ServingConfig

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------- pure rules
def pick_replica(outstanding: Sequence[int], rng: random.Random) -> int:
    """Power of two choices: of two distinct random replicas, the one with fewer calls out.

    Args:
        outstanding: Calls in flight per candidate replica (``len >= 1``).
        rng: Source of the two draws.

    Returns:
        Index into ``outstanding``; ties go to the first draw.
    """
    n = len(outstanding)
    if n == 0:
        raise ValueError("pick_replica needs at least one replica")
    if n == 1:
        return 0
    a, b = rng.sample(range(n), 2)
    return b if outstanding[b] < outstanding[a] else a


def autoscale_delta(loads: Sequence[int], n_replicas: int, cfg: ServingConfig, streak: int) -> tuple[int, int]:
    """One autoscaling tick: ``(replicas to add (+1) / remove (−1) / 0, new streak)``.

    ``streak`` counts consecutive ticks above target (positive) or below a quarter of
    it (negative); a change needs ``upscale_ticks`` / ``downscale_ticks`` of them.
    """
    if not cfg.autoscaling or not loads:
        return 0, 0
    mean = sum(loads) / len(loads)
    if mean > cfg.target_queued_queries:
        streak = streak + 1 if streak > 0 else 1
        if streak >= cfg.upscale_ticks and n_replicas < (cfg.max_replicas or n_replicas):
            return 1, 0
        return 0, streak
    if mean < cfg.target_queued_queries / 4:
        streak = streak - 1 if streak < 0 else -1
        if -streak >= cfg.downscale_ticks and n_replicas > (cfg.min_replicas or n_replicas):
            return -1, 0
        return 0, streak
    return 0, 0


def cpu_only_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Ids of alive nodes without GPUs (from ``ray.nodes()``), sorted for stable spreading."""
    return sorted(n["NodeID"] for n in nodes if n.get("Alive") and not n.get("Resources", {}).get("GPU"))


def replica_options(cfg: ServingConfig, slot: int, nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Ray actor options placing replica ``slot`` by ``cfg.placement`` (see :class:`ServingConfig`)."""
    opts: dict[str, Any] = {"num_cpus": cfg.num_cpus, "num_gpus": 0}
    if cfg.placement == "resource":
        opts["resources"] = {cfg.resource: cfg.resource_per_replica}
    elif cfg.placement == "cpu_nodes":
        cpu_nodes = cpu_only_nodes(nodes)
        if cpu_nodes:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            # soft: a full CPU node must not leave the replica pending forever
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                cpu_nodes[slot % len(cpu_nodes)], soft=True)
        else:
            opts["scheduling_strategy"] = "SPREAD"
    return opts


def is_actor_error(exc: BaseException) -> bool:
    """Errors of the transport (actor died or unreachable), as opposed to the call's own."""
    from ray.exceptions import RayActorError

    return isinstance(exc, RayActorError)


def is_dead_for_good(exc: BaseException) -> bool:
    """A *new* call failing with ``ActorDiedError``: restarting actors queue new calls instead."""
    from ray.exceptions import ActorDiedError

    return isinstance(exc, ActorDiedError)


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


class RetrieverService:
    """Named Ray actor in front of the replicas (create it with ``RetrieverSpec.create``).

    Args:
        spec: ``asdict(RetrieverSpec)``: KB directory, retriever and serving config, names.
    """

    MAX_CREATE_FAILURES = 3
    PING_TIMEOUT_S = 10.0

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.serving = ServingConfig.from_dict(spec.get("serving"))
        self.slots: list[_Slot] = []
        self.version = 0
        self.replaced = 0
        self.routed_retries = 0
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

        from gta_verl.retrieval.actor import GraphRetrieverActor

        s = self.serving
        opts = replica_options(s, index, ray.nodes())
        handle = ray.remote(GraphRetrieverActor).options(
            name=f"{self.spec['name']}.{self.incarnation}.replica{index}.g{generation}",
            namespace=self.spec.get("namespace"),
            max_restarts=self.spec.get("max_restarts", -1),
            max_concurrency=self.spec.get("max_concurrency", 4096),
            **opts,
        ).remote(self.spec["kb_dir"], self.spec["config"], s.max_batch, s.max_wait_ms,
                 self.spec.get("embedder"), s.share_arrays)
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
            await slot.handle.health.remote()
        except Exception as exc:  # noqa: BLE001 - the constructor failed: record why
            if slot is not self._current(slot.index, slot.generation):
                return
            slot.failures += 1
            slot.error = _first_line(exc)
            logger.error("retriever replica %d failed to start: %s", slot.index, slot.error)
            if slot.failures < self.MAX_CREATE_FAILURES:
                await asyncio.sleep(0.5 * 2 ** slot.failures)
                self._replace(slot, keep_failures=True)
            return
        if slot is self._current(slot.index, slot.generation):
            slot.ready, slot.error, slot.failures = True, None, 0
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
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._spawn(self._await_ready(new))

    async def _check(self, slot: _Slot) -> None:
        """Ping one ready replica; replace it if it is dead for good."""
        try:
            slot.load = await asyncio.wait_for(slot.handle.load.remote(), self.PING_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            if is_dead_for_good(exc) and slot in self.slots and slot.ready:
                logger.warning("retriever replica %d died (%s): replacing it", slot.index, _first_line(exc))
                self._replace(slot)

    async def _monitor_loop(self) -> None:
        while True:
            ready = [s for s in self.slots if s.ready and not s.retiring]
            await asyncio.gather(*(self._check(s) for s in ready))
            delta, self._streak = autoscale_delta([s.load for s in ready], len(ready), self.serving,
                                                  self._streak)
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
        live = [s for s in self.slots if s.ready and not s.retiring]
        errors = [f"replica {s.index}: {s.error}" for s in self.slots
                  if s.error and s.failures >= self.MAX_CREATE_FAILURES]
        return {"version": self.version, "replicas": [((s.index, s.generation), s.handle) for s in live],
                "error": "; ".join(errors) if errors and not live else None}

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
                raise RuntimeError(f"retriever replica {s.index} could not load kb_dir={self.spec['kb_dir']}: "
                                   f"{s.error}")
            if all(s.ready for s in self.slots):
                return {"status": "ok", "replicas": len(self.slots), "kb_dir": self.spec["kb_dir"],
                        "version": self.version}
            if time.monotonic() > deadline:
                pending = [s.index for s in self.slots if not s.ready]
                raise TimeoutError(f"retriever replicas {pending} not ready after {timeout_s:g} s "
                                   f"(placement={self.serving.placement!r}: does a node fit them?)")
            await asyncio.sleep(0.05)

    async def retrieve(self, queries: Sequence[str]) -> list[RetrievalResult]:
        """Route one call (power of two choices); a transport error is retried once elsewhere."""
        self._ensure_monitor()
        tried: set[tuple[int, int]] = set()
        for _ in range(2):
            live = [s for s in self.slots if s.ready and not s.retiring and (s.index, s.generation) not in tried]
            if not live:
                break
            slot = live[pick_replica([self._out.get((s.index, s.generation), 0) for s in live], self._rng)]
            key = (slot.index, slot.generation)
            self._out[key] = self._out.get(key, 0) + 1
            try:
                return await slot.handle.retrieve.remote(list(queries))
            except Exception as exc:  # noqa: BLE001
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
        return {**agg, "replicas": len(live), "replaced": self.replaced, "version": self.version,
                "routed_retries": self.routed_retries, "kb_dir": self.spec["kb_dir"],
                "config": self.spec["config"], "per_replica": good}

    async def shutdown(self) -> None:
        """Kill every replica (the service itself is killed by its owner)."""
        import ray

        if self._monitor is not None:
            self._monitor.cancel()
        for s in self.slots:
            try:
                ray.kill(s.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.slots = []


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    # Ray wraps a constructor error in a traceback: the last line names the cause.
    cause = next((ln for ln in reversed(lines) if "Error" in ln), lines[0] if lines else "")
    return f"{type(exc).__name__}: {cause[:400]}"
