"""HotpotQA questions + their own context paragraphs → Stage II's QA parquet and retrieval corpus.

GTA-RAG's Stage II (§4.1) trains on 10,000 HotpotQA training questions and retrieves over a graph of
about 18,300 documents. That is the size of the questions' gold paragraphs alone (2 per question,
≈ 1.83 after deduplication), not of their whole contexts: a HotpotQA question carries 9.94 context
paragraphs on average (gold + distractors), ≈ 99,400 documents for 10,000 questions, 5.4× the
paper's figure. Both corpora are offered (``paragraphs="gold"``, the paper's size, or ``"all"``,
gold + distractors); the Stage-II recipe step (``recipes/gta_rag/data/prepare_stage2_hotpotqa.sh``)
uses ``gold``. This module turns HotpotQA-format records (``_id, question, answer, type,
supporting_facts = [[title, sent_idx]], context = [[title, [sentences]]]``) into

* a :class:`ContextCorpus`: the chosen context paragraphs of the kept questions, deduplicated by
  (title, text) exactly as the corpus readers do (:mod:`gta_verl.data.loaders`), so the corpus parquet
  it becomes reads back, and into ``gta-verl kb build``, with the same doc ids;
* :class:`~gta_verl.data.types.QAExample` s whose gold ids are the supporting-fact paragraphs *of
  each question's own context*, as ``make_doc_id(title, text)`` of the kept passage.

Mapping gold titles through the question's own context (rather than by title over the whole corpus,
as :func:`~gta_verl.data.loaders.read_supporting_facts_qa` does) keeps a question whose gold title
shows up elsewhere in the sample with a different text: both texts become passages, the conflict
is reported, and each question points at the paragraph it was written against.

The HippoRAG copy of the training set stores ``context``/``supporting_facts`` as strings holding
Python-literal lists; the official ``hotpot_train_v1.1.json`` holds real lists. Both are read.
"""

from __future__ import annotations

import ast
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gta_verl.data.ids import make_doc_id
from gta_verl.data.loaders import Collector, LoadReport, Rejection, answer_tuple, json_records
from gta_verl.data.types import Passage, QAExample

T = TypeVar("T")

#: Which context paragraphs make the corpus: ``gold`` = the supporting-fact paragraphs only (the
#: paper's ~18,300 documents for 10,000 questions), ``all`` = gold + distractors (≈ 99,400).
CORPUS_PARAGRAPHS = ("gold", "all")


@dataclass(frozen=True)
class ContextRecord:
    """One well-formed HotpotQA record."""

    index: int
    """0-based record index in the input file (what rejections and conflicts name)."""
    qid: str
    question: str
    answers: tuple[str, ...]
    qtype: str
    """``bridge`` / ``comparison`` ("" when the record has no ``type``)."""
    gold_titles: tuple[str, ...]
    """Supporting-fact titles, first mention first, without repeats."""
    paragraphs: tuple[tuple[str, str], ...]
    """(title, text) of every context paragraph, in context order; text = the sentences joined."""


@dataclass(frozen=True)
class TitleConflict:
    """A title that appears with more than one text among the kept questions' paragraphs."""

    title: str
    n_texts: int
    records: tuple[int, ...]
    """Record indices whose context holds this title (any of its texts), in file order."""

    def __str__(self) -> str:
        shown = ", ".join(map(str, self.records[:5])) + (", …" if len(self.records) > 5 else "")
        return (
            f"title {self.title!r} has {self.n_texts} different texts (records {shown}); "
            "each kept as a passage"
        )


@dataclass(frozen=True)
class ContextCorpus:
    """The deduplicated paragraphs of a set of records.

    Counts reconcile: ``n_paragraphs == len(passages) + len(rejected)`` (duplicates and empty texts).
    """

    passages: tuple[Passage, ...]
    n_paragraphs: int
    rejected: tuple[Rejection, ...]
    title_conflicts: tuple[TitleConflict, ...]
    ids: Mapping[tuple[str, str], str] = field(repr=False)
    """(title.strip(), text.strip()) → doc id of the passage kept for it."""

    def doc_id(self, title: str, text: str) -> str:
        """The doc id of the kept passage for paragraph (title, text); KeyError when absent."""
        return self.ids[(title.strip(), text.strip())]

    def reconciles(self) -> bool:
        return self.n_paragraphs == len(self.passages) + len(self.rejected)


# --------------------------------------------------------------------------- parsing
def _literal(value: Any) -> Any:
    """A field as data: strings are Python-literal lists in the HippoRAG copy, parsed safely."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value  # left as a string: the caller rejects it as "not a list"
    return value


def _paragraphs(context: Any) -> tuple[tuple[str, str], ...] | str:
    """(title, "".join(sentences)) per context item, or why ``context`` is malformed."""
    if not isinstance(context, (list, tuple)) or not context:
        got = type(context).__name__
        return f"bad field: context must be a non-empty list of [title, [sentences]], got {got}"
    out = []
    for j, item in enumerate(context):
        ok = isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
        sents = item[1] if ok else None
        if not ok or not isinstance(sents, (list, tuple)) or not all(isinstance(s, str) for s in sents):
            return f"bad field: context[{j}] must be [title, [sentences]]"
        # HotpotQA sentences carry their own leading spaces; "".join is how HotpotQA rebuilds paragraphs.
        out.append((item[0], "".join(sents)))
    return tuple(out)


def _gold_titles(facts: Any) -> tuple[str, ...] | str:
    """Supporting-fact titles (first mention order), or why ``supporting_facts`` is malformed."""
    if not isinstance(facts, (list, tuple)) or not facts:
        return "bad field: supporting_facts must be a non-empty list of [title, sent_idx]"
    if not all(isinstance(f, (list, tuple)) and f and isinstance(f[0], str) for f in facts):
        return "bad field: supporting_facts items must be [title, sent_idx]"
    return tuple(dict.fromkeys(f[0] for f in facts))


def _gold_problem(gold: Sequence[str], paragraphs: Sequence[tuple[str, str]]) -> str:
    """Why the gold titles cannot be mapped to one non-empty paragraph each ("" when they can)."""
    texts: dict[str, set[str]] = {}
    for title, text in paragraphs:
        texts.setdefault(title, set()).add(text.strip())
    for title in gold:
        if title not in texts:
            return f"gold title not in context: {title!r}"
        if len(texts[title]) > 1:
            return f"gold title ambiguous in context: {title!r} has {len(texts[title])} texts"
        if not next(iter(texts[title])):
            return f"empty gold paragraph: {title!r}"
    return ""


def parse_context_record(rec: Mapping[str, Any], index: int) -> ContextRecord | str:
    """One HotpotQA record → :class:`ContextRecord`, or the reason it is rejected.

    Args:
        rec: The parsed JSON object.
        index: Its 0-based index in the file.

    Returns:
        The record, or a reason string ("missing field: context", "bad field: …", …).
    """
    question = rec.get("question")
    if not isinstance(question, str) or not question.strip():
        return "missing field: question"
    answer = rec.get("answer")
    if isinstance(answer, bool) or (isinstance(answer, float) and not math.isfinite(answer)):
        # JSON true / NaN / Infinity would become the gold strings "True", "nan", "inf"
        return f"bad field: answer must be a string or a finite number, got {answer!r}"
    answers = answer_tuple(answer) if isinstance(answer, (str, int, float)) else ()
    if not answers:
        return "no gold answer"
    for key in ("context", "supporting_facts"):
        if key not in rec:
            return f"missing field: {key}"
    paragraphs = _paragraphs(_literal(rec["context"]))
    if isinstance(paragraphs, str):
        return paragraphs
    gold = _gold_titles(_literal(rec["supporting_facts"]))
    if isinstance(gold, str):
        return gold
    if why := _gold_problem(gold, paragraphs):
        return why
    qtype = rec.get("type")
    return ContextRecord(
        index=index,
        qid=str(rec.get("_id", rec.get("id", index))),
        question=question,
        answers=answers,
        qtype=qtype if isinstance(qtype, str) else "",
        gold_titles=gold,
        paragraphs=paragraphs,
    )


def read_hotpot_context(path: str | Path, strict: bool = False) -> LoadReport[ContextRecord]:
    """Read a HotpotQA-format JSON list; malformed records are rejected as ``file:index: reason``.

    Args:
        path: ``hotpot_train_v1.1.json`` or HippoRAG's ``hotpotqa_train.json``.
        strict: Raise :class:`~gta_verl.data.loaders.DataFormatError` on the first bad record.

    Returns:
        The records, with ``n_in == n_ok + len(rejected)``.
    """
    col: Collector[ContextRecord] = Collector(Path(path), strict)
    first: dict[str, int] = {}  # question id -> index of the record that holds it
    for i, rec in json_records(Path(path), "HotpotQA questions", col):
        parsed = parse_context_record(rec, i)
        if isinstance(parsed, str):
            col.reject(i, parsed)
        elif parsed.qid in first:
            col.reject(i, f"duplicate _id {parsed.qid!r}: first at record {first[parsed.qid]}")
        else:
            first[parsed.qid] = i
            col.add(parsed)
    return col.report


# --------------------------------------------------------------------------- sampling
def sample_report(report: LoadReport[T], n: int, seed: int) -> LoadReport[T]:
    """Keep a seeded uniform sample of ``n`` records (file order); the rest are rejected with a reason.

    Sampling is over the records that loaded, so malformed ones never take a slot. Counts
    reconcile: ``n_in = kept + rejected``. With ``n`` ≥ the records read, all are kept. The report
    is updated in place and returned.

    Args:
        report: A reader's report.
        n: Records to keep (≥ 1).
        seed: Seed of ``random.Random``; the same seed on the same file keeps the same records.
    """
    if n < 1:
        raise ValueError(f"--sample must be >= 1, got {n}")
    if report.n_ok <= n:
        return report
    keep = set(random.Random(seed).sample(range(report.n_ok), n))
    dropped = report.n_ok - n
    report.records = [r for i, r in enumerate(report.records) if i in keep]
    report.rejected += [Rejection(report.path, -1, f"not sampled: --sample {n} --seed {seed}")] * dropped
    return report


def head_report(report: LoadReport[T], n: int) -> LoadReport[T]:
    """Keep the first ``n`` (≥ 1) records; the rest are rejected ("over limit"). In place; returned."""
    if n < 1:
        raise ValueError(f"--limit must be >= 1, got {n}")
    if report.n_ok > n:
        over = report.n_ok - n
        report.records = report.records[:n]
        report.rejected += [Rejection(report.path, -1, f"over limit: --limit {n}")] * over
    return report


# --------------------------------------------------------------------------- corpus and QA
def _title_conflicts(records: Iterable[ContextRecord]) -> tuple[TitleConflict, ...]:
    texts: dict[str, set[str]] = {}
    where: dict[str, list[int]] = {}
    for rec in records:
        for title, text in rec.paragraphs:
            texts.setdefault(title, set()).add(text.strip())
            if not where.setdefault(title, []) or where[title][-1] != rec.index:
                where[title].append(rec.index)
    return tuple(TitleConflict(t, len(v), tuple(where[t])) for t, v in texts.items() if len(v) > 1)


def build_context_corpus(
    records: Sequence[ContextRecord], path: str = "", paragraphs: str = "all"
) -> ContextCorpus:
    """The records' context paragraphs, deduplicated by (title, text), first occurrence kept.

    The dedup key and doc id are those of the corpus readers (whitespace-stripped (title, text) key,
    ``make_doc_id`` of the text as written), so the corpus parquet, once read back by ``kb build``,
    has exactly these ids. Empty paragraphs are dropped (the readers would reject them).

    Args:
        records: Kept records, in file order.
        path: Input file named in the rejections.
        paragraphs: ``all`` (gold + distractors) or ``gold`` (supporting-fact paragraphs only,
            the paper's corpus size); see :data:`CORPUS_PARAGRAPHS`.
    """
    if paragraphs not in CORPUS_PARAGRAPHS:
        raise ValueError(f"paragraphs={paragraphs!r}; use one of {CORPUS_PARAGRAPHS}")
    ids: dict[tuple[str, str], str] = {}
    passages: list[Passage] = []
    rejected: list[Rejection] = []
    n = 0
    for rec in records:
        for title, text in rec.paragraphs:
            if paragraphs == "gold" and title not in rec.gold_titles:
                continue
            n += 1
            key = (title.strip(), text.strip())
            if not key[1]:
                rejected.append(Rejection(path, rec.index, f"empty text: context paragraph {title!r}"))
            elif key in ids:
                rejected.append(Rejection(path, rec.index, f"duplicate passage: {title!r} ({ids[key]})"))
            else:
                ids[key] = make_doc_id(title, text)
                passages.append(Passage(ids[key], title, text))
    return ContextCorpus(
        passages=tuple(passages),
        n_paragraphs=n,
        rejected=tuple(rejected),
        title_conflicts=_title_conflicts(records),
        ids=ids,
    )


def context_examples(
    records: Sequence[ContextRecord],
    corpus: ContextCorpus,
    data_source: str = "hotpotqa",
    split: str = "train",
) -> list[QAExample]:
    """One :class:`QAExample` per record; gold = its supporting-fact paragraphs as corpus doc ids.

    Args:
        records: Records whose paragraphs built ``corpus``.
        corpus: :func:`build_context_corpus` of (a superset of) ``records``.
        data_source: verl ``data_source`` of every row.
        split: ``extra_info.split`` of every row.
    """
    by_id = {p.doc_id: p for p in corpus.passages}
    out = []
    for rec in records:
        own: dict[str, str] = {}
        for title, text in rec.paragraphs:
            own.setdefault(title, text)  # a repeated gold title has one text (checked when parsed)
        gold = [corpus.doc_id(t, own[t]) for t in rec.gold_titles]
        out.append(
            QAExample(
                qid=rec.qid,
                question=rec.question,
                answers=rec.answers,
                supporting_doc_ids=tuple(gold),
                hops=len(gold),
                data_source=data_source,
                split=split,
                supporting_texts=tuple(by_id[d].contents for d in gold),
            )
        )
    return out


def qa_report(records: LoadReport[ContextRecord], examples: Sequence[QAExample]) -> LoadReport[QAExample]:
    """The QA examples with the record report's counts and rejections (for ``prepare_qa``)."""
    return LoadReport(
        path=records.path, records=list(examples), rejected=list(records.rejected), n_in=records.n_in
    )
