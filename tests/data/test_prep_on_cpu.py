"""Data prep: corpus + verl QA parquet from the bundled files; counts reconcile; scripts run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

from gta_verl.data.prep import prepare_answers_only, prepare_corpus, prepare_musique
from gta_verl.data.schema import parse_ground_truth

REPO = Path(__file__).resolve().parents[2]


def test_prepare_musique(tmp_path, musique_qa):
    paths = prepare_musique(tmp_path, verbose=False)
    corpus = pd.read_parquet(paths["corpus"])
    qa = pd.read_parquet(paths["qa"])
    assert list(corpus.columns) == ["doc_id", "title", "text"] and len(corpus) == 1890
    assert len(qa) == 100
    row = qa.iloc[0]
    answers, doc_ids, texts = parse_ground_truth(row["reward_model"]["ground_truth"])
    assert answers == list(musique_qa[0].answers) and doc_ids == list(musique_qa[0].supporting_doc_ids)
    assert set(doc_ids) <= set(corpus["doc_id"]) and texts[0].startswith(
        "Journal of Psychotherapy Integration"
    )
    assert row["data_source"] == "musique" and row["extra_info"]["hops"] == 2
    assert row["prompt"][-1]["role"] == "user" and musique_qa[0].question in row["prompt"][-1]["content"]
    assert list(row["extra_info"]["supporting_doc_ids"]) == doc_ids


def test_rejections_reconcile_and_limit(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text('{"contents": "\\"A\\"\\nalpha"}\n{"contents": "\\"A\\"\\nalpha"}\nbroken\n')
    _passages, res = prepare_corpus(src, tmp_path / "c.parquet", verbose=False)
    assert (res.n_in, res.n_written, len(res.rejected)) == (3, 1, 2) and res.reconciles()
    assert "2 rejected" in res.summary() and "duplicate passage" in res.summary()
    res = prepare_answers_only(
        "nq_open",
        REPO / "assets/nq_open/NQ-open.dev.jsonl",
        tmp_path / "nq.parquet",
        "nq",
        "dev",
        limit=50,
        verbose=False,
    )
    assert res.n_in == 3610 and res.n_written == 50 and res.reconciles()
    assert len(pd.read_parquet(tmp_path / "nq.parquet")) == 50


def test_scripts_run(tmp_path):
    qa = tmp_path / "q.jsonl"
    qa.write_text('{"id": "1", "question": "who?", "golden_answers": ["X"], "metadata": {}}\n')
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep/flashrag.py"),
            "--input",
            str(qa),
            "--out",
            str(tmp_path / "fr"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "1 rows in, 1 written, 0 rejected [ok]" in out.stdout
    out = subprocess.run(
        [sys.executable, str(REPO / "data_prep/hipporag_sample.py"), "--out", str(tmp_path / "hs")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "3 rows in, 3 written" in out.stdout and (tmp_path / "hs/hipporag_sample_test.parquet").exists()
