"""Readers for the corpus and QA formats users already have.

Every reader returns a :class:`LoadReport`: the parsed records, the rejected
records with a reason (file, record index or line number, why) and the number
of records read, so that ``n_in == len(records) + len(rejected)`` always holds.
With ``strict=True`` the first bad record raises :class:`DataFormatError`
naming the file and record/line instead.

Text is decoded per line (jsonl) or per record (JSON): a byte that is not UTF-8,
or a ``\\ud800``-style escape that leaves a lone surrogate, rejects that one
record as ``file:line: not UTF-8 ...`` and the rest of the file loads. Passages
that differ only by surrounding whitespace are duplicates (the first one is kept
as written).

Corpus formats:
    * ``hipporag``: JSON list ``[{title, text}, ...]`` (also a HotpotQA-style
      dict ``{title: [sentences]}``);
    * ``flashrag``: Search-R1/FlashRAG jsonl ``{id, contents: "\\"title\\"\\ntext"}``;
    * ``parquet``: columns ``title``, ``text`` (``doc_id`` is recomputed).

QA formats: MuSiQue-HippoRAG (paragraphs with ``is_supporting``), 2Wiki/HotpotQA
(``supporting_facts`` titles), FlashRAG jsonl, NQ-open jsonl, ReAct HotpotQA-simplified.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from gta_verl.data.ids import make_doc_id
from gta_verl.data.types import Passage, QAExample

T = TypeVar("T")
CORPUS_FORMATS = ("hipporag", "flashrag", "parquet")


class DataFormatError(ValueError):
    """A malformed input record; the message names the file and record/line."""


@dataclass(frozen=True)
class Rejection:
    """One record that was not loaded."""

    file: str
    index: int
    """0-based record index for JSON/parquet, 1-based line number for jsonl."""
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.index}: {self.reason}"


def reason_counts(rejected: Sequence[Rejection]) -> dict[str, int]:
    """Rejections per reason kind (the text before the first ``:``), sorted by kind."""
    counts: dict[str, int] = {}
    for r in rejected:
        key = r.reason.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


@dataclass
class LoadReport(Generic[T]):
    """Result of one reader: records + rejections that reconcile with ``n_in``."""

    path: str
    records: list[T] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    n_in: int = 0

    @property
    def n_ok(self) -> int:
        return len(self.records)

    def reconciles(self) -> bool:
        return self.n_in == self.n_ok + len(self.rejected)

    def summary(self) -> str:
        """One line: rows in / loaded / rejected, then the reasons by count."""
        why = ", ".join(f"{k}: {v}" for k, v in reason_counts(self.rejected).items())
        return f"{self.path}: {self.n_in} in, {self.n_ok} loaded, {len(self.rejected)} rejected" + (
            f" ({why})" if why else ""
        )


class Collector(Generic[T]):
    """Accumulates records/rejections; raises on the first rejection when strict."""

    def __init__(self, path: Path | str, strict: bool) -> None:
        self.report: LoadReport[T] = LoadReport(path=str(path))
        self.strict = strict

    def add(self, record: T) -> None:
        self.report.n_in += 1
        self.report.records.append(record)

    def reject(self, index: int, reason: str) -> None:
        self.report.n_in += 1
        rej = Rejection(self.report.path, index, reason)
        if self.strict:
            raise DataFormatError(str(rej))
        self.report.rejected.append(rej)


# --------------------------------------------------------------------------- raw readers
def _read_json(path: Path) -> Any:
    """Parse a JSON file; undecodable bytes survive as lone surrogates (see :func:`not_utf8`)."""
    try:
        # surrogateescape: one bad byte must reject its record, not the whole file
        return json.loads(path.read_bytes().decode("utf-8", errors="surrogateescape"))
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    except RecursionError:
        raise DataFormatError(f"{path}: not valid JSON: nested too deeply") from None


def not_utf8(obj: Any) -> str:
    """Why ``obj`` (a parsed record) holds text that is not valid UTF-8 ("" when it is all valid).

    Undecodable bytes (read with ``surrogateescape``) and ``\\ud800``-style JSON
    escapes both leave lone surrogates, which cannot be encoded back to UTF-8.
    """
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = x[exc.start]
                if "\udc80" <= bad <= "\udcff":
                    before = x[max(0, exc.start - 20) : exc.start]
                    return f"not UTF-8: byte 0x{ord(bad) - 0xDC00:02x} in {before!r}"
                return f"not UTF-8: lone surrogate \\u{ord(bad):04x}"
        elif isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return ""


def _iter_jsonl(path: Path, col: Collector[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object); bad lines are rejected (or raise when strict)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                col.reject(lineno, f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}")
                continue
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                col.reject(lineno, f"invalid JSON: {exc.msg}")
                continue
            except RecursionError:
                col.reject(lineno, "invalid JSON: nested too deeply")
                continue
            if not isinstance(obj, dict):
                col.reject(lineno, f"expected a JSON object, got {type(obj).__name__}")
                continue
            why = not_utf8(obj)
            if why:
                col.reject(lineno, why)
                continue
            yield lineno, obj


def _json_list(path: Path, what: str) -> list[Any]:
    data = _read_json(path)
    if not isinstance(data, list):
        raise DataFormatError(f"{path}: expected a JSON list of {what}, got {type(data).__name__}")
    return data


def json_records(path: Path, what: str, col: Collector[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (record index, object) of a JSON list; non-objects and non-UTF-8 records are rejected."""
    for i, rec in enumerate(_json_list(path, what)):
        if not isinstance(rec, dict):
            col.reject(i, f"expected a JSON object, got {type(rec).__name__}")
        elif why := not_utf8(rec):
            col.reject(i, why)
        else:
            yield i, rec


# --------------------------------------------------------------------------- corpora
def _add_passage(
    col: Collector[Passage], seen: dict[tuple[str, str], str], idx: int, title: Any, text: Any
) -> None:
    if not isinstance(title, str) or not isinstance(text, str):
        col.reject(idx, "bad field: title and text must be strings")
    elif not text.strip():
        col.reject(idx, "empty text")
    elif why := not_utf8([title, text]):
        col.reject(idx, why)
    else:
        key = (title.strip(), text.strip())  # surrounding whitespace does not make a new passage
        if key in seen:
            col.reject(idx, f"duplicate passage: same (title, text) as an earlier record ({seen[key]})")
        else:
            doc_id = make_doc_id(title, text)
            seen[key] = doc_id
            col.add(Passage(doc_id, title, text))


def read_hipporag_corpus(path: Path | str, strict: bool = False) -> LoadReport[Passage]:
    """Read a HippoRAG corpus JSON ``[{title, text}]`` (or ``{title: [sentences]}``)."""
    path = Path(path)
    data = _read_json(path)
    col: Collector[Passage] = Collector(path, strict)
    seen: dict[tuple[str, str], str] = {}
    if isinstance(data, dict):  # HotpotQA corpus: sentences carry their own leading spaces
        for i, (title, sents) in enumerate(data.items()):
            joinable = isinstance(sents, list) and all(isinstance(x, str) for x in sents)
            text = "".join(sents) if joinable else sents
            _add_passage(col, seen, i, title, text)
        return col.report
    if not isinstance(data, list):
        raise DataFormatError(f"{path}: expected a JSON list of {{title, text}}, got {type(data).__name__}")
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            col.reject(i, f"expected a JSON object, got {type(rec).__name__}")
        elif "text" not in rec:
            col.reject(i, "missing field: text")
        else:
            _add_passage(col, seen, i, rec.get("title", ""), rec["text"])
    return col.report


def split_flashrag_contents(contents: str) -> tuple[str, str]:
    """Split FlashRAG/Search-R1 ``"\\"title\\"\\ntext"`` into (title, text)."""
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text


def read_flashrag_corpus(path: Path | str, strict: bool = False) -> LoadReport[Passage]:
    """Read a Search-R1/FlashRAG corpus jsonl ``{id, contents}`` (or ``{title, text}``)."""
    path = Path(path)
    col: Collector[Passage] = Collector(path, strict)
    seen: dict[tuple[str, str], str] = {}
    for lineno, obj in _iter_jsonl(path, col):
        if isinstance(obj.get("contents"), str):
            title, text = split_flashrag_contents(obj["contents"])
        elif "text" in obj:
            title, text = obj.get("title", ""), obj["text"]
        else:
            col.reject(lineno, "missing field: contents (or title/text)")
            continue
        _add_passage(col, seen, lineno, title, text)
    return col.report


def read_parquet_corpus(path: Path | str, strict: bool = False) -> LoadReport[Passage]:
    """Read a corpus parquet with ``title`` and ``text`` columns (``contents`` also accepted)."""
    import pandas as pd

    path = Path(path)
    df = pd.read_parquet(path)
    col: Collector[Passage] = Collector(path, strict)
    seen: dict[tuple[str, str], str] = {}
    has_tt = "text" in df.columns
    if not has_tt and "contents" not in df.columns:
        raise DataFormatError(f"{path}: parquet corpus needs a 'text' (and 'title') or 'contents' column")
    for i, row in enumerate(df.to_dict("records")):
        if has_tt:
            _add_passage(col, seen, i, row.get("title", ""), row["text"])
        elif isinstance(row["contents"], str):
            _add_passage(col, seen, i, *split_flashrag_contents(row["contents"]))
        else:
            col.reject(i, "bad field: contents must be a string")
    return col.report


def read_corpus(path: Path | str, fmt: str | None = None, strict: bool = False) -> LoadReport[Passage]:
    """Read a corpus in ``fmt`` (inferred from the suffix when ``None``)."""
    path = Path(path)
    if fmt is None:
        fmt = {".json": "hipporag", ".jsonl": "flashrag", ".parquet": "parquet"}.get(path.suffix)
    readers: dict[str, Callable[..., LoadReport[Passage]]] = {
        "hipporag": read_hipporag_corpus,
        "flashrag": read_flashrag_corpus,
        "parquet": read_parquet_corpus,
    }
    if fmt not in readers:
        raise ValueError(f"unknown corpus format {fmt!r} for {path}; use one of {CORPUS_FORMATS}")
    if not path.exists():
        raise FileNotFoundError(f"corpus file not found: {path}")
    return readers[fmt](path, strict=strict)


# --------------------------------------------------------------------------- QA
def answer_tuple(primary: Any, aliases: Any = ()) -> tuple[str, ...]:
    """Gold answer first, then aliases; dedup keeping order; drop empties."""
    vals: list[Any] = list(primary) if isinstance(primary, (list, tuple)) else [primary]
    vals += list(aliases or ())
    out: list[str] = []
    for v in vals:
        s = str(v).strip() if v is not None else ""
        if s and s not in out:
            out.append(s)
    return tuple(out)


def _musique_gold(rec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(title, text) of supporting paragraphs, in reasoning order when a decomposition gives it."""
    paras = rec["paragraphs"]
    by_idx = {p.get("idx", i): p for i, p in enumerate(paras)}
    support = [p for p in paras if p.get("is_supporting")]
    order = [s.get("paragraph_support_idx") for s in rec.get("question_decomposition") or ()]
    if order and all(o in by_idx and by_idx[o].get("is_supporting") for o in order):
        support = [by_idx[o] for o in dict.fromkeys(order)]
    return [(p.get("title", ""), p.get("paragraph_text", p.get("text"))) for p in support]


def read_musique_qa(
    path: Path | str,
    corpus_ids: Mapping[str, Passage] | None = None,
    data_source: str = "musique",
    split: str = "train",
    strict: bool = False,
) -> LoadReport[QAExample]:
    """Read MuSiQue/HippoRAG question files (paragraphs with ``is_supporting``).

    Gold paragraphs map to ``make_doc_id(title, text)``: MuSiQue repeats titles, so
    the text is part of the key. With ``corpus_ids`` every gold id must be a corpus
    passage, otherwise the question is rejected ("gold paragraph not in corpus").
    ``hops`` = ``len(question_decomposition)`` (else the number of gold paragraphs).
    """
    path = Path(path)
    col: Collector[QAExample] = Collector(path, strict)
    for i, rec in json_records(path, "questions", col):
        try:
            question, answers = rec["question"], answer_tuple(rec["answer"], rec.get("answer_aliases"))
            gold = _musique_gold(rec)
        except (KeyError, TypeError, AttributeError) as exc:
            col.reject(i, f"missing field: {exc}")
            continue
        if not answers:
            col.reject(i, "no gold answer")
            continue
        if any(not isinstance(t, str) for _, t in gold):
            col.reject(i, "bad field: supporting paragraph without text")
            continue
        ids = [make_doc_id(t, x) for t, x in gold]
        missing = [
            t for (t, _), d in zip(gold, ids, strict=True) if corpus_ids is not None and d not in corpus_ids
        ]
        if missing:
            col.reject(i, f"gold paragraph not in corpus: {missing[0]!r}")
            continue
        hops = len(rec.get("question_decomposition") or ()) or len(ids)
        col.add(
            QAExample(
                qid=str(rec.get("id", rec.get("_id", i))),
                question=question,
                answers=answers,
                supporting_doc_ids=tuple(ids),
                hops=hops,
                data_source=data_source,
                split=split,
                supporting_texts=tuple(f"{t}\n{x}" for t, x in gold),
            )
        )
    return col.report


def read_supporting_facts_qa(
    path: Path | str,
    corpus: Sequence[Passage],
    data_source: str = "2wikimultihopqa",
    split: str = "dev",
    strict: bool = False,
) -> LoadReport[QAExample]:
    """Read 2Wiki/HotpotQA-style files whose gold is ``supporting_facts: [[title, sent_idx]]``.

    Gold titles map to corpus passages by title; a title absent from the corpus or
    shared by several passages rejects the question (the gold document is unknown).
    """
    path = Path(path)
    by_title: dict[str, list[Passage]] = {}
    for p in corpus:
        by_title.setdefault(p.title, []).append(p)
    col: Collector[QAExample] = Collector(path, strict)
    for i, rec in json_records(path, "questions", col):
        try:
            titles = list(dict.fromkeys(str(f[0]) for f in rec["supporting_facts"]))
            answers = answer_tuple(rec["answer"], rec.get("answer_aliases"))
            question = rec["question"]
        except (KeyError, TypeError, IndexError) as exc:
            col.reject(i, f"missing field: {exc}")
            continue
        bad = [t for t in titles if len(by_title.get(t, ())) != 1]
        if bad or not answers:
            why = "no gold answer" if not answers else f"gold title not uniquely in corpus: {bad[0]!r}"
            col.reject(i, why)
            continue
        gold = [by_title[t][0] for t in titles]
        col.add(
            QAExample(
                qid=str(rec.get("_id", rec.get("id", i))),
                question=question,
                answers=answers,
                supporting_doc_ids=tuple(p.doc_id for p in gold),
                hops=len(gold),
                data_source=data_source,
                split=split,
                supporting_texts=tuple(p.contents for p in gold),
            )
        )
    return col.report


def read_flashrag_qa(
    path: Path | str, data_source: str = "flashrag", split: str = "test", strict: bool = False
) -> LoadReport[QAExample]:
    """Read FlashRAG jsonl QA ``{id, question, golden_answers, metadata}`` (answers only)."""
    path = Path(path)
    col: Collector[QAExample] = Collector(path, strict)
    for lineno, obj in _iter_jsonl(path, col):
        q, gold = obj.get("question"), obj.get("golden_answers")
        if not isinstance(q, str) or not q.strip():
            col.reject(lineno, "missing field: question")
            continue
        answers = answer_tuple(gold if gold is not None else ())
        if not answers:
            col.reject(lineno, "no gold answer (golden_answers)")
            continue
        col.add(
            QAExample(
                qid=str(obj.get("id", lineno)),
                question=q,
                answers=answers,
                data_source=data_source,
                split=split,
            )
        )
    return col.report


def read_nq_open(
    path: Path | str, data_source: str = "nq", split: str = "dev", strict: bool = False
) -> LoadReport[QAExample]:
    """Read NQ-open jsonl ``{question, answer: [...]}``; qid = ``nq-<line>``."""
    path = Path(path)
    col: Collector[QAExample] = Collector(path, strict)
    for lineno, obj in _iter_jsonl(path, col):
        q = obj.get("question")
        answers = answer_tuple(obj.get("answer") or ())
        if not isinstance(q, str) or not q.strip():
            col.reject(lineno, "missing field: question")
        elif not answers:
            col.reject(lineno, "no gold answer")
        else:
            col.add(
                QAExample(
                    qid=f"nq-{lineno}", question=q, answers=answers, data_source=data_source, split=split
                )
            )
    return col.report


def read_react_hotpot(
    path: Path | str, data_source: str = "hotpotqa", split: str = "dev", strict: bool = False
) -> LoadReport[QAExample]:
    """Read ReAct's ``hotpot_dev_v1_simplified.json`` ``[{question, answer, type}]``."""
    path = Path(path)
    col: Collector[QAExample] = Collector(path, strict)
    for i, rec in json_records(path, "questions", col):
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str):
            col.reject(i, "missing field: question")
            continue
        answers = answer_tuple(rec.get("answer"))
        if not answers:
            col.reject(i, "no gold answer")
            continue
        col.add(
            QAExample(
                qid=f"hotpot-{i}",
                question=rec["question"],
                answers=answers,
                hops=2,
                data_source=data_source,
                split=split,
            )
        )
    return col.report
