"""Backend 2: in-process vLLM batch generation (GPU extra: ``pip install gta-verl[gpu]``).

Same prompts and parsing as the chat backend; all NER prompts of a chunk are
generated in one batch, then all triple prompts. Importing this module never
needs vLLM; constructing :class:`VLLMOpenIE` does, and says how to get it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gta_verl.data.types import Passage
from gta_verl.kb.openie.base import Extraction
from gta_verl.kb.openie.openai_backend import extract_with_replies
from gta_verl.kb.openie.parse import parse_entities
from gta_verl.kb.openie.prompts import PROMPT_VERSION, ner_messages, triple_messages


class VLLMOpenIE:
    """NER → triples with ``vllm.LLM.chat`` in this process.

    Args:
        model: HF model name or local path (paper: Llama-3.1-8B-Instruct).
        chunk: Passages per generation batch (each chunk is yielded, hence cached, when done).
        max_tokens: Reply budget per call.
        **llm_kwargs: Passed to ``vllm.LLM`` (``tensor_parallel_size``, ``gpu_memory_utilization`` ...).
    """

    def __init__(
        self, model: str, chunk: int = 512, max_tokens: int = 1024, llm: Any = None, **llm_kwargs: Any
    ) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ImportError(
                "--openie vllm needs vLLM on a GPU machine: `pip install gta-verl[gpu]` "
                "(or serve a model with `vllm serve` and use --openie openai, or use --openie spacy on CPU)"
            ) from exc
        self.llm = llm or LLM(model=model, **llm_kwargs)
        self.sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        self.chunk = max(1, chunk)
        self.identity = f"vllm:{model}:prompt-{PROMPT_VERSION}"

    def _generate(self, conversations: list[list[dict[str, str]]]) -> list[str]:
        outs = self.llm.chat(conversations, self.sampling, use_tqdm=False)
        return [o.outputs[0].text if o.outputs else "" for o in outs]

    def extract(self, passages: Sequence[Passage]) -> Iterator[Extraction]:
        for s in range(0, len(passages), self.chunk):
            batch = list(passages[s : s + self.chunk])
            ner = self._generate([ner_messages(p) for p in batch])
            ents = [parse_entities(r) for r in ner]
            tri = self._generate([triple_messages(p, e or []) for p, e in zip(batch, ents, strict=True)])
            for p, nr, e, tr in zip(batch, ner, ents, tri, strict=True):
                yield extract_with_replies(p, nr, tr, e)
