"""Turn spans of an agent rollout → per-token masks and positions (pure).

The agent loop records, in ``extra_fields["gta/turn_spans"]``, one
``[kind, start, end]`` triple per contiguous piece of the response (token
indices into ``response_ids``, ``end`` exclusive), with ``kind`` one of
:data:`gta_verl.data.schema.SPAN_KINDS`:

=============  ===========================================  =============  ============
kind           tokens                                        response_mask  distill_mask
=============  ===========================================  =============  ============
reasoning      generated text before the action tag          1              1
query          ``<search> q </search>`` (tags included)      1              1
answer         ``<answer> a </answer>`` (tags included)      1              0
observation    ``<info> … </info>`` appended by the loop     0              0
invalid        "My action is invalid…" appended by the loop  0              0
=============  ===========================================  =============  ============

PathRouter's selective teacher KL (PathRouter §3.3; docs/path_router.md) distils only reasoning and
query tokens: the teacher sees the gold evidence, so distilling the answer
would leak it, and observation/invalid tokens are not policy tokens at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gta_verl.data.schema import Span, parse_turn_spans

#: Span kinds whose tokens the policy generated (response_mask 1).
GENERATED_KINDS = frozenset({"reasoning", "query", "answer"})
#: Span kinds the selective teacher KL distils (distill_mask 1).
DISTILL_KINDS = frozenset({"reasoning", "query"})


#: The one reader of ``gta/turn_spans``, under the name the mask helpers below use.
normalize_spans = parse_turn_spans


def clip_spans(spans: Iterable[Sequence[Any]], length: int) -> list[Span]:
    """Clip spans to the first ``length`` tokens (truncation), dropping empty ones."""
    out: list[Span] = []
    for kind, start, end in normalize_spans(spans):
        end = min(end, length)
        if end > start:
            out.append((kind, start, end))
    return out


def mask_from_spans(
    response_length: int, spans: Iterable[Sequence[Any]], kinds: Iterable[str]
) -> list[float]:
    """Return a ``[response_length]`` 0/1 float list: 1 on tokens of the given kinds.

    Tokens not covered by any span (right padding) are 0.
    """
    wanted = frozenset(kinds)
    mask = [0.0] * response_length
    for kind, start, end in normalize_spans(spans, response_length):
        if kind in wanted:
            mask[start:end] = [1.0] * (end - start)
    return mask


def distill_mask_from_spans(response_length: int, spans: Iterable[Sequence[Any]]) -> list[float]:
    """Selective-KL token mask: 1 on reasoning and query tokens, 0 elsewhere.

    Args:
        response_length: Length of the (unpadded or padded) response.
        spans: ``[kind, start, end]`` spans from ``extra_fields["gta/turn_spans"]``.

    Returns:
        ``[response_length]`` floats; 0 on observation, answer, invalid-message and padding tokens.

    >>> distill_mask_from_spans(6, [["reasoning", 0, 2], ["query", 2, 3], ["observation", 3, 5]])
    [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    """
    return mask_from_spans(response_length, spans, DISTILL_KINDS)


def response_mask_from_spans(response_length: int, spans: Iterable[Sequence[Any]]) -> list[int]:
    """verl's ``response_mask`` implied by the spans: 1 on generated tokens only."""
    return [int(v) for v in mask_from_spans(response_length, spans, GENERATED_KINDS)]


def span_last_positions(spans: Iterable[Sequence[Any]], kind: str = "query") -> list[int]:
    """Return the last token index (``end - 1``) of every span of ``kind``, in order.

    With ``kind="query"`` these are the positions where opt-in per-turn search
    rewards are placed: the last token of each ``<search> … </search>``.
    """
    return [end - 1 for k, start, end in normalize_spans(spans) if k == kind and end > start]
