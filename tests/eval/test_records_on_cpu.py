"""Records parquet: round trip, chunked atomic appends, resume without duplicates or losses."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gta_verl import SCHEMA_VERSION
from gta_verl.eval.records import EvalRecord, RecordsError, RecordWriter, read_records
from tests.eval.test_metrics_on_cpu import A, B, C, D


def _er(rollout, i=0):
    return EvalRecord(
        rollout=rollout.__class__(**{**rollout.to_dict(), "sample_idx": i}),
        prompt_tokens=7,
        retrieval_latency_ms=(1.5,) * rollout.num_searches,
        response_text="r",
    )


def test_round_trip_is_lossless(tmp_path):
    recs = [_er(r) for r in (A, B, C, D)]
    with RecordWriter(tmp_path / "records", chunk_size=3) as w:
        w.add_all(recs)
    assert sorted(p.name for p in (tmp_path / "records").glob("part-*")) == [
        "part-000000.parquet",
        "part-000001.parquet",
    ]
    back = read_records(tmp_path / "records")
    assert back == recs  # tuples, None answer, nested doc ids all survive
    df = pd.read_parquet(tmp_path / "records")  # a plain parquet dataset for users
    assert len(df) == 4 and set(df["schema_version"]) == {SCHEMA_VERSION}
    assert df.set_index("qid").loc["a", "em"] == 1.0


def test_resume_skips_done_keys_and_keeps_everything(tmp_path):
    d = tmp_path / "records"
    first = [_er(A, 0), _er(A, 1), _er(B, 0)]
    with pytest.raises(RuntimeError):
        with RecordWriter(d, chunk_size=10) as w:
            w.add_all(first)
            raise RuntimeError("crash after three rollouts")  # buffered rows still flushed
    w2 = RecordWriter(d, chunk_size=10)
    assert w2.done_keys() == {("musique", "a", 0), ("musique", "a", 1), ("musique", "b", 0)}
    with w2:
        w2.add_all([_er(A, 0), _er(B, 0), _er(C, 0), _er(D, 0), _er(A, 2)])
    assert (w2.n_written, w2.n_skipped) == (3, 2)
    keys = [r.key for r in read_records(d)]
    assert len(keys) == len(set(keys)) == 6


def test_schema_version_mismatch_is_actionable(tmp_path):
    d = tmp_path / "records"
    RecordWriter(d).flush()
    (d / "_meta.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(RecordsError, match="new --out directory"):
        RecordWriter(d)
    with pytest.raises(RecordsError, match="no _meta.json"):
        read_records(tmp_path)


def test_per_query_ids_round_trip_and_older_records_read_without_them(tmp_path):
    from tests.eval.test_metrics_on_cpu import E

    rec = EvalRecord(rollout=E, response_text="r")
    with RecordWriter(tmp_path / "records") as w:
        w.add(rec)
    (back,) = read_records(tmp_path / "records")
    assert back.rollout.turn_query_doc_ids == ((("d1", "x"), ("y",)), (("d2",),))
    df = pd.read_parquet(tmp_path / "records")
    assert df["zero_target_queries"].tolist() == [1.0]  # query "b" found nothing new
    # A part written before the column existed reads with the default (one query per turn).
    old = df.drop(columns=["turn_query_doc_ids"])
    old.to_parquet(tmp_path / "records" / "part-000000.parquet")
    (back,) = read_records(tmp_path / "records")
    assert back.rollout.turn_query_doc_ids == () and back.rollout.turn_doc_ids == E.turn_doc_ids
