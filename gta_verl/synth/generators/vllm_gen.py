"""LLM trajectory generator on in-process vLLM (GPU extra: ``pip install gta-verl[vllm]``).

Batches all paths of a pipeline round into one ``LLM.chat`` call. Use it when
the generator model fits next to nothing else on the GPU; to share a server,
run ``vllm serve`` and use the ``openai`` generator instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.synth.generators.base import GenerationOutcome
from gta_verl.synth.generators.llm_prompt import LLMPromptBuilder, LLMPromptConfig
from gta_verl.synth.generators.openai_gen import LLMSamplingConfig
from gta_verl.synth.paths import GraphPath

GENERATOR_NAME = "vllm"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(
            "the 'vllm' generator needs vLLM and a CUDA GPU: pip install 'gta-verl[vllm]'. "
            "Without a GPU use '--generator template', or serve a model elsewhere with "
            "'vllm serve MODEL' and use '--generator openai --llm-base-url http://HOST:8000/v1'."
        ) from exc
    return vllm


class VLLMGenerator:
    """Generator backed by ``vllm.LLM`` (loaded once, in this process)."""

    name = GENERATOR_NAME

    def __init__(
        self,
        model: str,
        sampling: LLMSamplingConfig | None = None,
        prompt: LLMPromptConfig | None = None,
        seed: int = 0,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        self.sampling = sampling or LLMSamplingConfig()
        self.prompts = LLMPromptBuilder(prompt)
        self.llm = vllm.LLM(model=model, seed=seed, **llm_kwargs)
        self._params = vllm.SamplingParams(
            temperature=self.sampling.temperature,
            max_tokens=self.sampling.max_tokens,
            seed=seed,
            stop=list(self.sampling.stop) or None,
        )

    def generate(self, paths: Sequence[GraphPath], kb: KnowledgeBase) -> list[GenerationOutcome]:
        if not paths:
            return []
        conversations = self.prompts.messages(paths, kb)
        try:
            results = self.llm.chat(conversations, self._params, use_tqdm=False)
            replies: list[str | Exception] = [r.outputs[0].text if r.outputs else "" for r in results]
        except Exception as exc:  # one failed batch must not kill the run
            replies = [exc] * len(paths)
        return self.prompts.outcomes(paths, replies, kb, self.name)
