"""Rollout backends ``hf_cpu`` and ``hf``: verl's replica + in-worker adapter around our HF server.

The server is :mod:`gta_verl.cpu.server`.

Selected by config only: ``actor_rollout_ref.rollout.name=hf_cpu`` (with the CPU platform, see
:mod:`gta_verl.cpu.platform`) generates on the host in float32; ``actor_rollout_ref.rollout.name=hf``
generates on the training worker's GPU in ``rollout.dtype`` where the node has one and behaves as
``hf_cpu`` where it has none (:mod:`gta_verl.cpu.devices`). Registered when ``import verl`` loads
our ``verl.plugins`` entry point (``gta_verl.verl_plugins``):

* :class:`HFCPUReplica` through verl's public ``RolloutReplicaRegistry`` (docs/verl_on_cpu.md, obstacle 9):
  ``launch_servers()`` starts one :class:`~gta_verl.cpu.server.HFRolloutServer` actor per replica
  and publishes its handle; verl's load balancer routes ``generate`` calls to it.
* :class:`HFCPUServerAdapter` in verl's ``_ROLLOUT_REGISTRY`` (obstacle 9b; the dict has no
  register function in 0.9.1): the object the actor worker holds as ``self.rollout``. On each
  weight sync (V1 forces the in-process "naive" sync, ``trainer_base.py:382``) every training
  rank consumes the weights generator (its ``full_tensor()`` calls are collectives) and rank 0
  sends the HF-named state dict to the server, then stamps ``global_steps``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from gta_verl.strict_config import value_at
from gta_verl.verl_compat import (
    ROLLOUT_ADAPTER_REGISTRY,
    BaseRollout,
    RolloutReplica,
    RolloutReplicaRegistry,
    allow_topk_teacher_engine,
)

logger = logging.getLogger(__name__)

#: ``actor_rollout_ref.rollout.name`` of the host-only backend.
ROLLOUT_NAME = "hf_cpu"
#: ``actor_rollout_ref.rollout.name`` of the backend that uses the node's accelerator when it has one.
ACCEL_ROLLOUT_NAME = "hf"


def server_actor_name(replica_rank: int, suffix: str = "", rollout_name: str = ROLLOUT_NAME) -> str:
    """Ray actor name of a replica's server (unique within the job's namespace)."""
    return f"{rollout_name}_server_{replica_rank}{suffix}"


def _engine_kwarg(config: Any, rollout_name: str, key: str) -> Any:
    """``rollout.engine_kwargs.<name>.<key>`` (``hf`` also reads ``hf_cpu``'s); None when unset."""
    for name in dict.fromkeys((rollout_name, ROLLOUT_NAME)):
        value = value_at(config, f"engine_kwargs.{name}.{key}", None)
        if value:
            return value
    return None


def _chunk(config: Any, rollout_name: str) -> int:
    """New tokens per batched call (``rollout.engine_kwargs.<name>.chunk``, default 32).

    A row's prefix is re-encoded once per call, so long prompts want long chunks; rows join at
    chunk boundaries.
    """
    return int(_engine_kwarg(config, rollout_name, "chunk") or 32)


class HFCPUReplica(RolloutReplica):
    """One ``hf_cpu`` server per replica; no GPUs, no worker processes of its own."""

    rollout_name = ROLLOUT_NAME
    use_accelerator = False

    async def _placement(self) -> tuple[list[str], str | None]:
        """Accelerator ids and node of this replica's training workers (none for ``hf_cpu``)."""
        return [], None

    async def launch_servers(self) -> None:
        import ray

        from gta_verl.cpu.devices import server_options
        from gta_verl.cpu.server import HFRolloutServer

        model_path = os.path.expanduser(
            str(value_at(self.model_config, "local_path") or value_at(self.model_config, "path"))
        )
        name = server_actor_name(self.replica_rank, self.name_suffix, self.rollout_name)
        gpu_ids, node_id = await self._placement()
        opts = server_options(name, self.max_concurrency, gpu_ids, node_id)
        if "node_id" in opts:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                node_id=opts.pop("node_id"), soft=False
            )
        handle = (
            ray.remote(HFRolloutServer)
            .options(**opts)
            .remote(
                model_path,
                int(self.config.response_length),
                int(value_at(self.config, "seed", 0)),
                bool(value_at(self.model_config, "trust_remote_code", False)),
                int(value_at(self.config, "max_num_seqs", 64)),  # vLLM's knob: most sequences per batch
                _chunk(self.config, self.rollout_name),
                use_accelerator=self.use_accelerator,
                dtype=str(value_at(self.config, "dtype", None) or "bfloat16"),
                host_dtype=_engine_kwarg(self.config, self.rollout_name, "dtype"),
            )
        )
        state = await handle.state.remote()  # wait until the model is loaded
        self.servers = [handle]
        self._server_handle = handle
        self._server_address = name  # no HTTP endpoint: the load balancer keys servers by this name
        if self.use_accelerator and state["device"] == "cpu":  # the GPU smoke greps for this line
            logger.warning(
                "%s rollout server %s on cpu: it sees no GPU (worker GPUs %s); generating in float32",
                self.rollout_name,
                name,
                gpu_ids or "none",
            )
        logger.info("%s rollout server %s ready (%s, %s)", self.rollout_name, name, model_path, state)


class HFReplica(HFCPUReplica):
    """One ``hf`` server per replica, on the GPU of the replica's first training worker if it has one."""

    rollout_name = ACCEL_ROLLOUT_NAME
    use_accelerator = True

    async def _placement(self) -> tuple[list[str], str | None]:
        if not self.workers:  # no worker group handed over: nothing to share
            return [], None
        import ray

        def where(worker: Any) -> tuple[str, list[str]]:
            ctx = ray.get_runtime_context()
            return ctx.get_node_id(), [str(i) for i in ctx.get_accelerator_ids().get("GPU", [])]

        node_id, gpu_ids = await self.workers[0].__ray_call__.remote(where)
        return gpu_ids[:1], node_id


class HFCPUServerAdapter(BaseRollout):
    """In-worker side of ``hf_cpu``: weight sync to the server; sleep/wake are no-ops (nothing to free)."""

    rollout_name = ROLLOUT_NAME

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.server_handle: Any = None

    def _server(self) -> Any:
        # Lazy: the actor worker builds this adapter before the replica launches its server.
        if self.server_handle is None:
            import ray

            self.server_handle = ray.get_actor(
                server_actor_name(self.replica_rank, rollout_name=self.rollout_name)
            )
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Iterable[tuple[str, Any]],
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        **kwargs: Any,
    ) -> None:
        """Send the actor's weights to the server (rank 0 of the replica) and stamp the version.

        Args:
            weights: ``(hf_name, tensor)`` pairs from the FSDP engine (consumed on every rank).
            global_steps: Weight version the server reports in ``extra_fields``.
            wire_format: Only ``"named_tensors"`` (the naive in-process sync).
            **kwargs: ``peft_config`` / ``base_sync_done`` (LoRA is not supported here).
        """
        if wire_format != "named_tensors":
            raise NotImplementedError(
                f"hf_cpu rollout supports wire_format='named_tensors', got {wire_format!r}"
            )
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError(
                "hf_cpu rollout does not support LoRA adapters (use model.lora.merge=True)"
            )
        keep = self.rollout_rank == 0
        state = {}
        for name, tensor in weights:  # every rank iterates: full_tensor() is a collective
            if keep:
                state[name] = tensor.detach().to("cpu").clone()
        if not keep:
            return
        server = self._server()
        await server.load_weights.remote(state)
        if global_steps is not None:
            await server.set_global_steps.remote(int(global_steps))


class HFServerAdapter(HFCPUServerAdapter):
    """In-worker side of ``hf``: the same weight sync (to the host, then the server's device)."""

    rollout_name = ACCEL_ROLLOUT_NAME


def _load_replica() -> type[RolloutReplica]:
    return HFCPUReplica


def _load_accel_replica() -> type[RolloutReplica]:
    return HFReplica


def register() -> None:
    """Register ``hf_cpu`` and ``hf`` in verl's replica and adapter registries (idempotent)."""
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    RolloutReplicaRegistry.register(ACCEL_ROLLOUT_NAME, _load_accel_replica)
    ROLLOUT_ADAPTER_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFCPUServerAdapter"
    ROLLOUT_ADAPTER_REGISTRY[(ACCEL_ROLLOUT_NAME, "async")] = f"{__name__}.HFServerAdapter"
    for name in (ROLLOUT_NAME, ACCEL_ROLLOUT_NAME):
        allow_topk_teacher_engine(name)  # the teacher's prompt_logprobs work for any K


register()
