"""The default (fused power) and push retrievers keep MuSiQue recall and the exact solver's rankings."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gta_verl.retrieval.backends import open_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.evaluate import evaluate_retrieval
from gta_verl.retrieval.retriever import GraphRetriever, topk_stable
from tests.retrieval.ppr.rankings import assert_same_rankings, exact_config


def test_topk_stable_equals_full_stable_sort() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, 500).astype(float)  # many ties
    for k in (1, 3, 10, 200, 500):
        assert topk_stable(x, k).tolist() == np.argsort(-x, kind="stable")[:k].tolist()


@pytest.fixture(scope="module")
def musique_retriever(musique_kb_dir, embedder) -> GraphRetriever:
    r = open_retriever(musique_kb_dir, embedder=embedder)
    _ = r.transition  # shared by every with_config copy
    return r


def test_push_recall_equals_todays_on_bundled_musique(musique_retriever, musique_qa) -> None:
    push = musique_retriever.with_config(dataclasses.replace(musique_retriever.config, ppr_method="push"))
    res = evaluate_retrieval(push, musique_qa, modes=("hybrid",), ks=(2, 5, 10))
    rec = res["modes"]["hybrid"]["recall"]
    # recorded hybrid recall, default fusion dense_head(3) (docs/retrieval.md): 0.472 / 0.689 / 0.797
    # (with dense_head(1), the exact CG solver recorded 0.484 / 0.686 / 0.797: push keeps that too)
    assert rec["R@2"] == pytest.approx(0.472, abs=0.005)
    assert rec["R@5"] == pytest.approx(0.689, abs=0.005)
    assert rec["R@10"] == pytest.approx(0.797, abs=0.005)
    old = dataclasses.replace(musique_retriever.config, dense_head=1)
    rec1 = evaluate_retrieval(musique_retriever, musique_qa, modes=("hybrid",), ks=(2, 5, 10), config=old)
    assert [rec1["modes"]["hybrid"]["recall"][f"R@{k}"] for k in (2, 5, 10)] == pytest.approx(
        [0.484, 0.686, 0.797], abs=0.005
    )


def test_push_top10_documents_equal_exact_solver(musique_retriever, musique_qa) -> None:
    questions = [q.question for q in musique_qa[:40]]
    graph = dataclasses.replace(musique_retriever.config, mode="graph")
    push = musique_retriever.with_config(dataclasses.replace(graph, ppr_method="push")).rank(questions, 10)
    exact = musique_retriever.with_config(exact_config(graph)).rank(questions, 10)
    assert_same_rankings(push, exact, atol=1e-5)


def test_fused_float32_top10_documents_equal_exact_solver(musique_retriever, musique_qa) -> None:
    """The fused power iteration (the default before ``linear``; still its fallback)."""
    assert RetrieverConfig().ppr_dtype == "float32"
    questions = [q.question for q in musique_qa]
    graph = dataclasses.replace(musique_retriever.config, mode="graph", ppr_method="fused")
    ours = musique_retriever.with_config(graph).rank(questions, 10)
    exact = musique_retriever.with_config(exact_config(graph)).rank(questions, 10)
    assert_same_rankings(ours, exact, atol=1e-5)


def test_config_rejects_unknown_ppr_method() -> None:
    with pytest.raises(ValueError, match="ppr_method"):
        RetrieverConfig(ppr_method="jacobi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="passage_seed_top"):
        RetrieverConfig(passage_seed_top=-1)
