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
import re
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


def plan_versions(digests: Sequence[str | None], pinned: str | None,
                  disk: str | None) -> tuple[str | None, list[int]]:
    """Which KB version a service serves, and which replicas to replace to get there.

    A service answers from one KB version at a time: after ``kb add`` rewrites the directory, a
    replica that (re)starts loads the new tables while the others still hold the old ones. Rules:

    1. No pin yet: the version on disk if a replica serves it, else the most common one.
    2. The directory moved on (``disk ≠ pinned``) and a replica already serves ``disk``: pin it.
    3. Every replica of the pinned version is gone: the most common version served.
    4. Otherwise keep the pin.

    Replicas on another version are replaced only when the pin is the version on disk (a
    replacement then loads the pin); otherwise they are just not routed to.

    Args:
        digests: Each replica's KB digest (None: not loaded yet).
        pinned: The service's current version.
        disk: The digest of the directory's manifest now (None: unreadable from the service).

    Returns:
        ``(pin, indices of replicas to replace)``.
    """
    known = [d for d in digests if d]
    if not known:
        return pinned, []
    common = max(dict.fromkeys(known), key=known.count)  # ties: the first served
    if pinned is None:
        pin = disk if disk in known else common
    elif disk is not None and disk != pinned and disk in known:
        pin = disk
    elif pinned not in known:
        pin = common
    else:
        pin = pinned
    replace = [i for i, d in enumerate(digests) if d and d != pin] if pin == disk else []
    return pin, replace


def disk_digest(kb_dir: str) -> str | None:
    """Digest of the manifest at ``kb_dir`` now, or None if this process cannot read it."""
    from gta_verl.kb.store import manifest_digest, read_manifest

    try:
        return manifest_digest(read_manifest(kb_dir))
    except Exception:  # noqa: BLE001 - the service may run where the KB is not mounted
        return None


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
            info = await slot.handle.health.remote()
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
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._spawn(self._await_ready(new))

    async def _check(self, slot: _Slot) -> None:
        """Ping one ready replica; replace it if it is dead for good."""
        try:
            slot.load = await asyncio.wait_for(slot.handle.load.remote(), self.PING_TIMEOUT_S)
            # a replica Ray restarted in place re-ran its constructor: it may hold a newer KB
            slot.digest = await asyncio.wait_for(slot.handle.kb_version.remote(), self.PING_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            if is_dead_for_good(exc) and slot in self.slots and slot.ready:
                logger.warning("retriever replica %d died (%s): replacing it", slot.index, _first_line(exc))
                self._replace(slot)

    def _align_versions(self) -> None:
        """Apply :func:`plan_versions`: keep one pinned KB version, replace replicas off it."""
        ready = [s for s in self.slots if s.ready and not s.retiring]
        pin, replace = plan_versions([s.digest for s in ready], self.kb_digest, disk_digest(self.spec["kb_dir"]))
        if pin != self.kb_digest:
            logger.info("retriever service: serving KB version %s (was %s)", pin, self.kb_digest)
            self.kb_digest, self.version = pin, self.version + 1
        for i in replace:
            logger.info("retriever replica %d serves KB %s, not %s: replacing it", ready[i].index,
                        ready[i].digest, pin)
            self._replace(ready[i])

    def _serving(self, slot: _Slot) -> bool:
        """Routed to: ready, not retiring, and on the pinned KB version."""
        return slot.ready and not slot.retiring and (self.kb_digest is None or slot.digest == self.kb_digest)

    async def _monitor_loop(self) -> None:
        while True:
            ready = [s for s in self.slots if s.ready and not s.retiring]
            await asyncio.gather(*(self._check(s) for s in ready))
            self._align_versions()
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
        live = [s for s in self.slots if self._serving(s)]
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
                        "version": self.version, "kb_digest": self.kb_digest,
                        "replica_kb_digests": [s.digest for s in self.slots]}
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
            live = [s for s in self.slots if self._serving(s) and (s.index, s.generation) not in tried]
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
                "routed_retries": self.routed_retries, "kb_dir": self.spec["kb_dir"], "kb_digest": self.kb_digest,
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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: An exception header as Python prints it at the end of a traceback: ``pkg.mod.Name: message``.
_EXC_HEADER = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*): (.*)$")


def _first_line(exc: BaseException) -> str:
    """One line naming why a replica failed: the original exception and its whole message.

    Ray wraps a constructor error in its own text (``ActorDiedError: The actor died because of an
    error raised in its creation task … Traceback … pkg.mod.Name: message`` with the message's
    continuation lines after it), so the last exception header is the cause, and the lines after it
    are its message — where hints such as ``EmbedderUnavailable``'s ``--allow-download`` live.
    Without such a header: the exception's type and first line.
    """
    lines = [_ANSI.sub("", ln).rstrip() for ln in str(exc).splitlines()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith('  File "')]
    # a header counts only after a traceback frame: "Note: …" inside a message is not a cause
    headers = [i for i, ln in enumerate(lines) if frames and i > frames[0] and _EXC_HEADER.match(ln)]
    if headers:
        i = headers[-1]
        name, first = _EXC_HEADER.match(lines[i]).groups()  # type: ignore[union-attr]
        rest = " ".join(ln.strip() for ln in lines[i + 1:] if ln.strip())
        return f"{name.rsplit('.', 1)[-1]}: {' '.join(x for x in (first, rest) if x)}"[:1000]
    text = next((ln.strip() for ln in lines if ln.strip()), "")
    return f"{type(exc).__name__}: {text[:400]}"
