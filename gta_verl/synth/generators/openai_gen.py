"""LLM trajectory generator over any OpenAI-compatible chat endpoint (``vllm serve``, SGLang, OpenAI)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.llm.openai_chat import ChatClient
from gta_verl.synth.generators.base import GenerationOutcome
from gta_verl.synth.generators.llm_prompt import LLMPromptBuilder, LLMPromptConfig
from gta_verl.synth.paths import GraphPath

GENERATOR_NAME = "openai"


@dataclass(frozen=True)
class LLMSamplingConfig:
    """Decoding settings sent with every synthesis request.

    Attributes:
        temperature: Some diversity across paths of similar shape; 0.7 is a common
            data-generation setting.
        max_tokens: Room for an H ≤ 4 trajectory with reasoning (~150 tokens per turn).
        concurrency: Parallel HTTP requests (the server batches them).
        json_mode: Send ``response_format={"type": "json_object"}`` (vLLM and OpenAI
            support it; turn off for servers that reject the field).
        stop: Stop strings (a base model behind a transcript template goes on to write the next
            example: :data:`gta_verl.llm.vllm_server.TRANSCRIPT_STOP`).
    """

    temperature: float = 0.7
    max_tokens: int = 1024
    concurrency: int = 8
    json_mode: bool = False
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.max_tokens < 16 or self.concurrency < 1:
            raise ValueError("LLMSamplingConfig: temperature >= 0, max_tokens >= 16 and concurrency >= 1")
        if any(not s for s in self.stop):
            raise ValueError("LLMSamplingConfig: an empty stop string would end every reply at once")


class OpenAIGenerator:
    """Generator backed by :class:`gta_verl.llm.openai_chat.ChatClient`.

    Example:
        >>> client = ChatClient("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")  # doctest: +SKIP
        >>> gen = OpenAIGenerator(client)  # doctest: +SKIP
    """

    name = GENERATOR_NAME

    def __init__(
        self,
        client: ChatClient,
        sampling: LLMSamplingConfig | None = None,
        prompt: LLMPromptConfig | None = None,
    ) -> None:
        self.client = client
        self.sampling = sampling or LLMSamplingConfig()
        self.prompts = LLMPromptBuilder(prompt)

    def generate(self, paths: Sequence[GraphPath], kb: KnowledgeBase) -> list[GenerationOutcome]:
        params: dict = {"temperature": self.sampling.temperature, "max_tokens": self.sampling.max_tokens}
        if self.sampling.json_mode:
            params["response_format"] = {"type": "json_object"}
        if self.sampling.stop:
            params["stop"] = list(self.sampling.stop)
        replies = self.client.complete_many(
            self.prompts.messages(paths, kb), concurrency=self.sampling.concurrency, **params
        )
        return self.prompts.outcomes(paths, replies, kb, self.name)
