"""Synthesis prompt for LLM generators and the tolerant parser of their replies.

The prompt is ours, written from GTA-RAG §3.4's description (the paper's
Table 6 template is an image): the generator sees the path documents
``P1 … PH`` in order plus shuffled distractors ``X1 … Xk`` and must return one
strict JSON object — question x, answer y*, and a turn-by-turn trajectory
(reasoning, search query, target document) whose turn ``t`` may use only the
question and the documents revealed before ``t``. One worked example (a fixed 2-hop path and its
exact JSON reply, :data:`WORKED_EXAMPLE_OUTPUT`) goes before the real request as an earlier
user/assistant turn: a base model behind a transcript template continues that pattern, an
instruction-tuned one reads it as ordinary few-shot chat.

The parser accepts what real models send: prose or code fences around the
JSON, trailing commas, key variants (``query``/``search_query``, ``steps``/
``trajectory`` …) and replies cut off by ``max_tokens`` (it keeps the complete
prefix; the example survives only if every required field is complete).
Failures return a reason code, counted by the pipeline's funnel.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gta_verl.data.types import Trajectory, TrajectoryTurn
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.synth.generators.base import GenerationOutcome
from gta_verl.synth.paths import GraphPath, PathIndex, build_path_index
from gta_verl.synth.text import normalize_answer

SYSTEM_PROMPT = """You write multi-hop questions for training a search agent.
You receive a chain of documents P1, P2, ... (in this order) that are connected through shared \
entities, and some distractor documents X1, X2, ... that must NOT be needed.

Write:
1. "question": one natural question whose answer requires ALL chain documents, in order: \
P1 gives a fact that is needed to know what to look up in P2, and so on. The question must \
not mention the intermediate (bridge) entities, must not contain the answer, and must not \
copy sentences from the documents.
2. "answer": a short answer (an entity, date or number of at most a few words) written \
exactly as it appears in the last chain document.
3. "trajectory": one turn per chain document, in order. Turn t has
   - "reasoning": what is known so far and what is still missing. It may use ONLY the \
question and the documents found in turns before t (turn 1 uses only the question).
   - "search_query": a short search-engine query that finds document Pt. It may mention \
only entities from the question or from documents found in earlier turns.
   - "target_document": "Pt".
4. "final_reasoning": how the documents found give the answer.

Reply with ONE JSON object and nothing else:
{"question": "...", "answer": "...", "trajectory": [{"reasoning": "...", \
"search_query": "...", "target_document": "P1"}, ...], "final_reasoning": "..."}"""


@dataclass(frozen=True)
class LLMPromptConfig:
    """Prompt knobs shared by the OpenAI and vLLM generators.

    Attributes:
        n_distractors: Distractor documents shown with the chain (hard negatives
            sharing an entity with the chain when available, else random).
        max_doc_chars: Each document is cut to this many characters.
        seed: Seed of distractor selection (mixed with the path's documents).
        worked_example: Put the worked example (:func:`worked_example_messages`) before the
            request as an earlier user/assistant turn, the pattern a base model continues
            (without it Gemma-3-270M restates the instructions; with it, it copies the example:
            ``docs/synth.md``); ``False`` sends the system text and the request alone.
    """

    n_distractors: int = 3
    max_doc_chars: int = 1500
    seed: int = 0
    worked_example: bool = True

    def __post_init__(self) -> None:
        if self.n_distractors < 0 or self.max_doc_chars < 100:
            raise ValueError("LLMPromptConfig: n_distractors must be >= 0 and max_doc_chars >= 100")


def select_distractors(index: PathIndex, path: GraphPath, k: int, rng: np.random.Generator) -> list[int]:
    """Pick ``k`` document indices off the path, preferring documents that share an entity with it."""
    on_path = set(path.doc_indices)
    near: set[int] = set()
    for d in path.doc_indices:
        for e in index.doc_entities[d]:
            if index.bridge_ok[e]:
                near.update(int(x) for x in index.entity_docs[e])
    pool = sorted(near - on_path)
    picked = [pool[i] for i in rng.permutation(len(pool))[:k]] if pool else []
    n_docs = index.kb.n_docs
    while len(picked) < k and len(picked) + len(on_path) < n_docs:
        d = int(rng.integers(n_docs))
        if d not in on_path and d not in picked:
            picked.append(d)
    return picked


def _request_text(
    chain: Sequence[tuple[str, str]],
    links: Sequence[Sequence[str]],
    distractors: Sequence[tuple[str, str]],
    max_doc_chars: int,
) -> str:
    """The user turn: chain documents, their connections, distractors, the closing instruction."""

    def doc(label: str, title: str, text: str) -> str:
        return f"[{label}] {title}\n{text[:max_doc_chars]}"

    hops = len(chain)
    chain_text = "\n\n".join(doc(f"P{t + 1}", *d) for t, d in enumerate(chain))
    link_text = "\n".join(f"- P{h + 1} -> P{h + 2} via: {' ~ '.join(ents)}" for h, ents in enumerate(links))
    other = "\n\n".join(doc(f"X{j + 1}", *d) for j, d in enumerate(distractors)) or "(none)"
    return (
        f"Chain documents ({hops}, in order):\n\n{chain_text}\n\n"
        f"Connections between consecutive chain documents:\n{link_text}\n\n"
        f"Distractor documents:\n\n{other}\n\n"
        f"Write the JSON object now. The trajectory must have exactly {hops} turns, "
        f"targeting P1 to P{hops} in order."
    )


# ---------------------------------------------------------------- the worked example

#: The worked example's chain documents ``(title, text)``, in order (short, real facts, MuSiQue style).
WORKED_EXAMPLE_CHAIN: tuple[tuple[str, str], ...] = (
    (
        "The Old Man and the Sea",
        "The Old Man and the Sea is a short novel written by the American author Ernest Hemingway in 1951 "
        "in Cuba, and published in 1952. It was the last major work of fiction by Hemingway that was "
        "published during his lifetime.",
    ),
    (
        "Ernest Hemingway",
        "Ernest Miller Hemingway (July 21, 1899 - July 2, 1961) was an American novelist and "
        "short-story writer. He was born and raised in Oak Park, Illinois, and won the Nobel Prize in "
        "Literature in 1954.",
    ),
)
#: Its bridge entities (normalized, as sampled paths name them).
WORKED_EXAMPLE_LINKS: tuple[tuple[str, ...], ...] = (("ernest hemingway",),)
#: Its distractor: shares the bridge entity, is not needed.
WORKED_EXAMPLE_DISTRACTORS: tuple[tuple[str, str], ...] = (
    (
        "The Sun Also Rises",
        "The Sun Also Rises is a 1926 novel by Ernest Hemingway about a group of American and British "
        "expatriates who travel from Paris to the Festival of San Fermin in Pamplona.",
    ),
)
#: The exact reply the parser expects for it, keys in :data:`SYSTEM_PROMPT`'s order.
WORKED_EXAMPLE_OUTPUT: dict[str, Any] = {
    "question": "In which town was the author of The Old Man and the Sea born?",
    "answer": "Oak Park",
    "trajectory": [
        {
            "reasoning": "I need the author of The Old Man and the Sea first.",
            "search_query": "The Old Man and the Sea author",
            "target_document": "P1",
        },
        {
            "reasoning": "P1 says Ernest Hemingway wrote it. Now I need his birthplace.",
            "search_query": "Ernest Hemingway birthplace",
            "target_document": "P2",
        },
    ],
    "final_reasoning": "Ernest Hemingway wrote The Old Man and the Sea (P1) and was born in Oak Park (P2).",
}


def worked_example_messages(config: LLMPromptConfig | None = None) -> list[dict[str, str]]:
    """The worked example as an earlier turn: the request for its path, then its reply (compact JSON)."""
    config = config or LLMPromptConfig()
    request = _request_text(
        WORKED_EXAMPLE_CHAIN, WORKED_EXAMPLE_LINKS, WORKED_EXAMPLE_DISTRACTORS, config.max_doc_chars
    )
    reply = json.dumps(WORKED_EXAMPLE_OUTPUT, ensure_ascii=False, separators=(",", ":"))
    return [{"role": "user", "content": request}, {"role": "assistant", "content": reply}]


def build_synthesis_messages(
    path: GraphPath, kb: KnowledgeBase, distractors: Sequence[int], config: LLMPromptConfig | None = None
) -> list[dict[str, str]]:
    """Chat messages asking for one trajectory over ``path`` (see :data:`SYSTEM_PROMPT`).

    ``[system, (example request, example reply,) request]``: the worked example comes first unless
    ``config.worked_example`` is off.
    """
    config = config or LLMPromptConfig()

    def doc(i: int) -> tuple[str, str]:
        p = kb.passages[i]
        return p.title, p.text

    user = _request_text(
        [doc(d) for d in path.doc_indices],
        [link.entities for link in path.links],
        [doc(d) for d in distractors],
        config.max_doc_chars,
    )
    example = worked_example_messages(config) if config.worked_example else []
    return [{"role": "system", "content": SYSTEM_PROMPT}, *example, {"role": "user", "content": user}]


# ---------------------------------------------------------------- parsing

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", flags=re.DOTALL)
_KEYS = {
    "question": ("question", "multi_hop_question", "multihop_question", "x", "q"),
    "answer": ("answer", "final_answer", "gold_answer", "y", "short_answer"),
    "trajectory": ("trajectory", "turns", "steps", "search_turns", "reasoning_trajectory"),
    "final_reasoning": ("final_reasoning", "conclusion", "final_thought"),
    "aliases": ("answer_aliases", "aliases"),
}
_TURN_KEYS = {
    "reasoning": ("reasoning", "thought", "think", "thinking", "rationale"),
    "query": ("search_query", "query", "search", "searchquery"),
    "target": ("target_document", "target_doc", "target", "document", "doc", "target_document_id"),
}


class ParseFailure(Exception):
    """Reply not usable; ``args[0]`` is the reason code (``parse:...``)."""


class _JsonCutter:
    """Character walker behind :func:`_scan_json` (container stack + last safe cut point)."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.stack: list[str] = []  # "{" or "["
        self.in_str = self.esc = self.str_is_key = False
        self.expect_key = False  # inside an object, the next string is a key
        self.safe: tuple[int, tuple[str, ...]] = (0, ())  # (len(out), stack) after the last complete value

    def _mark(self) -> None:
        self.safe = (len(self.out), tuple(self.stack))

    def _string_char(self, ch: str) -> None:
        self.out.append(ch)
        if self.esc:
            self.esc = False
        elif ch == "\\":
            self.esc = True
        elif ch == '"':
            self.in_str = False
            if not self.str_is_key:
                self._mark()

    def _close(self, ch: str) -> bool:
        out = self.out
        while out and out[-1].isspace():
            out.pop()
        if out and out[-1] == ",":
            out.pop()  # trailing comma
        if not self.stack:
            raise ParseFailure("parse:invalid_json")
        self.stack.pop()
        out.append(ch)
        self._mark()
        self.expect_key = False
        return not self.stack

    def feed(self, ch: str) -> bool:
        """Consume one character; ``True`` once the outermost object is closed."""
        if self.in_str:
            self._string_char(ch)
            return False
        if ch in "}]":
            return self._close(ch)
        if ch == '"':
            self.in_str = True
            self.str_is_key = bool(self.stack) and self.stack[-1] == "{" and self.expect_key
        elif ch in "{[":
            self.stack.append(ch)
            self.expect_key = ch == "{"
        elif ch == ",":
            self.expect_key = bool(self.stack) and self.stack[-1] == "{"
            if self.out and self.out[-1] not in "{[,":
                self._mark()  # a bare number / literal just ended
        elif ch == ":":
            self.expect_key = False
        self.out.append(ch)
        return False

    def repaired(self) -> str:
        n, open_stack = self.safe
        if n == 0:
            raise ParseFailure("parse:truncated")
        body = "".join(self.out[:n]).rstrip().rstrip(",")
        return body + "".join("}" if c == "{" else "]" for c in reversed(open_stack))


def _scan_json(text: str) -> tuple[str, bool]:
    """Cut the first JSON object out of ``text``; repair it if the text ends inside it.

    Walks the characters with a container stack and remembers the last point
    right after a complete value. A reply cut off by ``max_tokens`` is cut back
    to that point and its open containers are closed, so every value kept is one
    the model finished. Trailing commas are dropped on the way.

    Returns:
        ``(json text, truncated)``.
    """
    start = text.find("{")
    if start < 0:
        raise ParseFailure("parse:no_json")
    cutter = _JsonCutter()
    for ch in text[start:]:
        if cutter.feed(ch):
            return "".join(cutter.out), False
    return cutter.repaired(), True


def _get(d: Mapping[str, Any], names: Sequence[str]) -> Any:
    lowered = {str(k).strip().lower().replace(" ", "_").replace("-", "_"): v for k, v in d.items()}
    for name in names:
        if name in lowered and lowered[name] not in (None, ""):
            return lowered[name]
    return None


def _target_index(value: Any, path: GraphPath, kb: KnowledgeBase) -> int:
    """Map a target label (``"P2"``, ``2``, ``"[P2]"``, a title or doc id) to a path position."""
    s = str(value).strip().strip("[]()").strip()
    m = re.fullmatch(r"(?:document\s*|doc\s*)?([pPxX]?)\s*(\d+)", s, flags=re.IGNORECASE)
    if m:
        if m.group(1).lower() == "x":
            raise ParseFailure("parse:distractor_target")
        pos = int(m.group(2)) - 1
        if 0 <= pos < path.hops:
            return pos
        raise ParseFailure("parse:unknown_target")
    for pos, d in enumerate(path.doc_indices):
        p = kb.passages[d]
        if s in (p.doc_id, p.title) or s.lower() == p.title.lower():
            return pos
    raise ParseFailure("parse:unknown_target")


def _load(text: str) -> tuple[dict[str, Any], bool]:
    if not text or not text.strip():
        raise ParseFailure("parse:empty_reply")
    fenced = _FENCE.search(text)
    candidate = fenced.group(1) if fenced and "{" in fenced.group(1) else text
    body, truncated = _scan_json(candidate)
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ParseFailure("parse:truncated" if truncated else "parse:invalid_json") from exc
    if not isinstance(obj, dict):
        raise ParseFailure("parse:invalid_json")
    return obj, truncated


def parse_synthesis_reply(text: str, path: GraphPath, kb: KnowledgeBase, generator: str) -> Trajectory:
    """Parse one LLM reply into a :class:`Trajectory` over ``path``.

    Raises:
        ParseFailure: with a ``parse:*`` reason code (``empty_reply``, ``no_json``,
            ``invalid_json``, ``truncated``, ``missing_question``, ``missing_answer``,
            ``missing_trajectory``, ``missing_query``, ``distractor_target``,
            ``unknown_target``).
    """
    obj, truncated = _load(text)

    def need(key: str) -> Any:
        value = _get(obj, _KEYS[key])
        if value is None:
            raise ParseFailure("parse:truncated" if truncated else f"parse:missing_{key}")
        return value

    question, answer = str(need("question")).strip(), need("answer")
    if isinstance(answer, list):
        answer = answer[0] if answer else ""
    steps = need("trajectory")
    if not isinstance(steps, list) or not steps:
        raise ParseFailure("parse:missing_trajectory")
    turns = []
    for step in steps:
        if not isinstance(step, Mapping):
            raise ParseFailure("parse:missing_query")
        query, target = _get(step, _TURN_KEYS["query"]), _get(step, _TURN_KEYS["target"])
        if query is None or target is None:
            raise ParseFailure("parse:truncated" if truncated else "parse:missing_query")
        pos = _target_index(target, path, kb)
        reasoning = _get(step, _TURN_KEYS["reasoning"]) or ""
        turns.append(TrajectoryTurn(str(reasoning).strip(), str(query).strip(), path.doc_ids[pos]))
    if truncated and len(turns) < path.hops:
        raise ParseFailure("parse:truncated")
    aliases = _get(obj, _KEYS["aliases"]) or []
    return Trajectory(
        question=question,
        answer=str(answer).strip(),
        turns=tuple(turns),
        path_doc_ids=path.doc_ids,
        bridge_entities=path.bridge_entities,
        generator=generator,
        final_reasoning=str(_get(obj, _KEYS["final_reasoning"]) or "").strip(),
        answer_aliases=tuple(str(a) for a in aliases if str(a).strip()) if isinstance(aliases, list) else (),
    )


class LLMPromptBuilder:
    """Builds prompts for paths of one KB and turns replies into outcomes (shared by LLM backends)."""

    def __init__(self, config: LLMPromptConfig | None = None) -> None:
        self.config = config or LLMPromptConfig()
        self._index: PathIndex | None = None

    def _index_for(self, kb: KnowledgeBase) -> PathIndex:
        if self._index is None or self._index.kb is not kb:
            self._index = build_path_index(kb)
        return self._index

    def messages(self, paths: Sequence[GraphPath], kb: KnowledgeBase) -> list[list[dict[str, str]]]:
        """One conversation per path; distractors depend only on (seed, path)."""
        index = self._index_for(kb)
        out = []
        for path in paths:
            digest = hashlib.sha1("|".join(path.doc_ids).encode()).digest()
            rng = np.random.default_rng([self.config.seed, int.from_bytes(digest[:8], "little")])
            distractors = select_distractors(index, path, self.config.n_distractors, rng)
            out.append(build_synthesis_messages(path, kb, distractors, self.config))
        return out

    @staticmethod
    def outcomes(
        paths: Sequence[GraphPath], replies: Sequence[str | Exception], kb: KnowledgeBase, generator: str
    ) -> list[GenerationOutcome]:
        """Parse replies; an exception in ``replies`` is a failed generation call.

        A reply whose question is the worked example's (a base model repeats the example) fails as
        ``parse:copied_example``: it is well-formed, but about the example's documents, not the path's.
        """
        copied = normalize_answer(WORKED_EXAMPLE_OUTPUT["question"])
        out = []
        for path, reply in zip(paths, replies, strict=True):
            if isinstance(reply, Exception):
                out.append(GenerationOutcome.failure(path, "generate", "generate:llm_error", raw=str(reply)))
                continue
            try:
                traj = parse_synthesis_reply(reply, path, kb, generator)
                if normalize_answer(traj.question) == copied:
                    raise ParseFailure("parse:copied_example")
            except ParseFailure as exc:
                out.append(GenerationOutcome.failure(path, "parse", str(exc.args[0]), raw=reply))
                continue
            out.append(GenerationOutcome(path=path, trajectory=traj, raw=reply))
        return out
