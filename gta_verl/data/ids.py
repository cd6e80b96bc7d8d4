"""Stable document ids."""

from __future__ import annotations

import hashlib

DOC_ID_PREFIX = "d"


def make_doc_id(title: str, text: str) -> str:
    """Return the stable id of a passage: a content hash of (title, text).

    MuSiQue repeats titles (126 in the bundled subset), so the id must cover the
    text as well. Whitespace is kept as is: two passages that differ only in
    whitespace are different passages to the corpus owner.

    Args:
        title: Passage title.
        text: Passage body.

    Returns:
        ``"d"`` + the first 16 hex digits of sha1(title + "\\x1f" + text).

    >>> make_doc_id("Paris", "Paris is the capital of France.")
    'dac7f43590fed07c1'
    """
    digest = hashlib.sha1(f"{title}\x1f{text}".encode()).hexdigest()
    return DOC_ID_PREFIX + digest[:16]
