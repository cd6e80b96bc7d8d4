"""eval-retrieval / eval inputs: gold ids checked against the KB, wrong files named in one line."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from gta_verl.data.loaders import DataFormatError
from gta_verl.data.schema import make_ground_truth
from gta_verl.eval.runner import load_rows
from gta_verl.retrieval.evaluate import load_qa
from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb


@pytest.fixture(scope="module")
def passages():
    return make_toy_kb(HashEmbedder()).passages


def _qa(path: Path, golds: list[list[str]]) -> Path:
    pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": "q"}]] * len(golds),
            "reward_model": [{"style": "rule", "ground_truth": make_ground_truth(["a"], g)} for g in golds],
            "extra_info": [{"qid": f"q{i}", "question": "q", "hops": 2} for i in range(len(golds))],
        }
    ).to_parquet(path)
    return path


def test_questions_without_a_gold_document_in_the_kb_are_rejected(tmp_path, passages, caplog) -> None:
    d0, d1 = passages[0].doc_id, passages[1].doc_id
    path = _qa(tmp_path / "qa.parquet", [[d0, d1], ["other-corpus-1"], [d1, "other-corpus-2"], ["x", "y"]])
    with caplog.at_level(logging.WARNING):
        qa = load_qa(path, passages)
    assert [q.qid for q in qa] == ["q0", "q2"]  # q1, q3: no gold document in the KB
    assert qa[1].supporting_doc_ids == (d1, "other-corpus-2")  # the missing one still counts as a miss
    assert "2 of 4 questions rejected: no gold document in the KB" in caplog.text
    with pytest.raises(DataFormatError, match="none of its 2 questions has a gold document in the KB"):
        load_qa(_qa(tmp_path / "none.parquet", [["x"], ["y"]]), passages)


def test_wrong_files_are_one_line_errors_naming_them(tmp_path, passages) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet at all")
    other = tmp_path / "corpus.parquet"
    pd.DataFrame({"doc_id": ["a"], "text": ["t"]}).to_parquet(other)
    for fn in (lambda p: load_qa(p, passages), lambda p: load_rows([p])):
        with pytest.raises(DataFormatError, match=r"junk\.parquet: not a readable parquet file"):
            fn(junk)
        with pytest.raises(DataFormatError, match=r"corpus\.parquet: not a verl QA parquet"):
            fn(other)
        with pytest.raises(DataFormatError, match=r"missing\.parquet"):
            fn(tmp_path / "missing.parquet")
