"""Map character offsets of a generated turn to token boundaries (for the agent loop's spans).

The action protocol itself (tags, :func:`~gta_verl.protocol.parse_action`,
:func:`~gta_verl.protocol.final_answer`) lives in :mod:`gta_verl.protocol`, shared with the
rewards, synthesis and evaluation; this module only adds what needs token ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

__all__ = ["token_index_for_char"]


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
