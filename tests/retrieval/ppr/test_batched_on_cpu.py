"""Batched PPR equals igraph PRPACK (the reference) and networkx, incl. dangling nodes and weights."""

from __future__ import annotations

import igraph as ig
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from gta_verl.retrieval.ppr.batched import batched_ppr
from gta_verl.retrieval.ppr.transition import build_transition, transition_from_edges
from gta_verl.testing.synthetic_graphs import GraphSpec, make_seed_personalization, make_synthetic_graph

SOLVERS = [("cg", "scipy"), ("cg", "torch"), ("power", "scipy"), ("power", "torch"), ("fused", "auto")]


def _igraph(g: ig.Graph, pers: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    return np.array(
        [
            g.personalized_pagerank(
                damping=1 - alpha, reset=p.tolist(), weights="weight", implementation="prpack"
            )
            for p in pers
        ]
    )


def _networkx(g: ig.Graph, pers: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    G = nx.Graph()
    G.add_nodes_from(range(g.vcount()))
    for e, w in zip(g.get_edgelist(), g.es["weight"], strict=True):
        G.add_edge(*e, weight=w)
    out = []
    for p in pers:
        d = dict(enumerate(p))
        pr = nx.pagerank(
            G, alpha=1 - alpha, personalization=d, dangling=d, weight="weight", tol=1e-13, max_iter=500
        )
        out.append([pr[i] for i in range(g.vcount())])
    return np.array(out)


@pytest.mark.parametrize("method,backend", SOLVERS)
def test_two_nodes_hand_computed(method: str, backend: str) -> None:
    # r0 = α + (1−α) r1, r1 = (1−α) r0 with α = 1/2 → r0 = 2/3, r1 = 1/3
    tr = transition_from_edges(2, np.array([[0, 1]]), np.array([3.0]))
    r = batched_ppr(tr, np.array([[1.0, 0.0]]), alpha=0.5, method=method, backend=backend)
    np.testing.assert_allclose(r, [[2 / 3, 1 / 3]], atol=1e-8)


@pytest.mark.parametrize("method,backend", SOLVERS)
def test_dangling_node_restarts_from_personalization(method: str, backend: str) -> None:
    # edge 0–1, node 2 isolated, p = (1/2, 0, 1/2): r2 = 1/4 + r2/4 → 1/3;
    # r0 = 1/4 + r1/2 + r2/4, r1 = r0/2 → r0 = 4/9, r1 = 2/9 (sum 1)
    g = ig.Graph(n=3, edges=[(0, 1)])
    g.es["weight"] = [1.0]
    p = np.array([[0.5, 0.0, 0.5]])
    r = batched_ppr(build_transition(g), p, method=method, backend=backend)
    np.testing.assert_allclose(r, [[4 / 9, 2 / 9, 1 / 3]], atol=1e-8)
    np.testing.assert_allclose(r, _igraph(g, p), atol=1e-8)


def _random_graph(n: int, m: int, seed: int) -> ig.Graph:
    rng = np.random.default_rng(seed)
    pairs = {tuple(sorted(rng.choice(n - 3, 2, replace=False).tolist())) for _ in range(m)}  # last 3 isolated
    g = ig.Graph(n=n, edges=sorted(pairs))
    g.es["weight"] = [float(w) for w in rng.uniform(0.1, 3.0, g.ecount())]  # Python floats
    return g


@pytest.mark.parametrize("method,backend", SOLVERS)
def test_small_weighted_graph_matches_igraph_and_networkx(method: str, backend: str) -> None:
    g = _random_graph(40, 80, seed=3)
    rng = np.random.default_rng(0)
    pers = rng.random((5, 40)) * (rng.random((5, 40)) < 0.3)
    pers[:, -1] += 0.2  # mass on an isolated (dangling) node
    pers /= pers.sum(1, keepdims=True)
    r = batched_ppr(build_transition(g), pers, method=method, backend=backend, block_size=2)
    np.testing.assert_allclose(r, _igraph(g, pers), atol=1e-8)
    np.testing.assert_allclose(r, _networkx(g, pers), atol=1e-8)
    np.testing.assert_allclose(r.sum(1), 1.0, atol=1e-12)


def test_medium_synthetic_graph_matches_igraph_top10() -> None:
    spec = GraphSpec("medium", 300, 2_000, 3_000, 4_000, 5_000)
    g = make_synthetic_graph(spec, seed=5).to_igraph()
    pers = make_seed_personalization(spec, 6, seed=2)
    ref = _igraph(g, pers, alpha=0.5)
    tr = build_transition(g)
    for kwargs in (
        {},
        {"method": "power"},
        {"dtype": np.float32, "tol": 1e-6},
        {"method": "fused", "block_size": 4},
        {"method": "fused", "dtype": np.float32, "tol": 1e-6},
    ):
        r = batched_ppr(tr, pers, **kwargs)
        atol = 1e-6 if kwargs.get("dtype") is np.float32 else 1e-8
        np.testing.assert_allclose(r, ref, atol=atol)
        top = np.argsort(-r[:, : spec.n_docs], 1, kind="stable")[:, :10]
        np.testing.assert_array_equal(top, np.argsort(-ref[:, : spec.n_docs], 1, kind="stable")[:, :10])


def test_other_alpha_and_no_reordering() -> None:
    g = _random_graph(30, 60, seed=9)
    pers = np.eye(30)[:4]
    for reorder in (True, False):
        r = batched_ppr(build_transition(g, reorder=reorder), pers, alpha=0.15)
        np.testing.assert_allclose(r, _igraph(g, pers, alpha=0.15), atol=1e-8)


def test_raw_column_stochastic_matrix_uses_power_iteration() -> None:
    g = _random_graph(20, 40, seed=1)
    tr = build_transition(g, reorder=False)
    pers = np.eye(20)[[0, 5]]
    r = batched_ppr(sp.csr_matrix(tr.matrix), pers)
    np.testing.assert_allclose(r, _igraph(g, pers), atol=1e-8)
    with pytest.raises(ValueError, match="column-stochastic"):
        batched_ppr(sp.csr_matrix(np.full((3, 3), 0.5)), np.eye(3)[:1])
    with pytest.raises(ValueError, match="undirected"):
        batched_ppr(sp.csr_matrix(tr.matrix), pers, method="cg")


def test_input_validation() -> None:
    tr = transition_from_edges(3, np.array([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="alpha"):
        batched_ppr(tr, np.eye(3)[:1], alpha=1.0)
    with pytest.raises(ValueError, match="shape"):
        batched_ppr(tr, np.ones((1, 4)))
    with pytest.raises(ValueError, match="all zero"):
        batched_ppr(tr, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        transition_from_edges(2, np.array([[0, 1]]), np.array([-1.0]))
    with pytest.raises(ValueError, match="directed"):
        build_transition(ig.Graph(n=2, edges=[(0, 1)], directed=True))


def test_synthetic_graph_has_exact_counts() -> None:
    spec = GraphSpec("tiny", 50, 400, 300, 500, 600)
    sg = make_synthetic_graph(spec, seed=0)
    assert np.bincount(sg.kinds).tolist() == [300, 500, 600]
    keys = {tuple(sorted(e)) for e in sg.edges.tolist()}
    assert len(keys) == len(sg.edges)  # each node pair at most once
    assert np.array_equal(sg.edges, make_synthetic_graph(spec, seed=0).edges)  # seeded


@pytest.mark.gpu
def test_torch_cuda_path_matches_igraph() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    g = _random_graph(40, 80, seed=4)
    pers = np.eye(40)[:3]
    r = batched_ppr(build_transition(g), pers, device="cuda")
    np.testing.assert_allclose(r, _igraph(g, pers), atol=1e-8)


def test_fused_path_graph_hand_computed_float32() -> None:
    # path 0–1–2 plus isolated node 3, α = 1/2, p = (1/2, 0, 0, 1/2).
    # Node 3 (dangling) keeps α p3 + (1−α)(r3 p3): r3 = 1/4 + r3/4 → r3 = 1/3.
    # The path gets the other 2/3 in the proportions of its PPR from node 0:
    #   r0 = 1/2 + r1/4, r1 = (r0 + r2)/2, r2 = r1/4 → r1 = 4/7 r0, r0 = 7/12, r1 = 1/3, r2 = 1/12;
    #   × 2/3 → 7/18, 4/18, 1/18.
    tr = transition_from_edges(4, np.array([[0, 1], [1, 2]]), np.array([1.0, 1.0]))
    p = np.array([[0.5, 0.0, 0.0, 0.5]])
    r, iters = batched_ppr(tr, p, method="fused", dtype=np.float32, tol=1e-7, return_iterations=True)
    np.testing.assert_allclose(r, [[7 / 18, 4 / 18, 1 / 18, 1 / 3]], atol=1e-6)
    assert 1 < iters[0] < 100  # converged by the L1 test, not by the cap


def test_fused_rejects_gpu_device() -> None:
    tr = transition_from_edges(2, np.array([[0, 1]]), np.array([1.0]))
    with pytest.raises(ValueError, match="CPU only"):
        batched_ppr(tr, np.array([[1.0, 0.0]]), method="fused", device="cuda")
