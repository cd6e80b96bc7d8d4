"""Rollout backend ``hf_cpu``: verl's replica + in-worker adapter around :mod:`gta_verl.cpu.server`.

Selected by config only: ``actor_rollout_ref.rollout.name=hf_cpu`` (with the CPU platform, see
:mod:`gta_verl.cpu.platform`). Registered when ``import verl`` loads our ``verl.plugins`` entry
point (``gta_verl.verl_plugins``):

* :class:`HFCPUReplica` through verl's public ``RolloutReplicaRegistry`` (verl-cpu.md obstacle 9):
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

#: ``actor_rollout_ref.rollout.name`` of this backend.
ROLLOUT_NAME = "hf_cpu"


def server_actor_name(replica_rank: int, suffix: str = "") -> str:
    """Ray actor name of a replica's server (unique within the job's namespace)."""
    return f"{ROLLOUT_NAME}_server_{replica_rank}{suffix}"


class HFCPUReplica(RolloutReplica):
    """One ``hf_cpu`` server per replica; no GPUs, no worker processes of its own."""

    async def launch_servers(self) -> None:
        import ray

        from gta_verl.cpu.server import HFRolloutServer

        model_path = os.path.expanduser(
            str(value_at(self.model_config, "local_path") or value_at(self.model_config, "path"))
        )
        name = server_actor_name(self.replica_rank, self.name_suffix)
        handle = (
            ray.remote(HFRolloutServer)
            .options(name=name, num_cpus=1, num_gpus=0, max_concurrency=self.max_concurrency)
            .remote(
                model_path,
                int(self.config.response_length),
                int(value_at(self.config, "seed", 0)),
                bool(value_at(self.model_config, "trust_remote_code", False)),
                int(value_at(self.config, "max_num_seqs", 64)),  # vLLM's knob: most sequences per batch
                # New tokens per batched call (rollout.engine_kwargs.hf_cpu.chunk): a row's prefix is
                # re-encoded once per call, so long prompts want long chunks; rows join at chunk boundaries.
                int(value_at(self.config, "engine_kwargs.hf_cpu.chunk", None) or 32),
            )
        )
        await handle.state.remote()  # wait until the model is loaded
        self.servers = [handle]
        self._server_handle = handle
        self._server_address = name  # no HTTP endpoint: the load balancer keys servers by this name
        logger.info("hf_cpu rollout server %s ready (%s)", name, model_path)


class HFCPUServerAdapter(BaseRollout):
    """In-worker side of ``hf_cpu``: weight sync to the server; sleep/wake are no-ops on a CPU."""

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

            self.server_handle = ray.get_actor(server_actor_name(self.replica_rank))
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


def _load_replica() -> type[RolloutReplica]:
    return HFCPUReplica


def register() -> None:
    """Register ``hf_cpu`` in verl's replica and adapter registries (idempotent)."""
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    ROLLOUT_ADAPTER_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.HFCPUServerAdapter"
    allow_topk_teacher_engine(ROLLOUT_NAME)  # the teacher's prompt_logprobs work for any K


register()
