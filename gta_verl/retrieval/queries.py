"""What every retriever backend does to a batch of queries before it scores them.

Validation and truncation are the same for every backend (:mod:`gta_verl.retrieval.backends`),
so a query that one backend rejects or cuts, every other one rejects or cuts alike, and the
micro-batcher can check a query on the event loop without knowing which backend serves it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Protocol

FLAG_TRUNCATED = "query_truncated"


class QueryLimits(Protocol):
    """The two knobs of :class:`~gta_verl.retrieval.config.RetrieverConfig` that bound a query."""

    @property
    def max_query_chars(self) -> int: ...

    @property
    def max_query_words(self) -> int: ...


def visible(q: str) -> str:
    """``q`` with control (Cc) and format (Cf: zero-width, bidi marks, BOM) characters turned into spaces.

    >>> visible("a\\u200bb\\x00c")
    'a b c'
    """
    if q.isprintable():
        return q
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Cf") else ch for ch in q)


def prepare_queries(queries: Sequence[str], limits: QueryLimits) -> tuple[list[str], list[tuple[str, ...]]]:
    """Validate and truncate queries; returns texts and per-query flags.

    Whitespace runs become one space; a query longer than ``max_query_words`` words or
    ``max_query_chars`` characters is cut and flagged ``query_truncated``.

    Raises:
        TypeError: If ``queries`` is a bare string or holds non-strings.
        ValueError: If a query is empty or whitespace, or holds a lone surrogate (not UTF-8 text).
    """
    if isinstance(queries, str):
        raise TypeError("retrieve() takes a sequence of queries, not a single string: wrap it in a list")
    texts: list[str] = []
    flags: list[tuple[str, ...]] = []
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise TypeError(f"query {i} is {type(q).__name__}, expected str")
        try:  # a lone surrogate (a JSON "\\ud800" escape, a bad decode) is not text: no encoder takes it
            q.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"query {i} is not valid UTF-8 (lone surrogate U+{ord(q[exc.start]):04X} at character "
                f"{exc.start}); send text"
            ) from None
        text = " ".join(visible(q).split())  # NUL-, zero-width- or bidi-only is as empty as blank
        if not text:
            raise ValueError(
                f"query {i} is empty or has only whitespace/invisible characters; a search query needs text"
            )
        truncated = False
        if limits.max_query_words and len(words := text.split(" ")) > limits.max_query_words:
            text, truncated = " ".join(words[: limits.max_query_words]), True
        if len(text) > limits.max_query_chars:
            text, truncated = text[: limits.max_query_chars], True
        texts.append(text)
        flags.append((FLAG_TRUNCATED,) if truncated else ())
    return texts, flags


def query_cost(query: str, limits: QueryLimits) -> int:
    """The characters of ``query`` that retrieval works on (at most ``max_query_chars``): the
    batcher's measure of its cost, cheap enough to take on the event loop before the cut."""
    return min(len(query), limits.max_query_chars)
