"""The action protocol: tags, rollout prompt, action parser and final-answer extraction.

This module is the bottom of gta-verl's import graph (standard library only), so the agent
loop, every reward manager, synthesis and evaluation read actions and answers through the
same code and a prompt or tag change cannot split them:

* tags ``<search>``/``<answer>``/``<info>``, the stop strings and the invalid-action message
  (GTA-RAG Algorithm 1, the rollout; docs/agent.md);
* the one rollout prompt (:func:`build_user_prompt`, :func:`build_messages`) and the
  observation rendering (:func:`format_observation`);
* :func:`parse_action` — one generated turn → one action (what the loop calls per turn);
* :func:`parse_turns` / :func:`final_answer` — a whole decoded response → its turns and the
  answer the loop recorded, by replaying :func:`parse_action` turn by turn.

Rule (the semantics of the stop strings ``</search>`` / ``</answer>``): the FIRST closing
tag in a turn ends it. A correct backend stops right there; vLLM sometimes continues past
it (verl #935), so anything after that closing tag is ignored and reported as ``trailing``.

* first closer is ``</search>`` with a ``<search>`` before it → search; the query is the
  text between the LAST such opener and the closer (nested or repeated openers keep the
  innermost query);
* first closer is ``</answer>`` with an ``<answer>`` before it → answer;
* an empty query, a closer with no opener, or no closer at all (EOS or the token budget ran
  out) → invalid.

A stray opener in reasoning ("I think <answer> might be Paris, let me check <search> x
</search>") therefore never decides the action: the first *closer* does, and the content
starts at the last opener before it.

Several queries per search (opt-in, ``gta.agent.max_queries_per_turn`` = K > 1): one
``<search> q1 ## q2 </search>`` action carries up to K queries separated by
:data:`QUERY_SEPARATOR` (empty parts dropped, exact repeats kept once); more than K is an
invalid action. The first closer still ends the turn, so the stop strings are unchanged.
With K = 1 (the default) the content is the one query, whatever it contains.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "INFO_CLOSE",
    "INFO_OPEN",
    "INVALID_ACTION_MESSAGE",
    "PROMPT_STYLES",
    "PROMPT_VERSION",
    "QUERY_SEPARATOR",
    "SEARCH_CLOSE",
    "SEARCH_FAILED_PREFIX",
    "SEARCH_OPEN",
    "STOP_STRINGS",
    "SYSTEM_INSTRUCTIONS",
    "ParsedAction",
    "ResponseTurn",
    "TOOL_SYSTEM_INSTRUCTIONS",
    "build_fewshot_prompt",
    "build_messages",
    "build_tool_messages",
    "build_user_prompt",
    "final_answer",
    "format_observation",
    "has_trailing",
    "parse_action",
    "parse_turns",
    "split_queries",
]

PROMPT_VERSION = "gta-search-v1"

SEARCH_OPEN, SEARCH_CLOSE = "<search>", "</search>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
INFO_OPEN, INFO_CLOSE = "<info>", "</info>"
STOP_STRINGS = (SEARCH_CLOSE, ANSWER_CLOSE)
INVALID_ACTION_MESSAGE = "\nMy action is invalid. Let me rethink.\n"
SEARCH_FAILED_PREFIX = "Search failed:"
#: Separates the queries of one search action when several are allowed per turn.
QUERY_SEPARATOR = "##"

SYSTEM_INSTRUCTIONS = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> "
    "first every time you get new information. After reasoning, if you find you lack some "
    "knowledge, you can call a search engine by <search> query </search>, and it will return "
    "the top searched results between <info> and </info>. You can search as many times as you "
    "want. If you find no further external knowledge needed, you can directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>."
)

#: The same task for verl's ``tool_agent`` loop: the search is a native tool call (the chat
#: template lists the ``search`` tool's schema); the answer keeps the ``<answer>`` tags, which
#: the reward managers read from the response text.
TOOL_SYSTEM_INSTRUCTIONS = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> "
    "first every time you get new information. After reasoning, if you find you lack some "
    "knowledge, you can call the search tool with a query, and it will return the top "
    "searched results. You can search as many times as you want. If you find no further "
    "external knowledge needed, you can directly provide the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>."
)

ActionKind = Literal["search", "answer", "invalid"]


class Passage(Protocol):
    """What :func:`format_observation` needs of a hit (``gta_verl.data.types.RetrievalHit``)."""

    @property
    def title(self) -> str: ...

    @property
    def text(self) -> str: ...


def _multi_query_instructions(max_queries: int) -> str:
    return (
        f" To look up independent facts at once, put up to {max_queries} queries in one search, "
        f"separated by {QUERY_SEPARATOR}: <search> query 1 {QUERY_SEPARATOR} query 2 </search>; "
        "their results come back together."
    )


# --------------------------------------------------------------------------- prompt
def build_user_prompt(question: str, max_queries_per_turn: int = 1) -> str:
    """Return the user message: instructions followed by the question.

    Args:
        question: The question.
        max_queries_per_turn: K of ``gta.agent.max_queries_per_turn``; above 1 the
            instructions also say how to put several queries in one search.
    """
    q = question.strip()
    if q and not q.endswith("?"):
        q += "?"
    extra = _multi_query_instructions(max_queries_per_turn) if max_queries_per_turn > 1 else ""
    return f"{SYSTEM_INSTRUCTIONS}{extra} Question: {q}\n"


def build_messages(
    question: str, max_queries_per_turn: int = 1, style: str = "instructions"
) -> list[dict[str, str]]:
    """The chat messages stored in the parquet ``prompt`` column (``style``: a :data:`PROMPT_STYLES` key)."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; known: {sorted(PROMPT_STYLES)}")
    if style == "fewshot":
        return [{"role": "user", "content": build_fewshot_prompt(question)}]
    return [{"role": "user", "content": build_user_prompt(question, max_queries_per_turn)}]


class _Hit:
    def __init__(self, title: str, text: str) -> None:
        self.title, self.text = title, text


#: Two worked examples of the protocol for a pretrained base model (no instruction tuning): each search is
#: followed by its observation exactly as the agent loop renders one (:func:`format_observation`), and the
#: answer closes the turn. The facts are public. The answers (Leah Adler, Votkinsk) and the film, ballet and
#: composer they go through (Jaws, Swan Lake, Tchaikovsky) are in no passage of the bundled MuSiQue corpus,
#: but Steven Spielberg is named in four of its passages (Steven Spielberg, The Terminal, Saving Private
#: Ryan, Jurassic Park (film)): an example can prime that entity, and it leaks no answer.
_FEWSHOT_EXAMPLES: tuple[tuple[str, tuple[tuple[str, str, str], ...], str], ...] = (
    (
        "Who is the mother of the director of the film Jaws?",
        (
            (
                "director of the film Jaws",
                "Jaws (film)",
                "Jaws is a 1975 American thriller film directed by Steven Spielberg.",
            ),
            (
                "mother of Steven Spielberg",
                "Steven Spielberg",
                "Spielberg was born in Cincinnati, Ohio, to "
                "Leah Adler, a restaurateur and pianist, and Arnold Spielberg, an electrical engineer.",
            ),
        ),
        "Leah Adler",
    ),
    (
        "In which town was the composer of Swan Lake born?",
        (
            (
                "composer of Swan Lake",
                "Swan Lake",
                "Swan Lake is a ballet composed by Pyotr Ilyich Tchaikovsky in 1875-76.",
            ),
            (
                "birthplace of Pyotr Ilyich Tchaikovsky",
                "Pyotr Ilyich Tchaikovsky",
                "Tchaikovsky was born in Votkinsk, a small town in Vyatka Governorate of the Russian Empire.",
            ),
        ),
        "Votkinsk",
    ),
)

FEWSHOT_INSTRUCTIONS = (
    "Answer the question. To look something up, write <search> query </search>; the results come back "
    "between <info> and </info>. Search one fact at a time. When you know the answer, write it inside "
    "<answer> and </answer>, as a short name or phrase."
)


def build_fewshot_prompt(question: str) -> str:
    """Instructions, the worked examples of :data:`_FEWSHOT_EXAMPLES`, then ``Question: {q}\n``.

    The last ``Question:`` line is the question (what :func:`gta_verl.eval.verl_dumps.question_from_prompt`
    reads back).
    """
    parts = [FEWSHOT_INSTRUCTIONS, "\n\n"]
    for q, steps, answer in _FEWSHOT_EXAMPLES:
        parts.append(f"Question: {q}\n")
        for query, title, text in steps:
            parts.append(f"{SEARCH_OPEN} {query} {SEARCH_CLOSE}{format_observation([_Hit(title, text)])}")
        parts.append(f"{ANSWER_OPEN} {answer} {ANSWER_CLOSE}\n\n")
    q = question.strip()
    if q and not q.endswith("?"):
        q += "?"
    parts.append(f"Question: {q}\n")
    return "".join(parts)


#: How a row's prompt is written: ``instructions`` (Search-R1's instructions; instruction-tuned models) or
#: ``fewshot`` (short instructions + two worked examples; pretrained base models such as Gemma-3-270M).
PROMPT_STYLES = ("instructions", "fewshot")


def build_tool_messages(question: str) -> list[dict[str, str]]:
    """The ``prompt`` column of a ``tool_agent`` row: the search is a tool, not a tag."""
    q = question.strip()
    if q and not q.endswith("?"):
        q += "?"
    return [{"role": "user", "content": f"{TOOL_SYSTEM_INSTRUCTIONS} Question: {q}\n"}]


def format_observation(hits: Sequence[Passage], error: str | None = None) -> str:
    """Render R(q_t) as the ``<info> … </info>`` block appended after a search.

    A retrieval failure is rendered as an observation too, so the policy sees it and the
    rollout continues. The agent loop fits the block to ``gta.agent.max_obs_tokens`` by
    shortening every passage (:mod:`gta_verl.agent.observation`), so each passage rendered
    here is one the policy sees.
    """
    if error is not None:
        body = f"{SEARCH_FAILED_PREFIX} {error}. Try again or answer with what you know."
    elif not hits:
        body = "No results."
    else:
        body = "\n".join(f"Doc {i + 1}(Title: {h.title}) {h.text}" for i, h in enumerate(hits))
    return f"\n\n{INFO_OPEN}{body}{INFO_CLOSE}\n\n"


# --------------------------------------------------------------------------- one turn
@dataclass(frozen=True)
class ParsedAction:
    """One parsed action with character offsets into the parsed text.

    Attributes:
        kind: ``search``, ``answer`` or ``invalid``.
        content: The stripped query / answer text ("" for invalid).
        action_start: Offset of the action's opening tag (``end`` for invalid: the whole
            turn is reasoning).
        end: Offset just past the closing tag; text after it is not part of the turn.
        reason: Why an action is invalid ("" otherwise).
        queries: A search's queries (``(content,)`` with one query per turn); () otherwise.
    """

    kind: ActionKind
    content: str
    action_start: int
    end: int
    reason: str = ""
    queries: tuple[str, ...] = ()


def checked_max_queries(value: Any) -> int:
    """K = ``gta.agent.max_queries_per_turn`` as an int ≥ 1 (one check for the loop and the rewards).

    >>> checked_max_queries(None), checked_max_queries(3)
    (1, 3)
    """
    if value is None:
        return 1
    # 2.5 must not become 2, nor inf an OverflowError: only whole numbers (2.0 included) pass.
    whole = isinstance(value, numbers.Integral) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer()
    )
    if isinstance(value, bool) or not whole or int(value) < 1:
        raise ValueError(f"gta.agent.max_queries_per_turn must be an integer >= 1, got {value!r}")
    return int(value)


def split_queries(content: str, max_queries: int = 1) -> tuple[str, ...]:
    """The queries of a search action's stripped content.

    Args:
        content: The text between ``<search>`` and ``</search>``, stripped.
        max_queries: K; with 1 the whole content is the one query.

    Returns:
        The non-empty queries in order, exact repeats once (may exceed K: the caller
        decides that such an action is invalid).

    >>> split_queries("a ## b ##  ## a", 3)
    ('a', 'b')
    >>> split_queries("C# ## F#", 1)
    ('C# ## F#',)
    """
    if max_queries <= 1:
        return (content,) if content else ()
    parts = (part.strip() for part in content.split(QUERY_SEPARATOR))
    return tuple(dict.fromkeys(part for part in parts if part))


def has_trailing(text: str, action: ParsedAction) -> bool:
    """True when non-whitespace text follows the action's closing tag (verl #935)."""
    return bool(text[action.end :].strip())


def parse_action(text: str, max_queries: int = 1) -> ParsedAction:
    """Parse the text generated in one turn into one action (see module docstring).

    Args:
        text: Decoded tokens generated in this turn only.
        max_queries: K, the most queries one search may carry (``gta.agent.max_queries_per_turn``).

    Returns:
        The :class:`ParsedAction`.

    >>> parse_action("I need X. <search> X </search>").content
    'X'
    >>> parse_action("<answer> Paris </answer> <answer> Rome </answer>").content
    'Paris'
    >>> parse_action("I think <answer> maybe Paris, check <search> capital </search>").kind
    'search'
    >>> parse_action("no tags at all").kind
    'invalid'
    >>> parse_action("<search> X ## Y </search>", max_queries=2).queries
    ('X', 'Y')
    >>> parse_action("<search> X ## Y ## Z </search>", max_queries=2).reason
    '3 queries in one search; at most 2'
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
    if kind == "answer":
        return ParsedAction("answer", content, open_pos, end)
    queries = split_queries(content, max_queries)
    if not queries:
        return ParsedAction("invalid", "", end, end, "empty search query")
    if len(queries) > max_queries:
        reason = f"{len(queries)} queries in one search; at most {max_queries}"
        return ParsedAction("invalid", "", end, end, reason)
    return ParsedAction("search", content, open_pos, end, queries=queries)


# --------------------------------------------------------------------------- whole response
@dataclass(frozen=True)
class ResponseTurn:
    """One policy turn of a decoded response and the environment text that followed it.

    Attributes:
        start: Offset of the turn's first generated character in the response.
        action: The turn's action; its offsets are relative to ``start``.
        observation: The ``<info>`` body after a search (None when absent: truncated
            response, or the turn was not a search).
    """

    start: int
    action: ParsedAction
    observation: str | None = None


def _turn_end(text: str, pos: int) -> int:
    """End of the policy turn starting at ``pos``: its first closer, or the invalid message."""
    ends = [len(text)]
    for closer in STOP_STRINGS:
        k = text.find(closer, pos)
        if k >= 0:
            ends.append(k + len(closer))
    k = text.find(INVALID_ACTION_MESSAGE, pos)
    if k >= 0:
        ends.append(k)
    return min(ends)


def _skip_observation(text: str, pos: int) -> tuple[str | None, int]:
    """(``<info>`` body, offset after it) if an observation starts at ``pos`` (after whitespace)."""
    k = pos
    while k < len(text) and text[k].isspace():
        k += 1
    if not text.startswith(INFO_OPEN, k):
        return None, pos
    body_start = k + len(INFO_OPEN)
    close = text.find(INFO_CLOSE, body_start)
    if close < 0:  # cut by the response length: the rest is observation
        return text[body_start:], len(text)
    return text[body_start:close], close + len(INFO_CLOSE)


def parse_turns(response_text: str | None, max_queries: int = 1) -> list[ResponseTurn]:
    """Replay the agent loop's turn parsing over a whole decoded response.

    The loop parses each generated turn alone with :func:`parse_action`, then appends the
    observation (after a search) or :data:`INVALID_ACTION_MESSAGE` (after an invalid turn),
    and stops at the first answer. A decoded response is those pieces concatenated, so a
    turn ends at its first closing tag or where the invalid-action message starts; an
    observation is skipped as a block, so text inside retrieved passages is never parsed as
    an action. Parsing stops after the first answer, like the loop.

    Pass the *response only* (never prompt + response: the prompt's instructions contain
    an example ``<answer> Beijing </answer>``, Search-R1 issue #79). ``max_queries`` is
    the loop's K (``gta.agent.max_queries_per_turn``).

    >>> text = "<search> a </search>\\n\\n<info>x</info>\\n\\n<answer> b </answer>"
    >>> [t.action.kind for t in parse_turns(text)]
    ['search', 'answer']
    """
    text = response_text or ""
    turns: list[ResponseTurn] = []
    pos = 0
    while pos < len(text) and text[pos:].strip():
        end = _turn_end(text, pos)
        action = parse_action(text[pos:end], max_queries)
        observation, nxt = (None, end)
        if action.kind == "search":
            observation, nxt = _skip_observation(text, end)
        elif action.kind == "invalid" and text.startswith(INVALID_ACTION_MESSAGE, end):
            nxt = end + len(INVALID_ACTION_MESSAGE)
        turns.append(ResponseTurn(pos, action, observation))
        if action.kind == "answer" or nxt <= pos:
            break
        pos = nxt
    return turns


def final_answer(response_text: str | None) -> str | None:
    """ŷ: the content of the first answer action, as the agent loop records it; None if none.

    The loop stops at the first ``<answer> … </answer>`` action, so that is the final
    answer; a stray ``<answer>`` opener in an earlier turn's reasoning is not an action
    (the turn's first closer decides), and an unclosed ``<answer>`` (truncated) is not one.

    Examples:
        >>> final_answer("<search> q </search>\\n\\n<info>Doc 1 x</info>\\n\\n<answer> Paris </answer>")
        'Paris'
        >>> final_answer("I think <answer> Paris? check <search> q </search>"
        ...              "<info>Doc 1 <answer>leak</answer></info> <answer> Lyon </answer>")
        'Lyon'
        >>> final_answer("<answer> Par") is None
        True
    """
    for turn in parse_turns(response_text):
        if turn.action.kind == "answer":
            return turn.action.content
    return None
