"""Entity and relation normalization for KB nodes.

Entities become graph nodes by their normalized name, so two surface forms that
differ only in case or punctuation ("The Beatles", "the beatles.") share one node.
Unicode letters are kept (``\\w``), unlike HippoRAG's ASCII-only rule, so that
"Paranã River" does not collapse to "paran river".
"""

from __future__ import annotations

import re

_NON_ALNUM = re.compile(r"[\W_]+", flags=re.UNICODE)
_SPACES = re.compile(r"\s+")


def normalize_entity(name: str) -> str:
    """Lowercase, turn every run of non-alphanumerics into one space, trim.

    >>> normalize_entity("  Jan-Philip  Solovej (editor)! ")
    'jan philip solovej editor'
    """
    return _NON_ALNUM.sub(" ", str(name).lower()).strip()


def normalize_relation(relation: str) -> str:
    """Lowercase and collapse whitespace; punctuation is kept (relations are phrases).

    >>> normalize_relation("  Published\\n BY ")
    'published by'
    """
    return _SPACES.sub(" ", str(relation).lower()).strip()


def alnum_count(phrase: str) -> int:
    """Number of alphanumeric characters (synonymy skips phrases with ≤ 2 of them)."""
    return sum(ch.isalnum() for ch in phrase)
