"""Tolerant parsing of LLM OpenIE replies.

LLMs wrap JSON in code fences, add prose around it, leave trailing commas, use
single quotes, rename keys ("triplets", "named_entities", {"subject", ...}
objects) and get cut off by ``max_tokens``. :func:`loads_lenient` recovers
what is recoverable; the callers say whether anything was parsed at all, which
becomes the passage status (``unparseable`` vs ``empty``).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)(?:```|$)", flags=re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
ENTITY_KEYS = ("named_entities", "entities", "named_entity", "ner", "extracted_entities")
TRIPLE_KEYS = ("triples", "triplets", "extracted_triples", "relations", "facts", "triple")
_SUBJ = ("subject", "head", "s", "subj", "source")
_REL = ("relation", "predicate", "r", "rel", "relationship")
_OBJ = ("object", "tail", "o", "obj", "target")
#: What :func:`loads_with_repair` did to a reply, from none to hopeless.
REPAIRS = ("none", "extracted", "syntax", "truncated", "failed")


def _strip_fences(text: str) -> str:
    m = _FENCE.search(text)
    return m.group(1) if m else text


def _try(text: str) -> Any:
    return _try_fixed(text)[0]


def _try_fixed(text: str) -> tuple[Any, bool]:
    """``(value, fixed)``: ``fixed`` when only the trailing-comma or Python-literal reading parsed."""
    for i, candidate in enumerate((text, _TRAILING_COMMA.sub(r"\1", text))):
        try:
            return json.loads(candidate), i > 0
        except (json.JSONDecodeError, ValueError):
            pass
        try:  # single-quoted Python literals
            return ast.literal_eval(candidate), True
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
    return None, False


def _open_stack(text: str) -> list[str] | None:
    """Closers needed to finish ``text`` (string-aware); ``None`` if cut inside a string."""
    stack: list[str] = []
    in_str, esc, quote = False, False, ""
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'":
            in_str, quote = True, ch
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack:
                return None
            stack.pop()
    return None if in_str else stack


def _repair_truncated(text: str, max_tries: int = 400) -> Any:
    """Cut a truncated reply after its last complete element and close the brackets."""
    # complete elements first (after a closing bracket), then partial strings
    brackets = [i + 1 for i, ch in enumerate(text) if ch in "]}"][-max_tries:]
    quotes = [i + 1 for i, ch in enumerate(text) if ch in "\"'"][-max_tries:]
    for end in list(reversed(brackets)) + list(reversed(quotes)):
        head = text[:end].rstrip().rstrip(",")
        stack = _open_stack(head)
        if stack is None:
            continue
        val = _try(head + "".join(reversed(stack)))
        if val is not None:
            return val
    return None


def loads_lenient(text: str) -> Any:
    """Parse the first JSON value in an LLM reply, repairing common damage; ``None`` if hopeless.

    >>> loads_lenient('Sure!\\n```json\\n{"triples": [["a", "b", "c"],]}\\n```')
    {'triples': [['a', 'b', 'c']]}
    >>> loads_lenient('{"triples": [["a", "b", "c"], ["d", "e"')
    {'triples': [['a', 'b', 'c']]}
    """
    return loads_with_repair(text)[0]


def loads_with_repair(text: str) -> tuple[Any, str]:
    """:func:`loads_lenient`'s value and which repair it took (one of :data:`REPAIRS`).

    ``none``: the reply was the JSON value; ``extracted``: cut out of code fences or prose around it;
    ``syntax``: trailing commas dropped or single quotes read as a Python literal; ``truncated``: cut after
    its last complete element and its brackets closed (a reply stopped by ``max_tokens``); ``failed``:
    nothing parseable.

    >>> loads_with_repair('Output: {"triples": []} Input:')
    ({'triples': []}, 'extracted')
    """
    if not isinstance(text, str) or not text.strip():
        return None, "failed"
    stripped = text.strip()
    body = _strip_fences(text).strip()
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        return None, "failed"
    body = body[min(starts) :]
    val, fixed = _try_fixed(body)
    cut = body
    if val is None:  # prose after the JSON: cut at the last closing bracket
        last = max(body.rfind("}"), body.rfind("]"))
        if last > 0:
            cut = body[: last + 1]
            val, fixed = _try_fixed(cut)
    if val is not None:
        return val, "syntax" if fixed else ("none" if cut == stripped else "extracted")
    val = _repair_truncated(body)
    return (val, "truncated") if val is not None else (None, "failed")


def _find_key(obj: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(obj, dict):
        lower = {str(k).lower().replace(" ", "_"): v for k, v in obj.items()}
        for k in keys:
            if k in lower:
                return lower[k]
        if len(obj) == 1:  # {"result": [...]}
            return next(iter(obj.values()))
    return obj


def parse_entities(text: str) -> list[str] | None:
    """Entity list from an NER reply; ``None`` when nothing parseable was found."""
    val = _find_key(loads_lenient(text), ENTITY_KEYS)
    if not isinstance(val, list):
        return None
    out = []
    for e in val:
        if isinstance(e, dict):
            e = e.get("name", e.get("entity", e.get("text")))
        if isinstance(e, (str, int, float)) and str(e).strip():
            out.append(str(e).strip())
    return out


def _triple_from(item: Any) -> Any:
    if isinstance(item, dict):
        lower = {str(k).lower(): v for k, v in item.items()}
        parts = [next((lower[k] for k in keys if k in lower), None) for keys in (_SUBJ, _REL, _OBJ)]
        return parts
    if isinstance(item, (list, tuple)):
        return [str(x) if isinstance(x, (int, float)) else x for x in item]
    return item


def parse_triples(text: str) -> list[Any] | None:
    """Candidate triples (lists, possibly malformed: the caller counts those); ``None`` if unparseable."""
    return parse_triples_with_repair(text)[0]


def parse_triples_with_repair(text: str) -> tuple[list[Any] | None, str]:
    """:func:`parse_triples` and the repair its reply needed (:func:`loads_with_repair`); a reply that is
    JSON but holds no triple list counts as ``failed``."""
    obj, repair = loads_with_repair(text)
    val = _find_key(obj, TRIPLE_KEYS)
    if not isinstance(val, list):
        return None, "failed"
    if len(val) == 3 and all(isinstance(x, str) for x in val):  # a single bare triple
        val = [val]
    return [_triple_from(t) for t in val], repair
