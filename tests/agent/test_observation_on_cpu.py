"""fit_observation: every passage shortened to one budget k so all fit; only shown passages listed.

A character-level "tokenizer" (one id per character) makes every token count exact by hand;
the agent-loop test runs the real Qwen tokenizer on real MuSiQue passages.
"""

from __future__ import annotations

from gta_verl.agent.observation import _budget_per_passage, fit_observation
from gta_verl.data.types import RetrievalHit
from gta_verl.protocol import format_observation


def encode(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def decode(ids) -> str:
    return "".join(chr(i) for i in ids)


def hit(doc_id: str, title: str, text: str) -> RetrievalHit:
    return RetrievalHit(doc_id, title, text, 0.5, "graph")


A, B = hit("a", "A", "x" * 10), hit("b", "B", "y" * 100)
# Overhead of two passages with empty texts, in characters:
#   "\n\n<info>" 8 + "Doc 1(Title: A) " 16 + "\n" 1 + "Doc 2(Title: B) " 16 + "</info>\n\n" 9 = 50
# so the full block is 50 + 10 + 100 = 160 characters.


def test_budget_per_passage_water_filling():
    # Σ min(n_i, k) ≤ 90 with n = (10, 50, 100): k = 40 → 10 + 40 + 40 = 90; k = 41 → 92.
    assert _budget_per_passage([10, 50, 100], 90) == 40
    assert _budget_per_passage([10, 50, 100], 160) == 100  # everything fits whole
    assert _budget_per_passage([10, 50], -3) == 0


def test_fits_whole_when_under_cap():
    out = fit_observation([A, B], None, 160, encode, decode)
    assert len(out.ids) == 160 and out.shown == (A, B) and out.shortened == 0 and out.dropped == 0


def test_every_passage_shortened_not_the_list():
    # cap 100 → 50 left for texts: k = 40 (10 + min(100, 40) = 50). A stays whole, B → "y"·40.
    out = fit_observation([A, B], None, 100, encode, decode)
    assert [h.doc_id for h in out.shown] == ["a", "b"]
    assert out.shown[0].text == "x" * 10 and out.shown[1].text == "y" * 40
    assert decode(out.ids) == format_observation(out.shown) and len(out.ids) == 100
    assert (out.shortened, out.dropped) == (1, 0)


def test_tail_dropped_only_below_min_tokens():
    # cap 70 → 20 left: k = 10 < 16 (min_passage_tokens) → drop B. One passage: overhead
    # 8 + 16 + 9 = 33, 37 left ≥ |A| = 10 → A whole, block 43 characters; B not shown.
    out = fit_observation([A, B], None, 70, encode, decode)
    assert out.shown == (A,) and out.dropped == 1 and len(out.ids) == 43
    # With min_passage_tokens = 5 the same cap keeps both: k = 10 → A whole, B → "y"·10.
    both = fit_observation([A, B], None, 70, encode, decode, min_passage_tokens=5)
    assert [h.text for h in both.shown] == ["x" * 10, "y" * 10] and len(both.ids) == 70


def test_error_and_no_room_show_nothing():
    err = fit_observation([], "timeout after 30s", 20, encode, decode)
    # hard cut: head (20 − 9) + "</info>\n\n" (9) = 20 characters, nothing shown
    assert len(err.ids) == 20 and decode(err.ids).endswith("</info>\n\n") and err.shown == ()
    none = fit_observation([A, B], None, 30, encode, decode)  # < one passage's overhead (33)
    assert none.shown == () and none.dropped == 2 and len(none.ids) == 30
