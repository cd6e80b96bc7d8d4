"""Minimal client for any OpenAI-compatible chat endpoint (``vllm serve``, SGLang, OpenAI).

Used by the LLM OpenIE backend and the LLM trajectory generator. It speaks plain
HTTP (httpx) so that it works against local servers without the ``openai`` SDK,
retries transient failures with exponential backoff, and reports the last error.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

logger = logging.getLogger(__name__)

# HTTP statuses worth retrying: rate limiting and server-side failures.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def stop_strings(values: Sequence[str] | None) -> tuple[str, ...]:
    """``--llm-stop`` values as stop strings: ``\\n``, ``\\t`` and ``\\\\`` read as escapes (a shell
    passes ``'\\nInput:'`` as backslash + n), other text as it is.

    >>> stop_strings(["\\\\nInput:", "END"])
    ('\\nInput:', 'END')

    Raises:
        ValueError: an empty stop string (it would end every reply before its first token).
    """
    out = []
    for value in values or ():
        text = re.sub(r"\\([nt\\])", lambda m: _ESCAPES[m.group(1)], value)
        if not text:
            raise ValueError("--llm-stop: empty stop string")
        out.append(text)
    return tuple(out)


class ChatError(RuntimeError):
    """A chat completion failed after all retries (or with a non-retryable error)."""


@dataclass(frozen=True)
class ChatConfig:
    """Connection settings for :class:`ChatClient`.

    Attributes:
        base_url: Server root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: Model name the server expects.
        api_key: Bearer token; defaults to ``$OPENAI_API_KEY`` or ``"EMPTY"`` (vLLM accepts any).
        timeout: Seconds per HTTP request.
        max_retries: Extra attempts after the first one.
        backoff: First retry delay in seconds; doubles each retry.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 3
    backoff: float = 0.5

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.model:
            raise ValueError("model must be a non-empty model name (as served by the endpoint)")
        if self.max_retries < 0 or self.timeout <= 0 or self.backoff < 0:
            raise ValueError("timeout must be > 0, max_retries and backoff >= 0")


class ChatClient:
    """Synchronous chat-completions client with retries.

    Example:
        >>> client = ChatClient("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")  # doctest: +SKIP
        >>> client.complete([{"role": "user", "content": "Hi"}], temperature=0.0)  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = ChatConfig(base_url.rstrip("/"), model, api_key, timeout, max_retries, backoff)
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._http = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"})
        self._sleep = sleep

    @property
    def url(self) -> str:
        return f"{self.config.base_url}/chat/completions"

    def complete(self, messages: Sequence[dict[str, str]], **params: Any) -> str:
        """Return the assistant message text of one chat completion.

        Args:
            messages: ``[{"role", "content"}, ...]``.
            **params: Extra request fields (``temperature``, ``max_tokens``, ``response_format`` ...).

        Raises:
            ChatError: After ``max_retries`` retries of transient failures, or at once on a
                non-retryable HTTP status or a malformed response body.
        """
        payload = {"model": self.config.model, "messages": list(messages), **params}
        last: str = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                self._sleep(self.config.backoff * (2 ** (attempt - 1)))
            try:
                resp = self._http.post(self.url, json=payload)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                logger.debug("chat attempt %d failed: %s", attempt + 1, last)
                continue
            if resp.status_code in RETRYABLE_STATUS:
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code != 200:
                raise ChatError(f"{self.url} returned HTTP {resp.status_code}: {resp.text[:300]}")
            return _message_text(resp, self.url)
        raise ChatError(f"{self.url} failed after {self.config.max_retries + 1} attempts: {last}")

    def complete_many(
        self, batch: Sequence[Sequence[dict[str, str]]], concurrency: int = 8, **params: Any
    ) -> list[str | ChatError]:
        """Complete many conversations concurrently; failures come back as ``ChatError`` values."""

        def one(msgs: Sequence[dict[str, str]]) -> str | ChatError:
            try:
                return self.complete(msgs, **params)
            except ChatError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            return list(pool.map(one, batch))

    def close(self) -> None:
        self._http.close()


def _message_text(resp: httpx.Response, url: str) -> str:
    try:
        body = resp.json()
        content = body["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ChatError(f"{url} returned a malformed completion: {resp.text[:300]}") from exc
    return content or ""
