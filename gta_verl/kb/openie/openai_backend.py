"""Backend 1: LLM OpenIE over any OpenAI-compatible chat endpoint (e.g. ``vllm serve``).

Per passage: one NER call, then one triple call conditioned on the entities
(HippoRAG 2 recipe). Retries with backoff live in :class:`ChatClient`; a call
that still fails marks the passage ``error`` (not cached, so a rerun retries it);
a reply with no parseable JSON marks it ``unparseable``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from gta_verl.data.types import Passage
from gta_verl.kb.openie.base import Extraction, make_extraction
from gta_verl.kb.openie.parse import parse_entities, parse_triples_with_repair
from gta_verl.kb.openie.prompts import PROMPT_VERSION, ner_messages, triple_messages


def extract_with_replies(
    passage: Passage, ner_reply: str, triple_reply: str | None, entities: list[str] | None
) -> Extraction:
    """Turn the two replies of one passage into an :class:`Extraction` (pure)."""
    triples, repair = (None, "failed") if triple_reply is None else parse_triples_with_repair(triple_reply)
    if triples is None:
        return make_extraction(passage.doc_id, entities or (), (), parsed=False, json_repair=repair)
    return make_extraction(passage.doc_id, entities or (), triples, json_repair=repair)


class OpenAIOpenIE:
    """NER → triples through a chat endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: Served model name.
        api_key: Bearer token (default ``$OPENAI_API_KEY`` or "EMPTY").
        concurrency: Passages in flight at once.
        max_tokens: Reply budget per call (truncated replies are repaired by the parser).
        timeout: Seconds per HTTP request (a CPU server answering ``concurrency`` passages at once
            needs minutes, not the default's one).
        stop: Stop strings sent with every call: a base model served with a transcript template
            (:data:`gta_verl.llm.vllm_server.TRANSCRIPT_STOP`) goes on to write the next example otherwise.
            Part of the identity when given (other replies, other cache).
        client: An existing ``ChatClient`` (tests inject one).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        concurrency: int = 8,
        max_tokens: int = 1024,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        stop: Sequence[str] = (),
        client: Any = None,
    ) -> None:
        from gta_verl.llm.openai_chat import ChatClient

        self.client = client or ChatClient(
            base_url, model, api_key=api_key, timeout=timeout, max_retries=max_retries, backoff=backoff
        )
        self.model = model
        self.concurrency = max(1, concurrency)
        self.params: dict[str, Any] = {"temperature": 0.0, "max_tokens": max_tokens}
        self.identity = f"openai:{model}:prompt-{PROMPT_VERSION}"
        if stop:
            self.params["stop"] = list(stop)
            self.identity += f":stop-{json.dumps(list(stop))}"

    def extract_one(self, passage: Passage) -> Extraction:
        from gta_verl.llm.openai_chat import ChatError

        try:
            ner_reply = self.client.complete(ner_messages(passage), **self.params)
            entities = parse_entities(ner_reply)
            triple_reply = self.client.complete(triple_messages(passage, entities or []), **self.params)
        except ChatError as exc:
            return Extraction(passage.doc_id, status="error", error=str(exc)[:500])
        return extract_with_replies(passage, ner_reply, triple_reply, entities)

    def extract(self, passages: Sequence[Passage]) -> Iterator[Extraction]:
        """Yield extractions as passages finish (so each is cached at once)."""
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = [pool.submit(self.extract_one, p) for p in passages]
            for fut in as_completed(futures):
                yield fut.result()
