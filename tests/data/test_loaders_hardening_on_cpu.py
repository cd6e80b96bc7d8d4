"""Malformed corpora: per-record rejection with file:line, counts that reconcile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gta_verl.cli import main
from gta_verl.data.loaders import (
    DataFormatError,
    read_flashrag_corpus,
    read_flashrag_qa,
    read_hipporag_corpus,
    read_musique_qa,
    reason_counts,
)
from gta_verl.testing.kb_argv import spacy_build_argv

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "assets" / "hipporag_sample" / "sample_corpus.json"


def _jsonl(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_jsonl_bad_byte_rejects_only_its_line(tmp_path: Path) -> None:
    f = _jsonl(
        tmp_path / "c.jsonl",
        [
            b'{"id": "1", "contents": "\\"Paris\\"\\nParis is the capital of France."}',
            b'{"id": "2", "contents": "\\"Caf\xe9\\"\\nA Latin-1 byte, not UTF-8."}',  # line 2: 0xe9 then '"'
            b'{"id": "3", "contents": "\\"Tokyo\\"\\nTokyo is the capital of Japan."}',
            b'{"id": "4", "contents": "\\"Lone\\"\\nA \\ud800 escape."}',  # line 4: lone surrogate escape
        ],
    )
    rep = read_flashrag_corpus(f)
    # 4 lines in = 2 loaded (lines 1, 3) + 2 rejected (lines 2, 4)
    assert (rep.n_in, rep.n_ok, len(rep.rejected)) == (4, 2, 2) and rep.reconciles()
    assert [p.title for p in rep.records] == ["Paris", "Tokyo"]
    # line 2 is `{"id": "2", "contents": "\"Caf` (30 bytes) then 0xe9: column 31
    assert str(rep.rejected[0]) == f"{f}:2: not UTF-8: byte 0xe9 at column 31"
    assert str(rep.rejected[1]).startswith(f"{f}:4: not UTF-8: lone surrogate \\ud800")
    assert reason_counts(rep.rejected) == {"not UTF-8": 2}
    with pytest.raises(DataFormatError, match=r"c\.jsonl:2: not UTF-8"):
        read_flashrag_corpus(f, strict=True)


def test_json_corpus_bad_byte_rejects_only_its_record(tmp_path: Path) -> None:
    recs = json.loads(SAMPLE.read_text())[:3]
    raw = json.dumps(recs, ensure_ascii=False).encode()
    # Break the second record's title: its first byte becomes 0xff (never valid UTF-8).
    at = raw.index(json.dumps(recs[1]["title"], ensure_ascii=False).encode()) + 1
    f = tmp_path / "c.json"
    f.write_bytes(raw[:at] + b"\xff" + raw[at + 1 :])
    rep = read_hipporag_corpus(f)
    # 3 records in = 2 loaded + 1 rejected (record index 1)
    assert (rep.n_in, rep.n_ok, len(rep.rejected)) == (3, 2, 1) and rep.reconciles()
    assert rep.rejected[0].index == 1 and rep.rejected[0].reason.startswith("not UTF-8: byte 0xff")
    assert [p.title for p in rep.records] == [recs[0]["title"], recs[2]["title"]]


def test_whitespace_only_differences_are_duplicates(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(
        json.dumps(
            [
                {"title": "Paris", "text": "Paris is in France."},
                {"title": " Paris", "text": "Paris is in France.\n"},
                {"title": "Paris", "text": "  Paris is in France. "},
                {"title": "Paris", "text": "Paris is  in France."},
            ]
        )
    )  # inner spaces: different
    rep = read_hipporag_corpus(f)
    # 4 in = 2 loaded (records 0 and 3) + 2 duplicates (records 1 and 2 of record 0)
    assert (rep.n_in, rep.n_ok) == (4, 2) and rep.reconciles()
    assert [r.index for r in rep.rejected] == [1, 2]
    assert all(
        r.reason.startswith("duplicate passage") and rep.records[0].doc_id in r.reason for r in rep.rejected
    )
    assert rep.records[0].text == "Paris is in France."  # the first one, as written


def test_non_object_record_says_so(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps([{"title": "A", "text": "Alpha."}, ["B", "Beta."], "C", None, {"title": "D"}]))
    rep = read_hipporag_corpus(f)
    assert [r.reason for r in rep.rejected] == [
        "expected a JSON object, got list",
        "expected a JSON object, got str",
        "expected a JSON object, got NoneType",
        "missing field: text",
    ]
    # 5 in = 1 loaded + 4 rejected
    assert (rep.n_in, rep.n_ok) == (5, 1) and rep.reconciles()


def test_hotpot_dict_corpus_with_non_string_sentences(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"A": ["Alpha ", "one."], "B": ["Beta", 2], "C": "Gamma."}))
    rep = read_hipporag_corpus(f)
    assert [p.text for p in rep.records] == ["Alpha one.", "Gamma."]
    assert [(r.index, r.reason) for r in rep.rejected] == [(1, "bad field: title and text must be strings")]


def test_qa_files_reject_non_utf8_and_non_objects(tmp_path: Path) -> None:
    f = _jsonl(
        tmp_path / "q.jsonl",
        [
            b'{"id": "a", "question": "Who?", "golden_answers": ["Me"]}',
            b'{"id": "b", "question": "Wh\xc3o?", "golden_answers": ["X"]}',
            b"[1, 2]",
        ],
    )
    rep = read_flashrag_qa(f)
    # line 2 is `{"id": "b", "question": "Wh` (27 bytes) then 0xc3: column 28
    assert [str(r) for r in rep.rejected] == [
        f"{f}:2: not UTF-8: byte 0xc3 at column 28",
        f"{f}:3: expected a JSON object, got list",
    ]
    assert (rep.n_in, rep.n_ok) == (3, 1) and rep.reconciles()
    m = tmp_path / "m.json"
    m.write_bytes(b'[7, {"question": "Q\\udc00", "answer": "A", "paragraphs": []}]')
    rep = read_musique_qa(m)
    assert [r.reason for r in rep.rejected] == [
        "expected a JSON object, got int",
        "not UTF-8: lone surrogate \\udc00",
    ]
    assert rep.n_in == 2 and rep.reconciles()


def test_kb_build_with_bad_byte_keeps_going(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = json.loads(SAMPLE.read_text())[:3]
    raw = json.dumps(recs, ensure_ascii=False).encode()
    at = raw.index(json.dumps(recs[2]["text"][:20], ensure_ascii=False).encode()[:-1]) + 1
    f = tmp_path / "c.json"
    f.write_bytes(raw[:at] + b"\xfe" + raw[at + 1 :])
    out = tmp_path / "kb"
    assert main(spacy_build_argv(f, out)) == 0
    capsys.readouterr()
    assert main(["kb", "stats", str(out), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    # 3 records in = 2 documents + 1 rejected "not UTF-8"
    assert obj["document_nodes"] == 2
    assert (obj["corpus"]["n_in"], obj["corpus"]["n_loaded"], obj["corpus"]["n_rejected"]) == (3, 2, 1)
    assert main(spacy_build_argv(f, out, "--strict")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"gta-verl: error: {f}:2: not UTF-8: byte 0xfe") and "Traceback" not in "".join(
        err
    )
