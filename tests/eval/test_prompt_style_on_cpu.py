"""``prompt_style``: a row's prompt rebuilt from its question (eval and the CPU recipes' parquet files)."""

from __future__ import annotations

import pandas as pd
import pytest

from gta_verl.eval.runner import EvalSettings, restyle_prompt
from gta_verl.protocol import build_fewshot_prompt


def _row(question: str) -> dict:
    return {
        "prompt": [{"role": "user", "content": f"old prompt. Question: {question}\n"}],
        "reward_model": {"ground_truth": {"target": ["x"]}},
        "extra_info": {"question": question, "qid": "q1"},
    }


def test_restyle_rebuilds_the_prompt_from_the_question():
    row = restyle_prompt(_row("Who wrote Hamlet?"), "fewshot")
    assert row["prompt"] == [{"role": "user", "content": build_fewshot_prompt("Who wrote Hamlet?")}]
    assert row["extra_info"]["qid"] == "q1"  # everything else kept
    with pytest.raises(ValueError, match="no question"):
        restyle_prompt({"prompt": [], "extra_info": {}}, "fewshot")


def test_settings_pin_the_style_and_old_runs_stay_resumable():
    assert EvalSettings(policy="p", prompt_style="fewshot").to_dict()["prompt_style"] == "fewshot"
    assert "prompt_style" not in EvalSettings(policy="p").to_dict()
    with pytest.raises(ValueError, match="prompt_style='chat'"):
        EvalSettings(policy="p", prompt_style="chat")


def test_prompt_rows_parquet(tmp_path):
    from gta_verl.cpu.prepare import prompt_style_parquet

    src = tmp_path / "qa.parquet"
    pd.DataFrame([_row("Who wrote Hamlet?"), _row("Where is Votkinsk?")]).to_parquet(src)
    out = prompt_style_parquet(src, "fewshot")
    assert out.name == "qa.fewshot.parquet"
    rows = pd.read_parquet(out).to_dict("records")
    assert [r["prompt"][0]["content"].rsplit("Question: ", 1)[1] for r in rows] == [
        "Who wrote Hamlet?\n",
        "Where is Votkinsk?\n",
    ]
