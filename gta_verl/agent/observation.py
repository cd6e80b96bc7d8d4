"""Fit one ``<info> … </info>`` observation into a token cap by shortening every passage.

The rewards (Δ_t, the complete-chain bonus, PathRouter's P) and the evidence metrics must
count exactly what the policy saw. Cutting the rendered block at the cap would hide the
tail passages (on MuSiQue, 6 passages of the bundled KB are often > 512 Qwen tokens) while
the loop still recorded them. Instead every passage gets the same token budget k, the
largest with Σ_i min(|p_i|, k) ≤ cap − overhead (water-filling: short passages stay whole,
long ones are cut to their first k tokens), so all of them are shown. Only when even
``min_passage_tokens`` per passage does not fit are passages dropped from the tail; the
:class:`FittedObservation` lists the passages shown, with the text as shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gta_verl.data.types import RetrievalHit
from gta_verl.protocol import INFO_CLOSE, format_observation

__all__ = ["MIN_PASSAGE_TOKENS", "FittedObservation", "fit_observation"]

#: Below this many text tokens per passage the tail passages are dropped instead (a title
#: and a dozen words still identify a passage; fewer would show titles only).
MIN_PASSAGE_TOKENS = 16

Encode = Callable[[str], list[int]]
Decode = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class FittedObservation:
    """The observation token ids and the passages they show.

    Attributes:
        ids: Token ids of the rendered block, ``len(ids) <= cap``.
        shown: The passages rendered, in order, each with its text as shown (a prefix of
            the retrieved text when shortened). Empty for an error / no-result block.
        shortened: Number of passages whose text was cut.
        dropped: Number of retrieved passages not shown at all.
    """

    ids: list[int]
    shown: tuple[RetrievalHit, ...]
    shortened: int = 0
    dropped: int = 0


def _budget_per_passage(lengths: Sequence[int], avail: int) -> int:
    """Largest k with Σ min(len_i, k) ≤ avail (binary search; 0 if none)."""
    lo, hi = 0, max(lengths, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= avail:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _hard_cut(ids: list[int], cap: int, encode: Encode) -> list[int]:
    """Head of the block plus the closing tag (an error message or no room for any passage)."""
    tail = encode(f"{INFO_CLOSE}\n\n")
    if cap <= len(tail):
        return ids[:cap]
    return ids[: cap - len(tail)] + tail


def _render(
    hits: Sequence[RetrievalHit], toks: Sequence[list[int]], k: int, decode: Decode
) -> list[RetrievalHit]:
    """The passages with every text cut to its first ``k`` tokens (shorter ones unchanged)."""
    out = []
    for h, t in zip(hits, toks, strict=True):
        text = h.text if len(t) <= k else decode(t[:k]).rstrip("\ufffd").rstrip()
        out.append(h if text == h.text else dataclasses.replace(h, text=text))
    return out


def fit_observation(
    hits: Sequence[RetrievalHit],
    error: str | None,
    cap: int,
    encode: Encode,
    decode: Decode,
    min_passage_tokens: int = MIN_PASSAGE_TOKENS,
) -> FittedObservation:
    """Render R(q_t) within ``cap`` tokens, shortening each passage rather than the list.

    Args:
        hits: The retrieved passages, in rank order.
        error: The retrieval error, if the call failed (rendered, nothing shown).
        cap: Token cap, ``min(gta.agent.max_obs_tokens, remaining response budget)``.
        encode: ``text -> ids`` (no special tokens).
        decode: ``ids -> text``.
        min_passage_tokens: Minimum text tokens per passage before tail passages are dropped.

    Returns:
        :class:`FittedObservation`.
    """
    hits = list(hits) if error is None else []
    ids = encode(format_observation(hits, error=error))
    if len(ids) <= cap:
        return FittedObservation(ids, tuple(hits))
    if not hits:
        return FittedObservation(_hard_cut(ids, cap, encode), ())
    toks = [encode(h.text) for h in hits]
    for n in range(len(hits), 0, -1):
        bare = [dataclasses.replace(h, text="") for h in hits[:n]]
        avail = cap - len(encode(format_observation(bare)))
        k = _budget_per_passage([len(t) for t in toks[:n]], avail)
        # BPE may merge across the passage boundaries differently: shrink k until it fits.
        while k >= min(min_passage_tokens, max(len(t) for t in toks[:n])):
            shown = _render(hits[:n], toks[:n], k, decode)
            ids = encode(format_observation(shown))
            if len(ids) <= cap:
                cut = sum(s.text != h.text for s, h in zip(shown, hits, strict=False))  # shown: hits[:n]
                return FittedObservation(ids, tuple(shown), shortened=cut, dropped=len(hits) - n)
            k -= max(1, k // 16)
    ids = encode(format_observation(hits))
    return FittedObservation(_hard_cut(ids, cap, encode), (), dropped=len(hits))
