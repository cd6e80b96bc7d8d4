"""Forward-push PPR (``push_ppr``) agrees with igraph PRPACK: hand-checkable cases and top-10 documents."""

from __future__ import annotations

import igraph as ig
import numpy as np
import pytest
import scipy.sparse as sp

from gta_verl.retrieval.ppr.push import push_ppr
from gta_verl.retrieval.ppr.transition import build_transition, transition_from_edges
from gta_verl.testing.synthetic_graphs import GraphSpec, make_seed_personalization, make_synthetic_graph


def _igraph(g: ig.Graph, pers: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    return np.array(
        [
            g.personalized_pagerank(
                damping=1 - alpha, reset=p.tolist(), weights="weight", implementation="prpack"
            )
            for p in pers
        ]
    )


def test_two_nodes_hand_computed() -> None:
    # r0 = α + (1−α) r1, r1 = (1−α) r0 with α = 1/2 → r0 = 2/3, r1 = 1/3
    tr = transition_from_edges(2, np.array([[0, 1]]), np.array([3.0]))
    res = push_ppr(tr, np.array([[1.0, 0.0]]), k=2, eps=1e-12)
    assert res.ids.tolist() == [[0, 1]]
    np.testing.assert_allclose(res.scores, [[2 / 3, 1 / 3]], atol=1e-10)


def test_isolated_seed_keeps_alpha_of_its_mass() -> None:
    # edge 0–1, node 2 isolated, p = (1/2, 0, 1/2): igraph gives r = (4/9, 2/9, 1/3)
    # (r2 = 1/4 + r2/4 → 1/3; r0 = 1/4 + r1/2 + r2/4, r1 = r0/2 → r0 = 4/9, r1 = 2/9)
    g = ig.Graph(n=3, edges=[(0, 1)])
    g.es["weight"] = [1.0]
    p = np.array([[0.5, 0.0, 0.5]])
    res = push_ppr(build_transition(g), p, k=3, eps=1e-12)
    assert res.ids.tolist() == [[0, 2, 1]]
    np.testing.assert_allclose(res.scores, [[4 / 9, 1 / 3, 2 / 9]], atol=1e-10)
    np.testing.assert_allclose(res.scores[0][np.argsort(res.ids[0])], _igraph(g, p)[0], atol=1e-10)


def test_path_graph_star_hand_computed_and_targets() -> None:
    # star: centre 0 with leaves 1, 2, 3 (weights 1); seed leaf 1, α = 1/2.
    # r1 = 1/2 + r0/6, r0 = (r1 + r2 + r3)/2, r2 = r3 = r0/6
    # → r0 = r1/2 + r0/6 → r0 = 3 r1/5; r1 = 1/2 + r1/10 → r1 = 5/9, r0 = 1/3, r2 = r3 = 1/18
    tr = transition_from_edges(4, np.array([[0, 1], [0, 2], [0, 3]]))
    res = push_ppr(tr, sp.csr_matrix(np.array([[0.0, 2.0, 0.0, 0.0]])), k=4, eps=1e-13)
    assert res.ids.tolist() == [[1, 0, 2, 3]]  # ties (leaves 2, 3) by node id
    np.testing.assert_allclose(res.scores, [[5 / 9, 1 / 3, 1 / 18, 1 / 18]], atol=1e-10)
    leaves = np.array([0, 1, 1, 1], bool)
    only_leaves = push_ppr(tr, np.array([[0.0, 1.0, 0.0, 0.0]]), k=2, eps=1e-13, targets=leaves)
    assert only_leaves.ids.tolist() == [[1, 2]]


def test_coarse_threshold_is_a_lower_bound_within_eps_times_degree() -> None:
    g = make_synthetic_graph(GraphSpec("small", 60, 300, 400, 500, 300), seed=2).to_igraph()
    pers = make_seed_personalization(GraphSpec("small", 60, 300, 400, 500, 300), 3, seed=4)
    ref = _igraph(g, pers)
    tr = build_transition(g)
    eps = 1e-4
    res = push_ppr(tr, pers, k=g.vcount(), eps=eps)
    strength = np.array(g.strength(weights="weight"))
    for b in range(3):
        got = res.ids[b][res.ids[b] >= 0]
        gap = ref[b, got] - res.scores[b, : len(got)]
        assert gap.min() >= -1e-12  # the push estimate never overshoots
        assert np.all(gap <= eps * strength[got] + 1e-12)


def test_medium_synthetic_graph_top10_documents_equal_igraph() -> None:
    spec = GraphSpec("medium", 300, 2_000, 3_000, 4_000, 5_000)
    g = make_synthetic_graph(spec, seed=5).to_igraph()
    pers = make_seed_personalization(spec, 12, seed=2)
    ref = _igraph(g, pers)
    res = push_ppr(build_transition(g), pers, k=10, eps=1e-7, targets=spec.n_docs, n_threads=2)
    expected = np.argsort(-ref[:, : spec.n_docs], 1, kind="stable")[:, :10]
    np.testing.assert_array_equal(res.ids, expected)
    np.testing.assert_allclose(res.scores, np.take_along_axis(ref, expected, 1), atol=1e-5)
    # a sparse personalization gives the same answer as the dense one
    again = push_ppr(build_transition(g), sp.csr_matrix(pers), k=10, eps=1e-7, targets=spec.n_docs)
    np.testing.assert_array_equal(again.ids, res.ids)


def test_input_validation() -> None:
    tr = transition_from_edges(3, np.array([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="alpha"):
        push_ppr(tr, np.eye(3)[:1], alpha=0.0)
    with pytest.raises(ValueError, match="shape"):
        push_ppr(tr, np.ones((1, 4)))
    with pytest.raises(ValueError, match="all zero"):
        push_ppr(tr, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        push_ppr(tr, -np.eye(3)[:1])


def test_cached_scratch_threshold_and_targets_leave_no_trace_between_calls() -> None:
    """Scratch, eps·s and the target mask are kept with the transition: later calls (other eps,
    other targets, other queries, more threads) give what a fresh transition gives."""
    sg = make_synthetic_graph(GraphSpec("small", 80, 400, 500, 600, 300), seed=4)
    pers = make_seed_personalization(sg.spec, 6, seed=1)

    def fresh(**kw):
        return push_ppr(transition_from_edges(sg.spec.n_nodes, sg.edges, sg.weights), pers, **kw)

    tr = transition_from_edges(sg.spec.n_nodes, sg.edges, sg.weights)
    calls = [
        dict(k=10, eps=1e-6, targets=80),
        dict(k=10, eps=1e-4, targets=80),
        dict(k=5, eps=1e-6, targets=40),
        dict(k=10, eps=1e-6, targets=None, n_threads=2),
        dict(k=10, eps=1e-6, targets=80),
    ]
    for kw in calls:
        got, want = push_ppr(tr, pers, **kw), fresh(**kw)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.scores, want.scores)
        np.testing.assert_array_equal(got.touched, want.touched)
    one = push_ppr(tr, pers[:1], k=10, eps=1e-6, targets=80)  # one thread, after two-thread calls
    assert one.ids.tolist() == fresh(k=10, eps=1e-6, targets=80).ids[:1].tolist()
