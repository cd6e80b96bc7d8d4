"""MuSiQue-style QA records for the ``eval-retrieval`` CLI tests over the toy KB."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def qa_record(qid: str, question: str, answer: str, title: str, text: str) -> dict[str, Any]:
    """One question whose one supporting paragraph is (``title``, ``text``)."""
    return {
        "id": qid,
        "question": question,
        "answer": answer,
        "paragraphs": [{"title": title, "paragraph_text": text, "is_supporting": True}],
    }


def write_qa(path: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``records`` as the JSON list ``--qa`` reads; return ``path``."""
    path.write_text(json.dumps(list(records)))
    return path
