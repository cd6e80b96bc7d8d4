"""Retrieval evaluation: recall@k by hand, the CLI, and recall on the real MuSiQue KB."""

from __future__ import annotations

import json

import pytest

from gta_verl.bundled import MUSIQUE_QA
from gta_verl.data.types import QAExample
from gta_verl.retrieval.backends import open_retriever
from gta_verl.retrieval.evaluate import evaluate_retrieval, format_recall_table, load_qa, recall_at_k
from gta_verl.retrieval.retriever import GraphRetriever


def test_recall_at_k_hand_computed() -> None:
    assert recall_at_k(["a", "b", "c", "d"], ["b", "d"], 1) == 0.0
    assert recall_at_k(["a", "b", "c", "d"], ["b", "d"], 2) == 0.5
    assert recall_at_k(["a", "b", "c", "d"], ["b", "d"], 10) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], [], 1)


def test_evaluate_on_toy_kb(toy_kb, hash_embedder) -> None:
    p = {x.title: x.doc_id for x in toy_kb.passages}
    qa = [
        QAExample(
            "1",
            "Where was the president of France born?",
            ("Amiens",),
            (p["France"], p["Emmanuel Macron"]),
            2,
        ),
        QAExample("2", "capital of Japan", ("Tokyo",), (p["Tokyo"],), 1),
        QAExample("3", "no gold", ("x",)),
    ]
    res = evaluate_retrieval(GraphRetriever(toy_kb, hash_embedder), qa, ks=(1, 10))
    assert res["n_questions"] == 2 and res["n_skipped_no_gold"] == 1
    for mode in ("dense", "graph", "hybrid"):
        assert res["modes"][mode]["recall"]["R@10"] == 1.0  # 10 docs: everything is in the top 10
        assert set(res["modes"][mode]["by_hops"]) == {"1", "2"}
    table = format_recall_table(res)
    assert "| hybrid |" in table and "R@10" in table
    json.dumps(res)  # JSON-serializable


def test_eval_on_musique_kb(musique_kb_dir, musique_qa, embedder, capsys) -> None:
    retriever = open_retriever(musique_kb_dir, embedder=embedder)
    res = evaluate_retrieval(retriever, musique_qa, ks=(1, 2, 5, 10))
    with capsys.disabled():
        print("\n" + format_recall_table(res))
    rec = {m: res["modes"][m]["recall"] for m in ("dense", "graph", "hybrid")}
    assert res["n_questions"] == 100
    # dense MiniLM anchor (README, retrieval recall): R@2 / R@5 = 0.472 / 0.622
    assert rec["dense"]["R@2"] == pytest.approx(0.472, abs=0.01)
    assert rec["dense"]["R@5"] == pytest.approx(0.622, abs=0.01)
    for k in ("R@2", "R@5", "R@10"):
        assert rec["graph"][k] > 0.3 and rec["hybrid"][k] > 0.3


def test_load_qa_musique_file(musique_kb) -> None:
    path = MUSIQUE_QA
    qa = load_qa(path, musique_kb.passages)
    assert len(qa) == 100 and all(q.supporting_doc_ids for q in qa)
    ids = {p.doc_id for p in musique_kb.passages}
    assert all(d in ids for q in qa for d in q.supporting_doc_ids)


def test_cli_eval_retrieval_json(toy_kb_dir, tmp_path, capsys, monkeypatch) -> None:
    from gta_verl.cli import main
    from gta_verl.testing.toy_kb import TOY_DOCS, HashEmbedder
    from tests.retrieval.qa_json import qa_record, write_qa

    monkeypatch.setattr("gta_verl.kb.embed.load_embedder", lambda *a, **kw: HashEmbedder())
    title, text, _ = TOY_DOCS[7]
    path = write_qa(tmp_path / "qa.json", [qa_record("q1", "capital of Japan", "Tokyo", title, text)])
    assert main(["eval-retrieval", "--kb", str(toy_kb_dir), "--qa", str(path), "--k", "1,3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_questions"] == 1 and set(out["modes"]) == {"dense", "graph", "hybrid"}
