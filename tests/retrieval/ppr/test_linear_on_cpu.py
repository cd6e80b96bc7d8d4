"""PPR by linearity (passage basis + push from the entity seeds) equals the exact solvers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from gta_verl.retrieval.backends import open_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.evaluate import evaluate_retrieval
from gta_verl.retrieval.ppr.batched import batched_ppr
from gta_verl.retrieval.ppr.linear import build_passage_basis, linear_ppr_docs
from gta_verl.retrieval.ppr.transition import transition_from_edges
from gta_verl.retrieval.retriever import GraphRetriever
from tests.retrieval.ppr.rankings import assert_same_rankings, exact_config


def _star() -> tuple:
    """Documents 0, 1 (edges to entity node 3) and 2 (isolated); the entity seeded with weight 1."""
    tr = transition_from_edges(4, np.array([[0, 3], [1, 3]]))
    emb = np.array([[1.0], [0.0], [0.5]])  # dim 1; the "query" is q = [1]
    seeds = sp.csr_matrix(([1.0], ([0], [3])), shape=(1, 4))
    return tr, emb, seeds


def test_star_graph_hand_computed() -> None:
    """p = e_3 + 0.1·E q + 0.1·1_D = (0.2, 0.1, 0.15, 1); α = 0.5, M[3,0] = M[3,1] = 1, M[0,3] = M[1,3] = ½.

    (I − ½M) y = p:  y0 − ¼y3 = 0.2,  y1 − ¼y3 = 0.1,  y2 = 0.15 (isolated),  y3 − ½y0 − ½y1 = 1
    → ¾y3 = 1 + ½(0.2 + 0.1) = 1.15, y3 = 23/15; y0 = 0.2 + 23/60 = 35/60; y1 = 6/60 + 23/60 = 29/60;
    Σy = 35/60 + 29/60 + 9/60 + 92/60 = 165/60 → r_D = (35, 29, 9)/165 on documents 0, 1, 2.
    """
    tr, emb, seeds = _star()
    basis = build_passage_basis(tr, emb, alpha=0.5, dtype=np.float64, tol=1e-13)
    scores, touched = linear_ppr_docs(
        tr, basis, seeds, np.array([[1.0]], np.float32), np.array([0.1]), np.array([0.1]), eps=1e-14
    )
    np.testing.assert_allclose(scores[0], [35 / 165, 29 / 165, 9 / 165], atol=1e-7)
    assert touched[0] == 3  # entity 2 and its two documents; the isolated document is never pushed


def test_random_graph_equals_exact_solver() -> None:
    """Random undirected graph with isolated nodes; signed embeddings; several seeds per query."""
    rng = np.random.default_rng(3)
    n, n_docs, dim = 300, 120, 16
    edges = rng.integers(0, n - 20, size=(900, 2))  # the last 20 nodes (entities) stay isolated
    tr = transition_from_edges(n, edges, rng.uniform(0.5, 2.0, len(edges)))
    emb = rng.normal(size=(n_docs, dim))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    q = rng.normal(size=(5, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    dense = q.astype(np.float64) @ emb.T
    lo, hi = dense.min(axis=1), dense.max(axis=1)
    a, c = 0.05 / (hi - lo), -0.05 * lo / (hi - lo)
    rows = np.repeat(np.arange(5), 3)
    cols = rng.choice(np.arange(n_docs, n), size=15)  # includes isolated entities with some luck
    cols[0] = n - 1  # and surely one
    seeds = sp.csr_matrix((rng.uniform(0.1, 1.0, 15), (rows, cols)), shape=(5, n))
    full = seeds.toarray()
    full[:, :n_docs] += a[:, None] * dense + c[:, None]
    want = batched_ppr(tr, np.maximum(full, 0.0), method="cg", tol=1e-12)[:, :n_docs]  # min row: -1e-18
    basis = build_passage_basis(tr, emb, alpha=0.5)
    got, _ = linear_ppr_docs(tr, basis, seeds, q, a, c, eps=1e-12)
    np.testing.assert_allclose(got, want, atol=2e-7, rtol=1e-5)  # float32 basis and GEMV
    # the push scratch is reused across calls: another query batch in between changes nothing
    linear_ppr_docs(tr, basis, seeds[::-1], q[::-1], a[::-1], c[::-1], eps=1e-7)
    again, _ = linear_ppr_docs(tr, basis, seeds, q, a, c, eps=1e-12)
    assert np.array_equal(again, got)
    top_got = np.argsort(-got, axis=1, kind="stable")[:, :10]
    top_want = np.argsort(-want, axis=1, kind="stable")[:, :10]
    assert (top_got == top_want).all()


def test_linear_rejects_an_all_zero_personalization() -> None:
    tr, emb, _ = _star()
    basis = build_passage_basis(tr, emb)
    with pytest.raises(ValueError, match="all zero"):
        linear_ppr_docs(
            tr, basis, sp.csr_matrix((1, 4)), np.zeros((1, 1), np.float32), np.zeros(1), np.zeros(1)
        )


@pytest.fixture(scope="module")
def retriever(musique_kb_dir, embedder) -> GraphRetriever:
    r = open_retriever(musique_kb_dir, embedder=embedder)
    _ = r.transition
    return r


def test_musique_linear_top10_and_scores_equal_exact_solver(retriever, musique_qa) -> None:
    questions = [q.question for q in musique_qa]
    graph = dataclasses.replace(retriever.config, mode="graph")
    assert RetrieverConfig().ppr_method == "linear"  # the default
    lin = retriever.with_config(graph)
    assert lin.uses_passage_basis
    ours = lin.rank(questions, 10)
    exact = retriever.with_config(exact_config(graph, tol=1e-10)).rank(questions, 10)
    assert_same_rankings(ours, exact, atol=1e-6)


def test_musique_linear_recall_equals_recorded(retriever, musique_qa) -> None:
    lin = retriever.with_config(dataclasses.replace(retriever.config, ppr_method="linear"))
    rec = evaluate_retrieval(lin, musique_qa, modes=("hybrid",), ks=(2, 5, 10))["modes"]["hybrid"]["recall"]
    # recorded hybrid recall of the default retriever (docs/retrieval.md): 0.472 / 0.689 / 0.797
    assert [rec[f"R@{k}"] for k in (2, 5, 10)] == pytest.approx([0.472, 0.689, 0.797], abs=0.005)


def test_linear_without_its_preconditions_falls_back_to_a_global_solver(retriever, musique_qa) -> None:
    """Top-n dense seeding is not affine in E q: the fused power iteration answers instead."""
    q = [musique_qa[0].question]
    cfg = dataclasses.replace(retriever.config, mode="graph", passage_seed_top=50)
    lin = retriever.with_config(dataclasses.replace(cfg, ppr_method="linear"))
    assert not lin.uses_passage_basis
    got = [h.doc_id for h in lin.rank(q, 10)[0].hits]
    want = [h.doc_id for h in retriever.with_config(exact_config(cfg, tol=1e-10)).rank(q, 10)[0].hits]
    assert got == want
