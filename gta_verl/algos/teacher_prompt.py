"""PathRouter's teacher prompt: the student's chat messages with the gold evidence S_gt before the question.

Pure (no verl, Ray or torch): the training teacher (:mod:`gta_verl.algos.teacher`) scores the student's
response after this prompt, and the evaluation (``gta-verl eval --gold-evidence``) lets the teacher
answer from it, which measures whether the teacher can use the evidence it is shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

EVIDENCE_HEADER = "Gold supporting evidence for this question:\n"
#: Every protocol prompt's question line starts with this (:func:`gta_verl.protocol.build_user_prompt`).
QUESTION_MARKER = "Question:"


def _format_passage(i: int, text: str, max_chars: int | None) -> str:
    title, _, body = str(text).partition("\n")
    if not body:
        title, body = "", title
    if max_chars is not None and len(body) > max_chars:
        body = body[:max_chars].rstrip() + " ..."
    return f"Doc {i + 1}(Title: {title}) {body}" if title else f"Doc {i + 1} {body}"


def _question_start(content: str) -> int:
    """Where the question line of a protocol prompt begins (its last ``Question:``), -1 if there is none."""
    return content.rfind(QUESTION_MARKER)


def build_teacher_prompt(
    messages: Sequence[Mapping[str, Any]],
    support_texts: Sequence[str],
    max_chars_per_passage: int | None = None,
) -> list[dict[str, str]]:
    """The student's chat messages with the gold evidence S_gt placed before the question.

    PathRouter §3.3's teacher is π_ref(· | q, G, S_gt, r_<t): the response r is scored after a context
    that holds S_gt, and r's first token must follow the same boundary in both contexts, or the teacher
    scores a different continuation. Every protocol prompt (:mod:`gta_verl.protocol`) ends its last user
    message with ``Question: {q}\n``, and the chat template renders the response boundary after that message
    (Qwen2.5's ChatML adds ``<|im_end|>\n<|im_start|>assistant\n``; Gemma-3-270M's base template adds
    nothing, so the model continues the question line). The evidence is therefore inserted **before the
    question line**, with the whitespace that preceded ``Question:`` kept in front of it, so the teacher's
    context ends with the student's ``Question: {q}\n`` and boundary token for token (tested for both
    templates). A last user message without a ``Question:`` line gets the evidence before all of its text.

    Passages (``"title\ntext"``) are rendered like the agent's ``<info>`` observations (``Doc i(Title: t)
    text``).

    Args:
        messages: the row's ``raw_prompt`` (``[{role, content}, ...]``).
        support_texts: gold evidence passages S_gt (ground truth ``support_texts``).
        max_chars_per_passage: optional cap per passage body (keeps the teacher prompt
            within ``distillation...inference.max_model_len``).

    Returns:
        A new list of ``{"role", "content"}`` dicts; the input is not modified.

    Raises:
        ValueError: no user message to attach the evidence to.
    """
    out = [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]
    user_idx = [i for i, m in enumerate(out) if m["role"] == "user"]
    if not user_idx:
        raise ValueError(
            "build_teacher_prompt: the prompt has no user message to attach the gold evidence to"
        )
    texts = [t for t in support_texts if str(t).strip()]
    if not texts:
        return out
    evidence = EVIDENCE_HEADER + "\n".join(
        _format_passage(i, t, max_chars_per_passage) for i, t in enumerate(texts)
    )
    content = out[user_idx[-1]]["content"]
    at = _question_start(content)
    if at < 0:
        out[user_idx[-1]]["content"] = evidence + "\n\n" + content
        return out
    head = content[:at]
    before = head.rstrip()
    sep = head[len(before) :]  # " " after the instructions, "\n\n" after the few-shot examples
    # A blank line before the block; after it the student's own separator introduces the question (a newline
    # first when that separator has none), so "Question: {q}\n" and the template's boundary after it are
    # tokenized as in the student's context.
    lead = "\n\n" if before else ""
    end = "" if sep.startswith("\n") else "\n"
    out[user_idx[-1]]["content"] = before + lead + evidence + end + sep + content[at:]
    return out
