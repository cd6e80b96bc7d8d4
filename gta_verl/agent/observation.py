"""Fit one ``<info> … </info>`` observation into a token cap by shortening every passage.

The rewards (Δ_t, the complete-chain bonus, PathRouter's P) and the evidence metrics must
count exactly what the policy saw. Cutting the rendered block at the cap would hide the
tail passages (on MuSiQue, 6 passages of the bundled KB are often > 512 Qwen tokens) while
the loop still recorded them. Instead every passage gets the same token budget k, the
largest with Σ_i min(|p_i|, k) ≤ cap − overhead (water-filling: short passages stay whole,
long ones are cut to their first k tokens), so all of them are shown. Only when even
``min_passage_tokens`` per passage does not fit are passages dropped from the tail; the
:class:`FittedObservation` lists the passages shown, with the text as shown.

Several queries in one search (``gta.agent.max_queries_per_turn`` = K > 1) put K rankings in one
cap; one budget over all of them halves every passage (on 60 MuSiQue questions with K = 2 a shown
passage kept a median 57 % of its text, and 9.1 % of credited answer-bearing gold passages lost
their answer text). :func:`fit_observation_per_query` budgets per query instead: each query's best
passage is budgeted first (the K best passages water-filled over the whole room), so it is shown
whole (answer span included) whenever the room holds the bests, and the other passages share what
is left, dropped lowest rank first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gta_verl.data.types import RetrievalHit
from gta_verl.protocol import INFO_CLOSE, format_observation

__all__ = ["MIN_PASSAGE_TOKENS", "FittedObservation", "fit_observation", "fit_observation_per_query"]

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
    hits: Sequence[RetrievalHit], toks: Sequence[list[int]], k: int | Sequence[int], decode: Decode
) -> list[RetrievalHit]:
    """The passages with every text cut to its first ``k`` tokens (one k, or one per passage)."""
    ks = [k] * len(hits) if isinstance(k, int) else list(k)
    out = []
    for h, t, k_i in zip(hits, toks, ks, strict=True):
        text = h.text if len(t) <= k_i else decode(t[:k_i]).rstrip("\ufffd").rstrip()
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


def _by_rank(groups: Sequence[Sequence[RetrievalHit]]) -> tuple[list[int], list[int]]:
    """Flat indices of each query's best passage, and of the others ordered best rank first."""
    firsts, others, start = [], [], 0
    for g, group in enumerate(groups):
        if group:
            firsts.append(start)
            others += [(rank, g, start + rank) for rank in range(1, len(group))]
        start += len(group)
    return firsts, [i for _, _, i in sorted(others)]


def _query_limits(
    toks: Sequence[list[int]], firsts: Sequence[int], others: Sequence[int], avail: int, min_tokens: int
) -> dict[int, int] | None:
    """Token limit per shown passage: the bests water-filled over the whole room, the others over the rest."""
    share = _budget_per_passage([len(toks[i]) for i in firsts], avail)
    limits = {i: min(len(toks[i]), share) for i in firsts}
    if min(limits.values()) < min(min_tokens, min(len(toks[i]) for i in firsts)):
        return None
    k = _budget_per_passage([len(toks[i]) for i in others], avail - sum(limits.values()))
    if others and k < min(min_tokens, max(len(toks[i]) for i in others)):
        return None
    return limits | {i: min(len(toks[i]), k) for i in others}


def fit_observation_per_query(
    groups: Sequence[Sequence[RetrievalHit]],
    error: str | None,
    cap: int,
    encode: Encode,
    decode: Decode,
    min_passage_tokens: int = MIN_PASSAGE_TOKENS,
) -> FittedObservation:
    """Render a K-query turn's passages within ``cap`` tokens, budgeted per query.

    Args:
        groups: Each query's passages in rank order, a document already in an earlier query's
            group left out; the block shows them in this order (their concatenation is the
            turn's union, :func:`gta_verl.agent.loop.union_of_results`).
        error: The retrieval error when every query failed (rendered, nothing shown).
        cap: Token cap, ``min(gta.agent.max_obs_tokens, remaining response budget)``.
        encode: ``text -> ids`` (no special tokens).
        decode: ``ids -> text``.
        min_passage_tokens: Minimum text tokens per passage before passages are dropped.

    Returns:
        :class:`FittedObservation`. With the room R = cap − the block's overhead, the K' best
        passages (one per non-empty group) keep min(|p|, k_b) tokens, k_b the largest with
        Σ_bests min(|p|, k_b) ≤ R (a short best leaves its unused share to the longer ones); the
        other passages share the rest with one budget k (as :func:`fit_observation`), the
        lowest-ranked dropped first while k < ``min_passage_tokens``. One non-empty group is
        :func:`fit_observation`.
    """
    hits = [h for group in groups for h in group]
    firsts, others = _by_rank(groups)
    if error is not None or len(firsts) <= 1:
        return fit_observation(hits, error, cap, encode, decode, min_passage_tokens)
    ids = encode(format_observation(hits))
    if len(ids) <= cap:
        return FittedObservation(ids, tuple(hits))
    toks = [encode(h.text) for h in hits]
    for n in range(len(others), -1, -1):
        shown_idx = sorted([*firsts, *others[:n]])
        bare = [dataclasses.replace(hits[i], text="") for i in shown_idx]
        limits = _query_limits(
            toks, firsts, others[:n], cap - len(encode(format_observation(bare))), min_passage_tokens
        )
        while limits is not None and min(limits[i] for i in firsts) > 0:
            shown = _render(
                [hits[i] for i in shown_idx],
                [toks[i] for i in shown_idx],
                [limits[i] for i in shown_idx],
                decode,
            )
            ids = encode(format_observation(shown))
            if len(ids) <= cap:
                cut = sum(s.text != hits[i].text for s, i in zip(shown, shown_idx, strict=True))
                return FittedObservation(ids, tuple(shown), shortened=cut, dropped=len(hits) - len(shown))
            # BPE may merge across the passage boundaries differently: shrink every limit until it fits.
            limits = {i: v - max(1, v // 16) if v else 0 for i, v in limits.items()}
    return fit_observation(hits, error, cap, encode, decode, min_passage_tokens)
