"""How the retriever service places, routes to, scales and versions its replicas: pure rules.

Kept apart from :mod:`gta_verl.retrieval.serving.service` (the actor that applies them) so that
the clients, which route to replicas themselves with the same power-of-two-choices rule, import
the rules without the service, and so that each rule is tested without Ray.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gta_verl.retrieval.serving.config import ServingConfig


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


def autoscale_delta(
    loads: Sequence[int], n_replicas: int, cfg: ServingConfig, streak: int
) -> tuple[int, int]:
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
                cpu_nodes[slot % len(cpu_nodes)], soft=True
            )
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


def plan_versions(
    digests: Sequence[str | None], pinned: str | None, disk: str | None
) -> tuple[str | None, list[int]]:
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
    except Exception:  # the service may run where the KB is not mounted
        return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: An exception header as Python prints it at the end of a traceback: ``pkg.mod.Name: message``.
_EXC_HEADER = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*): (.*)$")


def first_line(exc: BaseException) -> str:
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
        rest = " ".join(ln.strip() for ln in lines[i + 1 :] if ln.strip())
        return f"{name.rsplit('.', 1)[-1]}: {' '.join(x for x in (first, rest) if x)}"[:1000]
    text = next((ln.strip() for ln in lines if ln.strip()), "")
    return f"{type(exc).__name__}: {text[:400]}"
