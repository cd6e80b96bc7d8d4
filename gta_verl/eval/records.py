"""Per-rollout evaluation records on disk: a resumable, append-only parquet dataset.

Layout of ``<out>/records/``::

    _meta.json              {"schema_version": N, "kind": "gta_verl.eval.records"}
    part-000000.parquet     one chunk of rows (written to a temp file, then renamed)
    part-000001.parquet     ...

Every part is complete or absent (atomic rename), so a run killed mid-way loses at
most the chunk in memory. A rerun reads the keys already on disk and skips them:
the key of a row is ``(data_source, qid, sample_idx)`` (qids are only unique within
a dataset). The directory is a regular parquet dataset, so
``pandas.read_parquet("<out>/records")`` opens it too.

Columns: the :class:`~gta_verl.data.types.RolloutRecord` fields (question, qid,
data_source, hops, sample_idx, per-turn queries and doc ids, answer, gold answers
and documents, retrieved and gold texts, errors, tokens), the cost fields of
:class:`EvalRecord` (prompt tokens, per-search retrieval latency, decoded response)
and the per-record metrics of :class:`~gta_verl.eval.metrics.RecordMetrics`
(for browsing; reports recompute them from the rollout fields).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gta_verl import SCHEMA_VERSION
from gta_verl.data.io import write_table_atomic
from gta_verl.data.schema import (
    parse_answer,
    parse_count,
    parse_turn_doc_ids,
    parse_turn_queries,
    parse_turn_query_doc_ids,
)
from gta_verl.data.types import RolloutRecord
from gta_verl.eval.metrics import RecordMetrics, score_record

logger = logging.getLogger(__name__)

META_FILE = "_meta.json"
RECORDS_KIND = "gta_verl.eval.records"
RecordKey = tuple[str, str, int]

_STR, _INT, _F = pa.string(), pa.int64(), pa.float64()
_LSTR = pa.list_(pa.string())
ROLLOUT_SCHEMA: dict[str, pa.DataType] = {
    "question": _STR,
    "gold_answers": _LSTR,
    "target_doc_ids": _LSTR,
    "turn_queries": _LSTR,
    "turn_doc_ids": pa.list_(_LSTR),
    "answer": _STR,
    "retrieval_errors": _INT,
    "invalid_actions": _INT,
    "response_tokens": _INT,
    "data_source": _STR,
    "hops": _INT,
    "qid": _STR,
    "sample_idx": _INT,
    "retrieved_texts": _LSTR,
    "gold_texts": _LSTR,
    "turn_query_doc_ids": pa.list_(pa.list_(_LSTR)),
}
EXTRA_SCHEMA: dict[str, pa.DataType] = {
    "prompt_tokens": _INT,
    "generated_tokens": _INT,
    "retrieval_latency_ms": pa.list_(_F),
    "response_text": _STR,
}
METRIC_SCHEMA: dict[str, pa.DataType] = {
    "em": _F,
    "f1": _F,
    "answered": pa.bool_(),
    "correct": pa.bool_(),
    "path_overlap": _F,
    "route": _STR,
    "n_targets": _INT,
    "n_targets_hit": _INT,
    "complete_chain": _F,
    "zero_target_turns": _F,
    "zero_target_queries": _F,
    "sf_f1": _F,
    "num_searches": _INT,
}
SCHEMA = pa.schema(
    [("schema_version", pa.int32())]
    + list(ROLLOUT_SCHEMA.items())
    + list(EXTRA_SCHEMA.items())
    + list(METRIC_SCHEMA.items())
)


class RecordsError(ValueError):
    """Records on disk that this version cannot read; the message names the path."""


@dataclass(frozen=True)
class EvalRecord:
    """One evaluated rollout: the reward-side :class:`RolloutRecord` plus cost measurements."""

    rollout: RolloutRecord
    prompt_tokens: int = 0
    generated_tokens: int = 0
    """Policy-generated response tokens (mask 1); ``rollout.response_tokens`` also counts observations."""
    retrieval_latency_ms: tuple[float, ...] = ()
    """Wall time of each search call, in turn order (empty when not measured, e.g. verl dumps)."""
    response_text: str = ""
    """Decoded response (policy text + observations), for reading failures."""

    @property
    def key(self) -> RecordKey:
        return record_key(self.rollout)


def record_key(r: RolloutRecord) -> RecordKey:
    """Resume key ``(data_source, qid or question, sample_idx)``."""
    return (r.data_source, r.qid or r.question, int(r.sample_idx))


def to_row(record: EvalRecord, metrics: RecordMetrics | None = None) -> dict[str, Any]:
    """Flatten one record (and its metrics, computed if not given) into a parquet row."""
    m = metrics or score_record(record.rollout)
    row: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    r = record.rollout
    for name in ROLLOUT_SCHEMA:
        value = getattr(r, name)
        if name == "turn_doc_ids":
            value = [list(t) for t in value]
        elif name == "turn_query_doc_ids":
            value = [[list(q) for q in t] for t in value]
        elif isinstance(value, tuple):
            value = list(value)
        row[name] = value
    row["prompt_tokens"] = int(record.prompt_tokens)
    row["generated_tokens"] = int(record.generated_tokens)
    row["retrieval_latency_ms"] = [float(x) for x in record.retrieval_latency_ms]
    row["response_text"] = record.response_text
    for name in METRIC_SCHEMA:
        row[name] = getattr(m, name)
    return row


#: The columns that hold a ``gta/*`` field, each read by the field's one reader (:mod:`gta_verl.data.schema`).
#: ``turn_query_doc_ids`` is absent in records written before the column: ``()``.
_FIELD_READERS: dict[str, Callable[[Any, str], Any]] = {
    "turn_doc_ids": lambda v, name: tuple(tuple(t) for t in parse_turn_doc_ids(v, name)),
    "turn_query_doc_ids": lambda v, name: tuple(
        tuple(tuple(q) for q in t) for t in parse_turn_query_doc_ids(v, name)
    ),
    "turn_queries": lambda v, name: tuple(parse_turn_queries(v, name)),
    "answer": parse_answer,
    "retrieval_errors": parse_count,
    "invalid_actions": parse_count,
}


def from_row(row: dict[str, Any]) -> EvalRecord:
    """Inverse of :func:`to_row` (metrics columns are dropped; recompute them)."""
    kwargs: dict[str, Any] = {}
    for f in fields(RolloutRecord):
        value = row.get(f.name)
        if f.name in _FIELD_READERS:  # the reward's reader: a malformed value is refused, not reinterpreted
            value = _FIELD_READERS[f.name](value, f.name)
        elif isinstance(value, list):
            value = tuple(value)
        elif value is None and f.name != "answer":
            continue  # keep the dataclass default
        kwargs[f.name] = value
    return EvalRecord(
        rollout=RolloutRecord(**kwargs),
        prompt_tokens=int(row.get("prompt_tokens") or 0),
        generated_tokens=int(row.get("generated_tokens") or 0),
        retrieval_latency_ms=tuple(row.get("retrieval_latency_ms") or ()),
        response_text=row.get("response_text") or "",
    )


def _write_atomic(table: pa.Table, path: Path) -> None:
    write_table_atomic(table, path)


def _check_meta(directory: Path) -> None:
    meta_path = directory / META_FILE
    if not meta_path.is_file():
        raise RecordsError(f"{directory}: not an eval records directory (no {META_FILE})")
    meta = json.loads(meta_path.read_text())
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise RecordsError(
            f"{meta_path}: schema_version {meta.get('schema_version')} != {SCHEMA_VERSION} of this gta-verl; "
            "re-run the evaluation into a new --out directory"
        )


def _part_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("part-*.parquet"))


def iter_rows(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield raw rows from a records directory (or one records parquet file), in write order."""
    path = Path(path)
    if path.is_dir():
        _check_meta(path)
        files = _part_files(path)
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"{path}: no eval records here")
    for f in files:
        table = pq.read_table(f)
        if "schema_version" not in table.column_names:
            raise RecordsError(f"{f}: missing column schema_version; not written by gta_verl.eval")
        versions = set(table.column("schema_version").to_pylist())
        if versions - {SCHEMA_VERSION}:
            raise RecordsError(f"{f}: schema_version {sorted(versions)} != {SCHEMA_VERSION}")
        yield from table.to_pylist()


def read_records(path: Path | str) -> list[EvalRecord]:
    """Load every record of a records directory/file, first occurrence of each key wins."""
    out: list[EvalRecord] = []
    seen: set[RecordKey] = set()
    for row in iter_rows(path):
        rec = from_row(row)
        if rec.key in seen:
            continue
        seen.add(rec.key)
        out.append(rec)
    return out


class RecordWriter:
    """Append :class:`EvalRecord` s to ``directory`` in atomic chunks, skipping keys already there.

    Use as a context manager (the last partial chunk is flushed on exit, also on
    error, so finished rollouts survive a crash of a later one).

    Args:
        directory: The records directory (created if missing).
        chunk_size: Rows per part file.
    """

    def __init__(self, directory: Path | str, chunk_size: int = 64) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.directory = Path(directory)
        self.chunk_size = chunk_size
        self.directory.mkdir(parents=True, exist_ok=True)
        meta = self.directory / META_FILE
        if meta.exists():
            _check_meta(self.directory)
        else:
            meta.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "kind": RECORDS_KIND}))
        self._done: set[RecordKey] = {from_row(r).key for r in iter_rows(self.directory)}
        parts = _part_files(self.directory)
        self._next_part = int(parts[-1].stem.split("-")[1]) + 1 if parts else 0
        self._buffer: list[dict[str, Any]] = []
        self.n_written = 0
        self.n_skipped = 0

    def done_keys(self) -> set[RecordKey]:
        """Keys already on disk or buffered."""
        return set(self._done)

    def add(self, record: EvalRecord, metrics: RecordMetrics | None = None) -> bool:
        """Buffer one record; returns False (and counts it skipped) if its key exists."""
        if record.key in self._done:
            self.n_skipped += 1
            return False
        self._done.add(record.key)
        self._buffer.append(to_row(record, metrics))
        if len(self._buffer) >= self.chunk_size:
            self.flush()
        return True

    def add_all(self, records: Iterable[EvalRecord]) -> None:
        for r in records:
            self.add(r)

    def flush(self) -> None:
        """Write the buffered rows as the next part file (no-op when empty)."""
        if not self._buffer:
            return
        table = pa.Table.from_pylist(self._buffer, schema=SCHEMA)
        _write_atomic(table, self.directory / f"part-{self._next_part:06d}.parquet")
        self._next_part += 1
        self.n_written += len(self._buffer)
        self._buffer = []

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
