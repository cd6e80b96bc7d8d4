"""`gta-verl kb check-coverage`: a Stage-II KB must hold its questions' gold paragraphs."""

from __future__ import annotations

import doctest

import pandas as pd
import pytest

from gta_verl.cli import main
from gta_verl.data.schema import make_ground_truth
from gta_verl.kb import coverage
from gta_verl.kb.coverage import gold_coverage
from gta_verl.kb.store import save_kb
from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb


def test_doctest_arithmetic() -> None:
    assert doctest.testmod(coverage).failed == 0


def test_hand_computed_coverage() -> None:
    # (2/2 + 1/3 + 0/1) / 3 = 4/9; duplicates count once; the gold-less question is apart
    r = gold_coverage([["a", "b", "a"], ["a", "x", "y"], ["z"], []], {"a", "b", "c"})
    assert abs(r.mean_coverage - 4 / 9) < 1e-12
    assert (r.n_questions, r.n_without_gold, r.n_fully_covered, r.n_uncovered) == (4, 1, 1, 1)


def test_cli_reports_and_refuses_below_the_threshold(tmp_path, capsys) -> None:
    kb = make_toy_kb(HashEmbedder())
    save_kb(kb, tmp_path / "kb")
    d = [p.doc_id for p in kb.passages]
    qa = tmp_path / "qa.parquet"
    golds = [[d[0], d[1]], [d[2], "not-in-kb"]]  # coverage (1 + 0.5) / 2 = 0.75
    pd.DataFrame(
        {"reward_model": [{"style": "rule", "ground_truth": make_ground_truth(["a"], g)} for g in golds]}
    ).to_parquet(qa)
    assert main(["kb", "check-coverage", "--kb", str(tmp_path / "kb"), "--qa", str(qa)]) == 2
    out = capsys.readouterr()
    assert "| 2 | 2 | 0.750 | 1 | 0 |" in out.out and "75.0% of the questions' gold paragraphs" in out.err
    assert main(["kb", "check-coverage", "--kb", str(tmp_path / "kb"), "--qa", str(qa), "--min", "0.7"]) == 0


def test_questions_without_gold_ids_are_reported_and_fail_the_gate_when_the_majority(
    tmp_path, capsys
) -> None:
    kb = make_toy_kb(HashEmbedder())
    save_kb(kb, tmp_path / "kb")
    d = [p.doc_id for p in kb.passages]
    qa = tmp_path / "qa.parquet"
    # One question whose gold paragraph is in the KB, 99 without gold ids: the mean over questions
    # with gold ids is 1/1 = 1.0 ≥ 0.95, but it speaks for 1 question of 100 (99 > 100 / 2).
    golds = [[d[0]]] + [[] for _ in range(99)]
    pd.DataFrame(
        {"reward_model": [{"style": "rule", "ground_truth": make_ground_truth(["a"], g)} for g in golds]}
    ).to_parquet(qa)
    args = ["kb", "check-coverage", "--kb", str(tmp_path / "kb"), "--qa", str(qa)]
    assert main(args) == 2
    out = capsys.readouterr()
    assert "| 100 | 1 | 1.000 | 1 | 0 |" in out.out
    assert "99 of 100 questions have no gold ids (not in the mean)" in out.err
    assert "--allow-without-gold" in out.err
    assert main([*args, "--allow-without-gold"]) == 0
    assert "99 of 100 questions have no gold ids" in capsys.readouterr().err


def test_a_minority_without_gold_ids_passes_and_is_reported() -> None:
    # 2 of 4 without gold ids is not a majority (2·2 = 4, not > 4); 3 of 4 is (6 > 4).
    assert gold_coverage([["a"], ["a"], [], []], {"a"}).mostly_without_gold is False
    assert gold_coverage([["a"], [], [], []], {"a"}).mostly_without_gold is True


def _qa(tmp_path, rows) -> str:
    path = tmp_path / "qa.parquet"
    pd.DataFrame({"reward_model": rows}).to_parquet(path)
    return str(path)


def test_cli_names_the_file_and_row_of_a_malformed_row(tmp_path, capsys) -> None:
    # Before: a traceback from parse_ground_truth naming neither the file nor the row.
    kb = make_toy_kb(HashEmbedder())
    save_kb(kb, tmp_path / "kb")
    # One parquet column type for all rows: the good ones have no ids (null), the bad one a string.
    good = {"style": "rule", "ground_truth": {"target": "a", "target_doc_ids": None}}
    bad = {"style": "rule", "ground_truth": {"target": "a", "target_doc_ids": kb.passages[0].doc_id}}
    qa = _qa(tmp_path, [good, good, bad])
    assert main(["kb", "check-coverage", "--kb", str(tmp_path / "kb"), "--qa", qa]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{qa}: row 2: malformed reward_model" in err, err


def test_cli_min_must_be_a_fraction(tmp_path, capsys) -> None:
    # Before: --min nan passed any KB (every comparison with NaN is false), --min 95 failed every one.
    for value in ("nan", "95", "-0.1", "x"):
        with pytest.raises(SystemExit) as exc:
            main(["kb", "check-coverage", "--kb", "k", "--qa", "q", "--min", value])
        assert exc.value.code == 2
        assert "--min" in capsys.readouterr().err


def test_a_qa_file_without_rows_is_named_not_reported_as_zero_coverage(tmp_path, capsys) -> None:
    # Before: "0.0% of the questions' gold paragraphs", as if the KB lacked every one of them.
    save_kb(make_toy_kb(HashEmbedder()), tmp_path / "kb")
    qa = tmp_path / "empty.parquet"
    pd.DataFrame({"reward_model": pd.Series([], dtype=object)}).to_parquet(qa)
    assert main(["kb", "check-coverage", "--kb", str(tmp_path / "kb"), "--qa", str(qa)]) == 2
    err = capsys.readouterr().err
    assert err == f"gta-verl: error: {qa}: no rows, so no coverage to check\n"
