"""verl 0.9.1's V1 validation dump (written by verl's own writer) is read back by gta-verl eval,
and two evaluation reports are compared metric by metric."""

from __future__ import annotations

import json
import math

import pytest

from gta_verl.eval.verl_dumps import compare_reports, read_verl_dump

trainer_base = pytest.importorskip("verl.trainer.ppo.v1.trainer_base")

PROMPT = (
    "system\nYou are a helpful assistant.\nuser\nAnswer the question.\nQuestion: Who directed Tenet?\n"
    "assistant\n"
)
OUTPUT = (
    "I should search. <search> Tenet director </search>\n\n<info>Doc 1(Title: Tenet) Tenet is a film "
    "directed by Christopher Nolan.</info>\n\nSo <answer> Christopher Nolan </answer>"
)


def test_reads_the_file_verl_v1_writes(tmp_path):
    gts = {
        "target": ["Christopher Nolan"],
        "target_doc_ids": ["d1"],
        "support_texts": ["Tenet\nTenet is ..."],
    }
    # verl's own writer, as PPOTrainer._validate calls it for trainer.val_only (global step 0).
    trainer_base.PPOTrainer._write_generations(
        inputs=[PROMPT, PROMPT],
        outputs=[OUTPUT, "I don't know."],
        gts=[gts, gts],
        scores=[1.0, 0.0],
        reward_extra_infos_dict={"acc": [1.0, 0.0], "retrieval_errors": [0, 0], "uid": ["u_0_0", "u_1_0"]},
        dump_path=str(tmp_path),
        global_steps=0,
    )
    res = read_verl_dump(tmp_path)
    assert res.step == 0 and res.n_in == 2 and not res.rejected
    first, second = (r.rollout for r in res.records)
    assert first.question == "Who directed Tenet?"
    assert first.turn_queries == ("Tenet director",) and first.answer == "Christopher Nolan"
    assert first.gold_answers == ("Christopher Nolan",) and first.retrieval_errors == 0
    assert second.turn_queries == () and second.answer is None
    # the two rollouts of one question get sample indices 0 and 1
    assert [r.rollout.sample_idx for r in res.records] == [0, 1]


def _report(path, **overall):
    path.mkdir()
    (path / "report.json").write_text(json.dumps({"overall": overall}))
    return path


def test_compare_reports(tmp_path):
    a = _report(tmp_path / "a", n=8.0, em=0.25, f1=0.5, target_doc_cov=None)
    same = _report(tmp_path / "b", n=8.0, em=0.25, f1=0.5, target_doc_cov=None)
    assert compare_reports(a, same) == []
    other = _report(tmp_path / "c", n=8.0, em=0.125, f1=0.5, target_doc_cov=math.nan)
    # em differs (0.25 vs 0.125); target_doc_cov missing on one side
    assert compare_reports(a, other) == ["em: 0.25 vs 0.125", "target_doc_cov: None vs nan"]
