"""A vLLM generation backend with the server-manager interface the agent loop calls (GPU only).

The agent loop calls ``await server_manager.generate(request_id=…, prompt_ids=[…],
sampling_params={…})`` and reads ``.token_ids`` and ``.log_probs`` of the result
(verl's ``TokenOutput``). :class:`VLLMServerManager` answers those calls from one
in-process ``vllm.AsyncLLMEngine``, so concurrent rollouts batch on the GPU the way
verl's rollout servers do. vLLM is imported lazily: on a CPU machine only
constructing this class fails, with an actionable message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Sampling keys the agent loop / eval runner pass that map 1:1 onto vllm.SamplingParams.
_PASSTHROUGH = ("temperature", "top_p", "top_k", "max_tokens", "stop", "include_stop_str_in_output", "seed")


@dataclass(frozen=True)
class GenerationOutput:
    """What the agent loop reads from a generate call (subset of verl's ``TokenOutput``)."""

    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "backend='vllm' needs vLLM on a CUDA machine (pip install vllm, the version your verl "
            "install pins); on CPU use --backend hf with a small model or --policy tiny-random-qwen2"
        ) from exc
    return vllm


class VLLMServerManager:
    """Generate token ids with ``vllm.AsyncLLMEngine`` for the GTA agent loop.

    Args:
        model_path: HF model directory or hub id (resolved offline).
        gpu_memory_utilization: vLLM's KV-cache budget as a fraction of GPU memory.
        max_model_len: Context length (prompt + response); None = the model's.
        seed: Engine seed (sampling is reproducible per request given the seed).
        engine_kwargs: Extra ``AsyncEngineArgs`` fields (e.g. ``tensor_parallel_size``).
    """

    def __init__(
        self,
        model_path: str,
        gpu_memory_utilization: float = 0.8,
        max_model_len: int | None = None,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        args = vllm.AsyncEngineArgs(
            model=model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            enable_prefix_caching=True,  # every turn re-sends the growing trajectory prefix
            **engine_kwargs,
        )
        self._vllm = vllm
        self.engine = vllm.AsyncLLMEngine.from_engine_args(args)
        self._calls = 0

    def _sampling_params(self, params: dict[str, Any]) -> Any:
        kwargs = {k: params[k] for k in _PASSTHROUGH if k in params}
        kwargs["logprobs"] = 0  # the sampled token's log-prob only
        return self._vllm.SamplingParams(**kwargs)

    async def generate(
        self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> GenerationOutput:
        """Generate one continuation of ``prompt_ids`` (one agent turn)."""
        from vllm.inputs import TokensPrompt

        self._calls += 1
        final = None
        # vLLM request ids must be unique per call, the loop reuses one per trajectory.
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=list(prompt_ids)),
            self._sampling_params(sampling_params),
            request_id=f"{request_id}-{self._calls}",
        ):
            final = out
        if final is None or not final.outputs:
            return GenerationOutput(token_ids=[])
        comp = final.outputs[0]
        log_probs = None
        if comp.logprobs is not None:
            log_probs = [
                float(step[tok].logprob) for tok, step in zip(comp.token_ids, comp.logprobs, strict=True)
            ]
        return GenerationOutput(
            token_ids=list(comp.token_ids), log_probs=log_probs, stop_reason=str(comp.finish_reason)
        )

    def shutdown(self) -> None:
        """Stop the engine's background loop (best effort; vLLM versions differ)."""
        stop = getattr(self.engine, "shutdown", None)
        if callable(stop):
            stop()
