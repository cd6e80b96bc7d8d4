"""``gold_evidence``: the evaluation sees each question as PathRouter's teacher does (S_gt before it)."""

from __future__ import annotations

import pandas as pd
import pytest

from gta_verl.data.schema import make_ground_truth
from gta_verl.eval.runner import EvalSettings, load_rows, with_gold_evidence


def _row(support: list[str]) -> dict:
    return {
        "prompt": [{"role": "user", "content": "Answer with <answer>. Question: Who wrote Hamlet?\n"}],
        "reward_model": {"ground_truth": make_ground_truth(["Shakespeare"], ["d1"], support)},
        "extra_info": {"question": "Who wrote Hamlet?", "qid": "q1"},
    }


def test_the_gold_passages_stand_before_the_question_line():
    row = with_gold_evidence(_row(["Hamlet\nA tragedy by William Shakespeare.", "Globe\nA theatre."]))
    # the instructions, a blank line, the evidence block, the student's own " " before "Question:"
    # (preceded by the newline the block needs), then the question line unchanged
    assert row["prompt"] == [
        {
            "role": "user",
            "content": "Answer with <answer>.\n\n"
            "Gold supporting evidence for this question:\n"
            "Doc 1(Title: Hamlet) A tragedy by William Shakespeare.\n"
            "Doc 2(Title: Globe) A theatre.\n"
            " Question: Who wrote Hamlet?\n",
        }
    ]
    assert row["extra_info"] == {"question": "Who wrote Hamlet?", "qid": "q1"}  # the rest kept


def test_a_row_without_gold_passages_is_refused_by_its_id():
    with pytest.raises(ValueError, match=r"row 'q1': --gold-evidence needs .*support_texts"):
        with_gold_evidence(_row([]))
    with pytest.raises(ValueError, match="row 'q1'"):
        with_gold_evidence(_row(["   "]))


def test_rows_read_back_from_parquet_take_the_evidence(tmp_path):
    path = tmp_path / "qa.parquet"
    pd.DataFrame([_row(["T\nbody"])]).to_parquet(path)
    (row,) = load_rows([path])
    content = with_gold_evidence(row)["prompt"][0]["content"]
    assert "Doc 1(Title: T) body\n Question: Who wrote Hamlet?\n" in content


def test_settings_pin_it_and_earlier_runs_stay_resumable():
    assert EvalSettings(policy="p", gold_evidence=True).to_dict()["gold_evidence"] is True
    assert "gold_evidence" not in EvalSettings(policy="p").to_dict()


def test_eval_and_signal_take_the_option():
    import argparse

    from gta_verl.eval.cli import add_parser, settings_from_args

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_parser(sub)
    argv = ["eval", "--policy", "p", "--data", "x.parquet", "--kb", "kb"]
    assert settings_from_args(parser.parse_args(argv)).gold_evidence is False
    args = parser.parse_args([*argv, "--gold-evidence"])
    assert settings_from_args(args).gold_evidence is True
