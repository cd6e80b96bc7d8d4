"""The ``hf_cpu`` rollout server: a Ray actor serving HF ``generate()`` to verl's LLM client.

verl's ``LLMServerClient.generate`` calls ``server.generate.remote(request_id=, prompt_ids=,
sampling_params=, image_data=, video_data=)`` on the handle a :class:`RolloutReplica` publishes,
and expects a ``TokenOutput`` whose ``extra_fields["global_steps"]`` is the int weight version
(``llm_server.py:161`` copies it into ``min/max_global_steps``; the V1 trainer builds an int array
from them). The replica and the trainer also call the lifecycle methods below (sleep / wake-up /
abort / profiling / KV-cache); on a CPU with one in-process model they have nothing to free, except
that abort / resume are verl's partial rollouts (``colocate_async``):
:meth:`HFRolloutServer.abort_all_requests` answers the requests in flight with their tokens so far
(stop reason ``"aborted"``) and parks new ones until :meth:`HFRolloutServer.resume_generation`, as
verl's vLLM server does.

Weights arrive through :meth:`HFRolloutServer.load_weights` from the in-worker adapter
(:class:`gta_verl.cpu.rollout.HFCPUServerAdapter`), then :meth:`set_global_steps` stamps the version.

This module imports verl first (through ``verl_compat``) so that, in the Ray actor process that
unpickles the class, ``VERL_USE_EXTERNAL_MODULES`` registers the CPU platform before anything
else touches verl (docs/verl_on_cpu.md, obstacle 10).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gta_verl.verl_compat import TokenOutput  # imports verl first (see module docstring)

logger = logging.getLogger(__name__)


class HFRolloutServer:
    """Body of the rollout Ray actor (created by :class:`gta_verl.cpu.rollout.HFCPUReplica`).

    Args:
        model_path: HF model directory (``actor_rollout_ref.model.path``, local).
        response_length: Default generation budget (``rollout.response_length``).
        seed: Sampling seed (``rollout.seed``): runs are reproducible.
        trust_remote_code: Passed to ``from_pretrained``.
        max_batch: Most queued requests generated in one batched call
            (:func:`gta_verl.llm.hf_batch_generate.hf_generate_batch`); 1 serves them one by one.
        chunk: Most new tokens per batched call (:class:`~gta_verl.llm.hf_batch_generate.GenerationBatcher`).
        use_accelerator: Load on cuda when this process sees a GPU (``hf``); False stays on the
            host (``hf_cpu``).
        dtype: Model dtype on the accelerator (``rollout.dtype``).
        host_dtype: Model dtype on the host (``rollout.engine_kwargs.hf_cpu.dtype``; None: float32,
            :func:`gta_verl.cpu.devices.rollout_device`).
    """

    def __init__(
        self,
        model_path: str,
        response_length: int,
        seed: int = 0,
        trust_remote_code: bool = False,
        max_batch: int = 64,
        chunk: int = 32,
        use_accelerator: bool = False,
        dtype: str | None = None,
        host_dtype: str | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from gta_verl.cpu.devices import rollout_device

        self.device, self.dtype = rollout_device(
            use_accelerator, torch.cuda.is_available(), dtype, host_dtype
        )
        torch.manual_seed(seed)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model = (
            AutoModelForCausalLM.from_pretrained(
                model_path,
                dtype=getattr(torch, self.dtype),
                attn_implementation="sdpa",
                trust_remote_code=trust_remote_code,
            )
            .to(self.device)
            .eval()
        )
        self.response_length = int(response_length)
        self.global_steps = 0  # an int before the first sync: verl builds an int array from it
        self.weight_updates = 0
        self._lock = asyncio.Lock()  # one model call at a time: the model is not re-entrant
        from gta_verl.llm.hf_batch_generate import GenerationBatcher

        self.max_batch = int(max_batch)
        self._batcher = GenerationBatcher(
            self.model, self.tokenizer, self.response_length, self.max_batch, self._lock, chunk=chunk
        )
        self._serving = asyncio.Event()  # cleared between an abort and the resume
        self._serving.set()
        self._rejecting = False

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: Mapping[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Generate for one request; see :func:`gta_verl.llm.hf_generate.hf_generate`."""
        if image_data is not None or video_data is not None:
            raise ValueError("hf_cpu rollout serves text-only models")
        if not self._serving.is_set():
            if self._rejecting:  # verl's client retries an aborted request after a second
                return TokenOutput(
                    token_ids=[],
                    log_probs=[],
                    stop_reason="aborted",
                    num_preempted=0,
                    extra_fields={"global_steps": int(self.global_steps)},
                )
            await self._serving.wait()  # parked until the weights are updated
        out = await self._batcher.generate(list(prompt_ids), dict(sampling_params))
        return TokenOutput(
            token_ids=out.token_ids,
            log_probs=out.log_probs,
            stop_reason=out.stop_reason,
            num_preempted=0,
            extra_fields={"global_steps": int(self.global_steps), **out.extra},
        )

    async def load_weights(self, state_dict: dict[str, Any]) -> int:
        """Copy HF-named tensors into the model; return how many were loaded.

        Raises:
            KeyError: a tensor name the model does not have, or a model tensor left out (other
                than the tied ``lm_head.weight``) — a silent partial sync would train one policy
                and roll out another.
        """
        async with self._lock:
            result = self.model.load_state_dict(state_dict, strict=False)
        missing = [k for k in result.missing_keys if not k.startswith("lm_head.")]
        if result.unexpected_keys or missing:
            raise KeyError(
                f"hf_cpu weight sync: unexpected {result.unexpected_keys[:5]}, missing {missing[:5]}"
            )
        self.weight_updates += 1
        return len(state_dict)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)

    async def state(self) -> dict[str, Any]:
        """Weight version, update count, device and dtype (tests and debugging)."""
        return {
            "device": self.device,
            "dtype": self.dtype,
            "global_steps": self.global_steps,
            "weight_updates": self.weight_updates,
            "batches": list(self._batcher.batches),
        }

    async def parameter_checksum(self) -> float:
        """Sum of all parameters: a cheap fingerprint that a weight sync changed the model."""
        import torch

        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model.parameters()))

    # Other lifecycle calls of RolloutReplica / CheckpointEngineManager: one CPU model, nothing to free.
    async def wake_up(self, tags: Any = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        """Partial rollout: answer every request in flight "aborted"; park (or reject) new ones."""
        self._serving.clear()
        self._rejecting = bool(reject_request)
        return {"aborted_count": self._batcher.abort_all(), "request_ids": []}

    async def resume_generation(self) -> None:
        """Serve again after :meth:`abort_all_requests` (verl calls it after the weight update)."""
        self._rejecting = False
        self._batcher.resume()
        self._serving.set()

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None
