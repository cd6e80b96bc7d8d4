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


# --- several queries in one search: the budget is per query ----------------------------------------
A1, A2 = hit("a1", "A", "a" * 30), hit("a2", "B", "b" * 30)  # query 1's ranking
B1, B2 = hit("b1", "C", "c" * 30), hit("b2", "D", "d" * 30)  # query 2's ranking
# Overhead of four passages with empty texts: 8 + 4·16 + 3 newlines + 9 = 84; of three: 8 + 48 + 2 + 9 = 67.


def test_each_querys_best_passage_is_shown_whole():
    from gta_verl.agent.observation import fit_observation_per_query

    # cap 144. One budget over the union (as with K = 1): 144 − 84 = 60 for 4 texts → k = 15 < 16, so
    # B2 is dropped; 144 − 67 = 77 for 3 texts → k = 25: every shown passage cut, both bests included.
    union = fit_observation([A1, A2, B1, B2], None, 144, encode, decode)
    assert [h.text for h in union.shown] == ["a" * 25, "b" * 25, "c" * 25]
    # Per query: 4 texts get 60; the bests first: k_b = 30 (30 + 30 ≤ 60) → A1, B1 whole, 0 left → k = 0 < 16:
    # drop the lowest-ranked other (rank 2 of query 2: B2). 3 texts get 77: A1 and B1 whole (60), 17 left →
    # A2 cut to 17 ≥ 16. Block 67 + 30 + 17 + 30 = 144 characters.
    out = fit_observation_per_query([[A1, A2], [B1, B2]], None, 144, encode, decode)
    assert [(h.doc_id, h.text) for h in out.shown] == [("a1", "a" * 30), ("a2", "b" * 17), ("b1", "c" * 30)]
    assert (out.shortened, out.dropped, len(out.ids)) == (1, 1, 144)
    assert decode(out.ids) == format_observation(out.shown)
    # Room for all: nothing changes (84 + 120 = 204).
    assert fit_observation_per_query([[A1, A2], [B1, B2]], None, 204, encode, decode).shown == (
        A1,
        A2,
        B1,
        B2,
    )
    # A short best leaves its share to a long one: bests of 10 and 100 characters with 60 for their
    # texts (two passages: 8 + 16 + 1 + 16 + 9 = 50 overhead, cap 110): k_b = 50 → 10 + 50 = 60.
    short, long_ = hit("s", "S", "s" * 10), hit("l", "L", "l" * 100)
    both = fit_observation_per_query([[short], [long_]], None, 110, encode, decode)
    assert [h.text for h in both.shown] == ["s" * 10, "l" * 50]
    # One query (K = 1, or every other query empty): the plain fit, bit for bit.
    one = fit_observation_per_query([[A1, A2, B1, B2], []], None, 144, encode, decode)
    assert one == union


def test_each_querys_best_real_musique_passage_keeps_its_answer(qwen_tokenizer, musique_qa, musique_passages):
    from gta_verl.agent.observation import fit_observation_per_query

    def enc(text):
        return qwen_tokenizer.encode(text, add_special_tokens=False)

    def dec(ids):
        return qwen_tokenizer.decode(ids)

    by_id = {p.doc_id: p for p in musique_passages}
    # A 2-hop question: query 1 ranks its first gold passage first, query 2 its second; each then
    # has four more corpus passages (as topk = 5 would), all real text, at the default cap of 512.
    q = next(x for x in musique_qa if x.hops == 2)
    gold = [by_id[d] for d in q.supporting_doc_ids]
    filler = [p for p in musique_passages if p.doc_id not in q.supporting_doc_ids][:8]

    def h(p):
        return RetrievalHit(p.doc_id, p.title, p.text, 0.5, "graph")

    groups = [[h(gold[0]), *map(h, filler[:4])], [h(gold[1]), *map(h, filler[4:])]]
    full = len(enc(format_observation([x for g in groups for x in g])))
    assert full > 512  # ten passages do not fit: something must give
    out = fit_observation_per_query(groups, None, 512, enc, dec)
    shown = {x.doc_id: x.text for x in out.shown}
    # Both bests are shown with their whole text (so any answer span in them), within the cap.
    assert shown[gold[0].doc_id] == gold[0].text and shown[gold[1].doc_id] == gold[1].text
    assert len(out.ids) <= 512
    # One budget over the same ten passages cuts a best (the behaviour with K > 1 before).
    union = {
        x.doc_id: x.text for x in fit_observation([x for g in groups for x in g], None, 512, enc, dec).shown
    }
    assert union.get(gold[0].doc_id) != gold[0].text or union.get(gold[1].doc_id) != gold[1].text
