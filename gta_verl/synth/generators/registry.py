"""Build a generator by name (the CLI's ``--generator``)."""

from __future__ import annotations

from typing import Any

from gta_verl.synth.generators.base import Generator

GENERATOR_NAMES = ("template", "openai", "vllm")


def make_generator(
    name: str,
    seed: int = 0,
    llm_base_url: str | None = None,
    llm_model: str | None = None,
    llm_api_key: str | None = None,
    comparison_share: float = 0.0,
    llm_timeout: float = 60.0,
    worked_example: bool = True,
    **kwargs: Any,
) -> Generator:
    """Return the generator called ``name``.

    Args:
        name: ``template`` (offline, CPU), ``openai`` (needs ``llm_base_url`` and
            ``llm_model``) or ``vllm`` (needs ``llm_model``, a GPU and vLLM).
        seed: Seed of template choices / distractor selection / vLLM sampling.
        llm_base_url, llm_model, llm_api_key: LLM endpoint settings.
        llm_timeout: ``openai``: seconds per HTTP request (a CPU server needs minutes).
        worked_example: ``openai`` / ``vllm``: show the prompt's worked example as an earlier
            user/assistant turn (``LLMPromptConfig.worked_example``).
        comparison_share: ``template`` only: share of 2-document paths phrased as
            comparisons with parallel sub-questions (``TemplateConfig.comparison_share``).
        **kwargs: Passed to the generator's sampling config
            (``temperature``, ``max_tokens``, ``concurrency``, ``json_mode``, ``stop``).
    """
    if name == "template":
        from gta_verl.synth.generators.template import TemplateConfig, TemplateGenerator

        return TemplateGenerator(TemplateConfig(seed=seed, comparison_share=comparison_share))
    if comparison_share:
        raise ValueError("--comparison-share is a template-generator setting; use --generator template")
    from gta_verl.synth.generators.llm_prompt import LLMPromptConfig
    from gta_verl.synth.generators.openai_gen import LLMSamplingConfig

    sampling = LLMSamplingConfig(**kwargs)
    prompt = LLMPromptConfig(seed=seed, worked_example=worked_example)
    if name == "openai":
        if not llm_base_url or not llm_model:
            raise ValueError(
                "the 'openai' generator needs --llm-base-url (e.g. http://127.0.0.1:8000/v1) "
                "and --llm-model (the served model name)"
            )
        from gta_verl.llm.openai_chat import ChatClient
        from gta_verl.synth.generators.openai_gen import OpenAIGenerator

        client = ChatClient(llm_base_url, llm_model, api_key=llm_api_key, timeout=llm_timeout)
        return OpenAIGenerator(client, sampling, prompt)
    if name == "vllm":
        if not llm_model:
            raise ValueError("the 'vllm' generator needs --llm-model (a local path or model name)")
        from gta_verl.synth.generators.vllm_gen import VLLMGenerator

        return VLLMGenerator(llm_model, sampling, prompt, seed=seed)
    raise ValueError(f"unknown generator {name!r}; choose one of {', '.join(GENERATOR_NAMES)}")
