"""How the retriever is served on a Ray cluster: replicas, autoscaling, placement, batching."""

from __future__ import annotations

from dataclasses import dataclass

from gta_verl.strict_config import StrictConfig

#: The name of the job's retriever service (``gta.retriever.actor_name``), unique in its namespace.
DEFAULT_ACTOR_NAME = "gta_verl_graph_retriever"

PLACEMENTS = ("cpu_nodes", "any", "resource")


@dataclass(frozen=True)
class ServingConfig(StrictConfig):
    """How the retriever is served on a Ray cluster (mirrors ``gta.retriever`` service keys).

    Attributes:
        num_replicas: Replicas started with the service (the fixed count without autoscaling).
        min_replicas: Autoscaling lower bound (``None`` = no autoscaling).
        max_replicas: Autoscaling upper bound (``None`` = no autoscaling).
        target_queued_queries: Autoscaling target of queries waiting or running per
            replica: above it for ``upscale_ticks`` monitor ticks → one more replica,
            below a quarter of it for ``downscale_ticks`` ticks → one fewer.
        upscale_ticks: See ``target_queued_queries``.
        downscale_ticks: See ``target_queued_queries``.
        num_cpus: Logical CPUs reserved per replica.
        placement: ``cpu_nodes`` (default) prefers nodes without GPUs, spreading
            replicas over them, so retrieval never takes the cores of the nodes that
            run verl's GPU workers; falls back to any node when every node has a GPU.
            ``resource`` requires ``resource`` units of a custom resource (start the
            retrieval nodes with ``ray start --resources='{"retriever": 4}'``).
            ``any`` leaves placement to Ray.
        resource: Custom resource name (``placement="resource"``).
        resource_per_replica: Units of ``resource`` each replica takes.
        max_batch: Most queries in one batched call of a replica.
        max_wait_ms: How long a replica's call waits for others to join its batch.
        share_arrays: Memory-map the KB arrays and derived indexes from a node-local
            cache so replicas on one node share one read-only copy.
        monitor_interval_s: How often the controller checks replicas (liveness, load).
    """

    WHERE = "ServingConfig"

    num_replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_queued_queries: float = 256.0
    upscale_ticks: int = 3
    downscale_ticks: int = 30
    num_cpus: float = 1.0
    placement: str = "cpu_nodes"
    resource: str | None = None
    resource_per_replica: float = 1.0
    max_batch: int = 256
    max_wait_ms: float = 5.0
    share_arrays: bool = True
    monitor_interval_s: float = 0.5

    def __post_init__(self) -> None:
        def bad(name: str, msg: str) -> ValueError:
            return ValueError(f"ServingConfig.{name}={getattr(self, name)!r}: {msg}")

        if self.num_replicas < 1:
            raise bad("num_replicas", "must be >= 1")
        if (self.min_replicas is None) != (self.max_replicas is None):
            raise bad("min_replicas", "set both min_replicas and max_replicas for autoscaling, or neither")
        if (
            self.min_replicas is not None
            and self.max_replicas is not None
            and not 1 <= self.min_replicas <= self.num_replicas <= self.max_replicas
        ):
            raise bad(
                "num_replicas",
                f"autoscaling needs 1 <= min_replicas <= num_replicas <= max_replicas, "
                f"got {self.min_replicas}, {self.num_replicas}, {self.max_replicas}",
            )
        if self.placement not in PLACEMENTS:
            raise bad("placement", f"must be one of {PLACEMENTS}")
        if self.placement == "resource" and not self.resource:
            raise bad("resource", "placement='resource' needs the custom resource name")
        if self.num_cpus < 0 or self.resource_per_replica <= 0:
            raise bad("num_cpus", "num_cpus must be >= 0 and resource_per_replica > 0")
        if self.max_batch < 1 or self.max_wait_ms < 0 or self.monitor_interval_s <= 0:
            raise bad("max_batch", "need max_batch >= 1, max_wait_ms >= 0, monitor_interval_s > 0")
        if self.target_queued_queries <= 0 or self.upscale_ticks < 1 or self.downscale_ticks < 1:
            raise bad("target_queued_queries", "autoscaling target and tick counts must be > 0")

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None
