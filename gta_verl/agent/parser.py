"""Parse one turn of newly generated text into a GTA-RAG action (Algorithm 1).

Pure functions, no tokenizer and no verl. The agent loop decodes only the
tokens generated in the current turn and calls :func:`parse_action`; the
prompt (whose instructions contain an example ``<answer> Beijing </answer>``)
is never parsed, which avoids the Search-R1 #79 bug.

Rule (the semantics of the stop strings ``</search>`` / ``</answer>``):
the FIRST closing tag in the text ends the turn. A correct backend stops
right there; vLLM sometimes continues past it (verl #935), so anything after
that closing tag is ignored and reported as ``trailing``.

* first closer is ``</search>`` with a ``<search>`` before it → search; the
  query is the text between the LAST such opener and the closer (nested or
  repeated openers keep the innermost query);
* first closer is ``</answer>`` with an ``<answer>`` before it → answer;
* an empty query, a closer with no opener, or no closer at all (EOS or the
  token budget ran out) → invalid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from gta_verl.agent.prompt import ANSWER_CLOSE, ANSWER_OPEN, SEARCH_CLOSE, SEARCH_OPEN

ActionKind = Literal["search", "answer", "invalid"]


@dataclass(frozen=True)
class ParsedAction:
    """One parsed action with character offsets into the parsed text.

    Attributes:
        kind: ``search``, ``answer`` or ``invalid``.
        content: The stripped query / answer text ("" for invalid).
        action_start: Offset of the action's opening tag (``end`` for invalid:
            the whole turn is reasoning).
        end: Offset just past the closing tag; text after it is not part of the turn.
        reason: Why an action is invalid ("" otherwise).
    """

    kind: ActionKind
    content: str
    action_start: int
    end: int
    reason: str = ""


def has_trailing(text: str, action: ParsedAction) -> bool:
    """True when non-whitespace text follows the action's closing tag (verl #935)."""
    return bool(text[action.end :].strip())


def parse_action(text: str) -> ParsedAction:
    """Parse newly generated text into one action (see module docstring).

    Args:
        text: Decoded tokens generated in this turn only.

    Returns:
        The :class:`ParsedAction`.

    >>> parse_action("I need X. <search> X </search>").content
    'X'
    >>> parse_action("<answer> Paris </answer> <answer> Rome </answer>").content
    'Paris'
    >>> parse_action("no tags at all").kind
    'invalid'
    """
    s_close = text.find(SEARCH_CLOSE)
    a_close = text.find(ANSWER_CLOSE)
    candidates = [(pos, kind) for pos, kind in ((s_close, "search"), (a_close, "answer")) if pos >= 0]
    if not candidates:
        return ParsedAction("invalid", "", len(text), len(text), "no closing </search> or </answer>")
    close_pos, kind = min(candidates)
    opener, closer = (SEARCH_OPEN, SEARCH_CLOSE) if kind == "search" else (ANSWER_OPEN, ANSWER_CLOSE)
    end = close_pos + len(closer)
    open_pos = text.rfind(opener, 0, close_pos)
    if open_pos < 0:
        return ParsedAction("invalid", "", end, end, f"{closer} without {opener}")
    content = text[open_pos + len(opener) : close_pos].strip()
    if kind == "search" and not content:
        return ParsedAction("invalid", "", end, end, "empty search query")
    return ParsedAction(kind, content, open_pos, end)  # type: ignore[arg-type]


def token_index_for_char(
    token_ids: Sequence[int],
    char_pos: int,
    decode: Callable[[Sequence[int]], str],
    straddler: Literal["before", "after"] = "before",
) -> int:
    """Map a character offset of ``decode(token_ids)`` to a token boundary.

    Byte-level BPE merges across the boundaries we care about (``" <"`` is one
    Qwen token), so a token may straddle ``char_pos``. ``straddler`` says on which
    side it goes:

    * ``"before"``: smallest ``k`` with ``len(decode(ids[:k])) >= char_pos`` (used to
      cut after a closing tag: the tag is kept whole);
    * ``"after"``: largest ``k`` with ``len(decode(ids[:k])) <= char_pos`` (used to
      start an action span: the whole ``<search>`` tag lands in the action span).

    Binary search over decoded prefixes: O(log n) decodes, any tokenizer.

    Args:
        token_ids: Tokens generated in this turn.
        char_pos: Character offset into their decoded text.
        decode: ``ids -> str`` (the tokenizer's decode, special tokens kept).
        straddler: Side a straddling token goes to.
    """
    n = len(token_ids)
    if straddler == "before":
        if char_pos <= 0:
            return 0
        return min(n, _first_prefix(token_ids, lambda length: length >= char_pos, decode))
    if straddler != "after":
        raise ValueError(f"straddler must be 'before' or 'after', got {straddler!r}")
    return max(0, _first_prefix(token_ids, lambda length: length > char_pos, decode) - 1) if n else 0


def _first_prefix(
    token_ids: Sequence[int], ok: Callable[[int], bool], decode: Callable[[Sequence[int]], str]
) -> int:
    """Smallest k in [0, n] with ``ok(len(decode(ids[:k])))``; n + 1 if none (monotone ``ok``)."""
    lo, hi = 0, len(token_ids) + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if mid <= len(token_ids) and ok(len(decode(token_ids[:mid]))):
            hi = mid
        else:
            lo = mid + 1
    return lo
