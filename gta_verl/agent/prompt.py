"""The one rollout prompt template, shared by synthesis output, the agent loop and evaluation.

Keeping it in a single module means a prompt change cannot split training data
from rollouts or from evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence

from gta_verl.data.types import RetrievalHit

PROMPT_VERSION = "gta-search-v1"

SEARCH_OPEN, SEARCH_CLOSE = "<search>", "</search>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
INFO_OPEN, INFO_CLOSE = "<info>", "</info>"
STOP_STRINGS = (SEARCH_CLOSE, ANSWER_CLOSE)
INVALID_ACTION_MESSAGE = "\nMy action is invalid. Let me rethink.\n"

SYSTEM_INSTRUCTIONS = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> "
    "first every time you get new information. After reasoning, if you find you lack some "
    "knowledge, you can call a search engine by <search> query </search>, and it will return "
    "the top searched results between <info> and </info>. You can search as many times as you "
    "want. If you find no further external knowledge needed, you can directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>."
)


def build_user_prompt(question: str) -> str:
    """Return the user message: instructions followed by the question."""
    q = question.strip()
    if q and not q.endswith("?"):
        q += "?"
    return f"{SYSTEM_INSTRUCTIONS} Question: {q}\n"


def build_messages(question: str) -> list[dict[str, str]]:
    """Return the chat messages stored in the parquet ``prompt`` column."""
    return [{"role": "user", "content": build_user_prompt(question)}]


def format_observation(hits: Sequence[RetrievalHit], error: str | None = None) -> str:
    """Render R(q_t) as the ``<info> … </info>`` block appended after a search.

    A retrieval failure is rendered as an observation too, so the policy sees it
    and the rollout continues.
    """
    if error is not None:
        body = f"Search failed: {error}. Try again or answer with what you know."
    elif not hits:
        body = "No results."
    else:
        body = "\n".join(
            f"Doc {i + 1}(Title: {h.title}) {h.text}" for i, h in enumerate(hits)
        )
    return f"\n\n{INFO_OPEN}{body}{INFO_CLOSE}\n\n"
