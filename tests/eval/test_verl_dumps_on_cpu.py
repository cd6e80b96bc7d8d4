"""Rebuilding rollout records from a verl 0.9.1 validation dump (``<step>.jsonl``)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gta_verl.data.ids import make_doc_id
from gta_verl.data.schema import make_ground_truth
from gta_verl.data.types import RetrievalHit
from gta_verl.eval.metrics import score_record
from gta_verl.eval.verl_dumps import question_index, read_verl_dump
from gta_verl.protocol import build_messages, build_user_prompt, format_observation

DOCS = {
    "p1": ("Paris (film)", "A 2008 French film.\nDirected by Cédric Klapisch."),
    "p2": ("Klapisch", "Cédric Klapisch was born in Neuilly-sur-Seine."),
    "x": ("Other", "Unrelated."),
}
ID = {k: make_doc_id(*v) for k, v in DOCS.items()}


def _hits(*keys):
    return [RetrievalHit(ID[k], DOCS[k][0], DOCS[k][1], 0.5, "graph") for k in keys]


def _prompt(q):  # what verl decodes: chat template with special tokens skipped
    return f"system\nYou are Qwen.\nuser\n{build_user_prompt(q)}\nassistant\n"


def _write_dump(directory):
    gt = make_ground_truth(
        ["Neuilly-sur-Seine"], [ID["p1"], ID["p2"]], [f"{t}\n{x}" for t, x in (DOCS["p1"], DOCS["p2"])]
    )
    full = (
        "<think>find film</think><search> Paris film director </search>"
        + format_observation(_hits("p1", "x"))
        + "<search>Klapisch birthplace</search>"
        + format_observation(_hits("p2"))
        + "<answer> Neuilly-sur-Seine </answer>"
    )
    failed = "<search>q</search>" + format_observation([], error="timeout") + "no answer"
    lines = [
        {
            "input": _prompt("Where was the director of Paris born"),
            "output": full,
            "gts": gt,
            "score": 2.5,
            "step": 7,
            "reward": 2.5,
            "acc": 1.0,
            "num_searches": 2,
        },
        {
            "input": _prompt("Where was the director of Paris born"),
            "output": failed,
            "gts": gt,
            "score": -1.1,
            "step": 7,
            "reward": -1.1,
            "acc": 0.0,
            "num_searches": 1,
        },
        {"input": _prompt("Where was the director of Paris born"), "output": "x", "step": 7},  # no gts
    ]
    directory.mkdir()
    (directory / "3.jsonl").write_text("{}\n")
    (directory / "7.jsonl").write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n")


def test_read_dump_rebuilds_records(tmp_path):
    _write_dump(tmp_path / "val")
    res = read_verl_dump(tmp_path / "val")  # latest step
    assert res.step == 7 and res.n_in == 3 and len(res.records) == 2
    assert len(res.rejected) == 1 and "7.jsonl:3" in res.rejected[0] and "gts" in res.rejected[0]
    a, b = (r.rollout for r in res.records)
    assert a.question == "Where was the director of Paris born?"
    assert a.turn_queries == ("Paris film director", "Klapisch birthplace")
    assert a.turn_doc_ids == ((ID["p1"], ID["x"]), (ID["p2"],))
    assert a.answer == "Neuilly-sur-Seine" and (a.sample_idx, b.sample_idx) == (0, 1)
    assert b.turn_doc_ids == ((),) and b.retrieval_errors == 1 and b.answer is None
    m = score_record(a)
    assert (m.em, m.complete_chain, m.zero_target_turns, m.route) == (1.0, 1.0, 0.0, "C+P+")
    assert a.retrieved_texts == tuple(f"{t}\n{x}" for t, x in (DOCS["p1"], DOCS["x"], DOCS["p2"]))
    assert score_record(b).complete_chain == 0.0
    assert read_verl_dump(tmp_path / "val", step=3).rejected  # '{}' lacks the required keys
    with pytest.raises(FileNotFoundError, match="steps present"):
        read_verl_dump(tmp_path / "val", step=5)


def test_question_index_joins_parquet_metadata(tmp_path):
    _write_dump(tmp_path / "val")
    q = "Where was the director of Paris born"
    pq = tmp_path / "test.parquet"
    pd.DataFrame(
        [
            {
                "data_source": "musique",
                "prompt": build_messages(q),
                "extra_info": {"question": q, "hops": 2, "qid": "2hop__1"},
            }
        ]
    ).to_parquet(pq)
    res = read_verl_dump(tmp_path / "val" / "7.jsonl", questions=question_index([pq]))
    got = {(r.rollout.data_source, r.rollout.hops, r.rollout.qid) for r in res.records}
    assert got == {("musique", 2, "2hop__1")}


def test_cli_scores_a_dump(tmp_path, capsys):
    from gta_verl.cli import main

    _write_dump(tmp_path / "val")
    assert main(["eval", "--from-verl-dump", str(tmp_path / "val"), "--out", str(tmp_path / "out")]) == 0
    assert "scored 2 of 3 dumped rollouts (step 7); 1 rejected" in capsys.readouterr().out
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["overall"]["n"] == 2 and rep["overall"]["complete_traj_cov"] == 0.5
    assert main(["eval", "--from-verl-dump", str(tmp_path / "val"), "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["overall"]["n"] == 2  # no duplicates
    # 3.jsonl holds only "{}": nothing to score, refused before it can touch the other run's records
    assert (
        main(["eval", "--from-verl-dump", str(tmp_path / "val" / "3.jsonl"), "--out", str(tmp_path / "out")])
        == 2
    )
    assert "none of its 1 lines could be scored" in capsys.readouterr().err
    (tmp_path / "val" / "3.jsonl").write_text((tmp_path / "val" / "7.jsonl").read_text())
    with pytest.raises(ValueError, match="another run"):
        main(["eval", "--from-verl-dump", str(tmp_path / "val" / "3.jsonl"), "--out", str(tmp_path / "out")])


def test_cut_off_passage_and_parenthesized_title_resolve_with_kb_index():
    from gta_verl.eval.verl_dumps import parse_observation

    tricky = ("Foo (a) b", "Text of foo.")
    index = {DOCS["p1"][0]: [(ID["p1"], DOCS["p1"][1])], tricky[0]: [("dfoo", tricky[1])]}
    body = format_observation(_hits("p1") + [RetrievalHit("dfoo", *tricky, 0.1, "dense")])
    body = body[body.index("<info>") + 6 : body.index("</info>")]
    docs, failed = parse_observation(body, index)
    assert [d for d, _, _ in docs] == [ID["p1"], "dfoo"] and not failed
    cut = body[: body.index("Directed by") + 5]  # the loop's max_obs_tokens cut inside passage 1
    (doc,), _ = parse_observation(cut, index)
    assert doc == (ID["p1"], DOCS["p1"][0], DOCS["p1"][1])  # full text recovered for P
    (doc,), _ = parse_observation(cut)  # no KB: content hash of what was shown
    assert doc[0] == make_doc_id(DOCS["p1"][0], "A 2008 French film.\nDirec")


def test_cli_dump_with_every_line_rejected_is_one_line_and_writes_nothing(tmp_path, capsys):
    """Must not crash with ``KeyError: 'em'`` nor leave partial output."""
    from gta_verl.cli import main

    d = tmp_path / "val"
    d.mkdir()
    (d / "5.jsonl").write_text(json.dumps({"input": "x", "output": "y", "step": 5}) + "\n")  # no gts
    assert main(["eval", "--from-verl-dump", str(d), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none of its 1 lines could be scored" in err[0] and "5.jsonl" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["wrong columns", "not parquet"])
def test_cli_data_without_question_columns_is_one_line(tmp_path, capsys, kind):
    # Before: a --data file without prompt/extra_info was ignored (rc 0, rollouts left "unknown").
    from gta_verl.cli import main

    _write_dump(tmp_path / "val")
    wrong = tmp_path / "wrong.parquet"
    if kind == "wrong columns":
        pd.DataFrame({"id": [1, 2], "text": ["a", "b"]}).to_parquet(wrong)
    else:
        wrong.write_text("id,text\n1,a\n")
    args = ["eval", "--from-verl-dump", str(tmp_path / "val"), "--data", str(wrong)]
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(wrong) in err[0] and "--data" in err[0], err
    assert not (tmp_path / "out").exists()
