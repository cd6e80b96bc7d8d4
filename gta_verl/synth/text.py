"""Small text helpers shared by the generators and the validator."""

from __future__ import annotations

import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WS = re.compile(r"\s+")
_PUNCT = str.maketrans({ch: " " for ch in string.punctuation})
_WORD = re.compile(r"\w+", flags=re.UNICODE)


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, punctuation → space, drop articles, collapse spaces.

    >>> normalize_answer("The  Beatles!")
    'beatles'
    """
    text = str(text).lower().translate(_PUNCT)
    return _WS.sub(" ", _ARTICLES.sub(" ", text)).strip()


def contains_phrase(haystack: str, needle: str) -> bool:
    """Whether normalized ``needle`` occurs in normalized ``haystack`` on word boundaries."""
    n, h = normalize_answer(needle), normalize_answer(haystack)
    return bool(n) and f" {n} " in f" {h} "


def surface_form(entity: str, text: str) -> str:
    """Return how a normalized entity name is written in ``text`` (first match), else ``entity``.

    KB entity names are lowercased with punctuation collapsed
    (:func:`gta_verl.kb.normalize.normalize_entity`); questions read better with
    the original casing, e.g. ``"jan philip solovej"`` → ``"Jan Philip Solovej"``.
    """
    words = entity.split()
    if not words:
        return entity
    pattern = r"(?<!\w)" + r"[\W_]+".join(re.escape(w) for w in words) + r"(?!\w)"
    m = re.search(pattern, text, flags=re.IGNORECASE | re.UNICODE)
    return m.group(0) if m else entity


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """Set of lowercase word ``n``-grams of ``text``."""
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def longest_shared_ngram(a: str, b: str, max_n: int = 64) -> int:
    """Length in words of the longest word n-gram shared by ``a`` and ``b`` (≤ ``max_n``)."""
    wa = [w.lower() for w in _WORD.findall(a)]
    wb = [w.lower() for w in _WORD.findall(b)]
    best = 0
    # classic O(len(a)·len(b)) longest-common-substring DP over words; texts are short
    prev = [0] * (len(wb) + 1)
    for x in wa:
        cur = [0] * (len(wb) + 1)
        for j, y in enumerate(wb, start=1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return min(best, max_n)
