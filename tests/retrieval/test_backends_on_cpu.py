"""The three retriever backends opened through ``gta_verl.retrieval.backends``: answers checked by hand.

``bm25`` scores are checked against the Lucene BM25 formula worked out on paper for a two-passage
KB; ``dense`` against inner products taken here with numpy and against the graph backend's
``mode="dense"`` ablation (the same R_d); ``graph`` is the default and unchanged.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from gta_verl.data.types import Passage
from gta_verl.retrieval.backends import check_backend, open_kb_retriever, open_retriever
from gta_verl.retrieval.base import RetrievalBackend
from gta_verl.retrieval.config import BACKENDS, RetrieverConfig
from gta_verl.retrieval.evaluate import evaluate_backends
from gta_verl.retrieval.queries import FLAG_TRUNCATED

QS = ["Where was Olaf Scholz born?", "capital of Japan", "Somme river", "Mount Fuji height"]


def _tiny_kb() -> types.SimpleNamespace:
    """Two passages: "A\\napple banana" (3 tokens), "B\\nbanana cherry cherry" (4 tokens)."""
    passages = [Passage("d0", "A", "apple banana"), Passage("d1", "B", "banana cherry cherry")]
    return types.SimpleNamespace(passages=passages, n_docs=2, embedder_name="")


# ---------------------------------------------------------------- the seam
def test_backends_are_listed_once_in_order() -> None:
    assert BACKENDS == ("graph", "dense", "bm25")
    assert RetrieverConfig().backend == "graph"


@pytest.mark.parametrize("name", ["faiss", "", "BM25"])
def test_unknown_backend_lists_the_valid_ones(name: str, toy_kb) -> None:
    with pytest.raises(ValueError, match=r"valid backends: graph, dense, bm25"):
        check_backend(name)
    with pytest.raises(
        ValueError, match=r"RetrieverConfig.backend=.*must be one of \('graph', 'dense', 'bm25'\)"
    ):
        RetrieverConfig(backend=name)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"valid backends: graph, dense, bm25"):
        evaluate_backends(toy_kb, [], [name])


def test_each_backend_answers_the_one_interface(toy_kb, hash_embedder) -> None:
    for name in BACKENDS:
        r = open_kb_retriever(toy_kb, RetrieverConfig(backend=name), hash_embedder)
        assert isinstance(r, RetrievalBackend) and r.config.backend == name
        results = r.retrieve(QS)
        assert [x.query for x in results] == QS and all(x.ok and x.hits for x in results)
        assert all(len(x.hits) == 10 for x in r.rank(QS))  # the whole toy KB
        with pytest.raises(ValueError, match="empty or has only whitespace"):
            r.retrieve(["ok", " \u200b "])
        with pytest.raises(TypeError, match="not a single string"):
            r.retrieve("capital of Japan")  # type: ignore[arg-type]
        cut = r.with_config(RetrieverConfig(backend=name, max_query_words=2)).retrieve(["capital of Japan"])[
            0
        ]
        assert cut.query == "capital of" and FLAG_TRUNCATED in cut.flags


def test_with_config_keeps_the_backend(toy_kb, hash_embedder) -> None:
    r = open_kb_retriever(toy_kb, RetrieverConfig(backend="bm25"))
    with pytest.raises(ValueError, match="with_config keeps the backend"):
        r.with_config(RetrieverConfig(backend="dense"))


def test_bm25_loads_no_encoder(toy_kb, monkeypatch) -> None:
    def refuse(*a, **kw):
        raise AssertionError("bm25 must not load a query encoder")

    monkeypatch.setattr("gta_verl.kb.embed.load_embedder", refuse)
    assert open_kb_retriever(toy_kb, RetrieverConfig(backend="bm25")).retrieve(["Somme"])[0].ok


def test_open_retriever_checks_the_backend_before_loading(tmp_path) -> None:
    cfg = types.SimpleNamespace(backend="splade")
    with pytest.raises(ValueError, match="unknown retriever backend 'splade'"):
        open_retriever(tmp_path / "no_kb_here", cfg)  # type: ignore[arg-type]


# ---------------------------------------------------------------- bm25
def test_bm25_scores_equal_the_formula_by_hand() -> None:
    # N = 2, avgdl = 3.5, k1 = 1.5, b = 0.75; idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
    # "cherry": df 1 → idf ln 2; in d1 tf 2, |d| 4: ln2 · 2 / (2 + 1.5 (0.25 + 0.75·4/3.5)) = 0.378695
    # "banana": df 2 → idf ln 1.2; d0 (tf 1, |d| 3): 0.077939; d1 (tf 1, |d| 4): 0.068524
    r = open_kb_retriever(_tiny_kb(), RetrieverConfig(backend="bm25", k_dense=2))
    (cherry,) = r.retrieve(["cherry"])
    assert cherry.doc_ids == ["d1", "d0"]
    assert [h.score for h in cherry.hits] == pytest.approx([0.378695, 0.0], abs=1e-6)
    assert {h.source for h in cherry.hits} == {"bm25"}
    (banana,) = r.retrieve(["Banana!"])
    assert banana.doc_ids == ["d0", "d1"]
    assert [h.score for h in banana.hits] == pytest.approx([0.077939, 0.068524], abs=1e-6)
    (both,) = r.retrieve(["banana cherry"])
    assert both.doc_ids == ["d1", "d0"]
    assert [h.score for h in both.hits] == pytest.approx([0.378695 + 0.068524, 0.077939], abs=1e-6)
    # a query word twice counts twice (one term per occurrence, as Lucene's boolean query sums them)
    assert r.retrieve(["cherry cherry"])[0].hits[0].score == pytest.approx(2 * 0.378695, abs=1e-6)


def test_bm25_k1_and_b_reach_the_index() -> None:
    # b = 0: no length normalization; k1 = 1: "cherry" in d1 → ln2 · 2 / (2 + 1) = 0.462098
    r = open_kb_retriever(_tiny_kb(), RetrieverConfig(backend="bm25", bm25_k1=1.0, bm25_b=0.0))
    assert r.retrieve(["cherry"])[0].hits[0].score == pytest.approx(math.log(2) * 2 / 3, abs=1e-6)
    again = r.with_config(RetrieverConfig(backend="bm25"))  # back to 1.5 / 0.75: the index is rebuilt
    assert again.retrieve(["cherry"])[0].hits[0].score == pytest.approx(0.378695, abs=1e-6)


def test_bm25_without_a_known_word_answers_nothing_and_says_why() -> None:
    # Before: the KB's first passages in index order, each at score 0, read as an answer.
    r = open_kb_retriever(_tiny_kb(), RetrieverConfig(backend="bm25", k_dense=2))
    none, cherry = r.retrieve(["durian", "durian cherry"])
    assert none.ok and none.hits == () and none.flags == ("no_known_query_token",)
    assert r.rank(["durian"], 2)[0].hits == ()
    # one known word is enough: matching passages first, then the others at 0 in index order
    assert cherry.doc_ids == ["d1", "d0"] and cherry.flags == () and cherry.hits[1].score == 0.0
    cut = r.with_config(RetrieverConfig(backend="bm25", max_query_words=1)).retrieve(["durian cherry"])[0]
    assert cut.flags == (FLAG_TRUNCATED, "no_known_query_token")  # the cut dropped the known word


def test_a_lone_surrogate_is_one_clear_error_on_every_backend(toy_kb, hash_embedder) -> None:
    # Before: bm25 answered, graph and dense failed inside the query encoder (UnicodeEncodeError).
    for name in BACKENDS:
        r = open_kb_retriever(toy_kb, RetrieverConfig(backend=name), hash_embedder)
        with pytest.raises(
            ValueError, match=r"^query 1 is not valid UTF-8 \(lone surrogate U\+D800 at character 4\)"
        ):
            r.retrieve(["ok", "Fuji\ud800 height"])
        assert r.retrieve(["Fuji \U0001f5fb height"])[0].ok  # a character outside the BMP is text


def test_bm25_rare_word_on_the_toy_kb(toy_kb) -> None:
    r = open_kb_retriever(toy_kb, RetrieverConfig(backend="bm25"))
    osna, somme = r.retrieve(["Where was Olaf Scholz born? Osnabrueck", "the Somme"])
    assert osna.hits[0].title == "Olaf Scholz"  # "osnabrueck" occurs in that passage only
    assert somme.hits[0].title == "Amiens"  # "somme" occurs in that passage only
    assert len(osna.hits) == 3  # k_dense


@pytest.mark.parametrize(
    ("query", "title"),
    [
        ("Who gave the Riemann integral its name?", "Riemann integral"),  # "riemann": one passage
        ("Where is the Laramie Project set?", "The Laramie Project"),  # "laramie": one passage
    ],
)
def test_bm25_rare_title_word_on_musique(musique_kb, query: str, title: str) -> None:
    r = open_kb_retriever(musique_kb, RetrieverConfig(backend="bm25"))
    assert r.retrieve([query])[0].hits[0].title == title


# ---------------------------------------------------------------- dense
def test_dense_scores_are_inner_products(toy_kb, hash_embedder) -> None:
    r = open_kb_retriever(toy_kb, RetrieverConfig(backend="dense", k_dense=4), hash_embedder)
    q = hash_embedder.encode(QS)
    ip = q @ np.asarray(toy_kb.passage_emb).T  # [4, 10]
    for b, res in enumerate(r.retrieve(QS)):
        want = np.argsort(-ip[b], kind="stable")[:4]
        assert res.doc_ids == [toy_kb.passages[d].doc_id for d in want]
        assert [h.score for h in res.hits] == pytest.approx(ip[b, want].tolist(), abs=1e-6)
        assert {h.source for h in res.hits} == {"dense"}


def test_dense_equals_the_graph_backends_dense_mode(musique_kb, embedder) -> None:
    questions = [p.title for p in musique_kb.passages[:40:4]] + ["Who founded the company?"]
    dense = open_kb_retriever(musique_kb, RetrieverConfig(backend="dense"), embedder)
    graph = open_kb_retriever(musique_kb, RetrieverConfig(mode="dense"), embedder)
    for d, g in zip(dense.retrieve(questions), graph.retrieve(questions), strict=True):
        assert d.doc_ids == g.doc_ids
        assert [h.score for h in d.hits] == [h.score for h in g.hits]
    assert [r.doc_ids for r in dense.rank(questions, 10)] == [r.doc_ids for r in graph.rank(questions, 10)]


# ---------------------------------------------------------------- the CLI
def test_cli_eval_retrieval_compares_backends(toy_kb_dir, tmp_path, capsys, monkeypatch) -> None:
    import json

    from gta_verl.cli import main
    from gta_verl.testing.toy_kb import TOY_DOCS, HashEmbedder
    from tests.retrieval.qa_json import qa_record, write_qa

    monkeypatch.setattr("gta_verl.kb.embed.load_embedder", lambda *a, **kw: HashEmbedder())
    title, text, _ = TOY_DOCS[6]  # "Olaf Scholz was born in Osnabrueck."
    path = write_qa(tmp_path / "qa.json", [qa_record("q1", "Osnabrueck", "Osnabrueck", title, text)])
    argv = ["eval-retrieval", "--kb", str(toy_kb_dir), "--qa", str(path), "--k", "1", "--json"]
    assert main([*argv, "--backends", "graph,dense,bm25"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["modes"]) == ["graph", "dense", "bm25"]
    assert out["modes"]["bm25"]["recall"]["R@1"] == 1.0  # the only passage holding "osnabrueck"
    assert main([*argv, "--backend", "bm25"]) == 0  # a non-graph backend alone: its own row
    assert list(json.loads(capsys.readouterr().out)["modes"]) == ["bm25"]
    with pytest.raises(SystemExit):
        main([*argv, "--backend", "splade"])  # argparse lists the choices


def test_cli_tune_fusion_is_the_graph_backends(toy_kb_dir, tmp_path, capsys) -> None:
    from gta_verl.cli import main

    path = tmp_path / "qa.json"
    path.write_text("[]")
    argv = ["eval-retrieval", "--kb", str(toy_kb_dir), "--qa", str(path), "--tune-fusion"]
    assert main([*argv, "--backend", "bm25"]) == 2
    assert "--tune-fusion orders the graph backend's hybrid list" in capsys.readouterr().err
