"""Seeded synthetic KB graphs with the exact GTA-RAG Table 5 edge counts.

Used by ``benchmarks/retrieval/ppr.py`` and the PPR tests: a heavy-tailed document–entity
graph whose node and edge counts match a real KB, so PPR timings transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GraphSpec:
    """Node and edge counts of one KB graph (GTA-RAG Table 5)."""

    name: str
    n_docs: int
    n_entities: int
    n_doc_entity: int
    n_relation: int
    n_synonymy: int

    def __post_init__(self) -> None:
        if min(self.n_docs, self.n_entities) < 1:
            raise ValueError(f"GraphSpec {self.name!r}: n_docs and n_entities must be >= 1")
        if self.n_doc_entity > self.n_docs * self.n_entities:
            raise ValueError(f"GraphSpec {self.name!r}: more doc-entity edges than pairs")
        pairs = self.n_entities * (self.n_entities - 1) // 2
        if self.n_relation + self.n_synonymy > pairs:
            raise ValueError(f"GraphSpec {self.name!r}: more entity-entity edges than pairs")

    @property
    def n_nodes(self) -> int:
        return self.n_docs + self.n_entities


TWOWIKI = GraphSpec("2Wiki", 6_119, 44_356, 61_219, 112_252, 207_288)
HOTPOTQA_10K = GraphSpec("HotpotQA-10K", 18_300, 127_542, 206_473, 382_750, 748_429)


@dataclass(frozen=True)
class SyntheticGraph:
    """Undirected weighted edge list; docs are nodes ``0..n_docs-1``, entities follow."""

    spec: GraphSpec
    edges: np.ndarray
    """``int64 [E, 2]`` node pairs, each unordered pair at most once."""
    weights: np.ndarray
    """``float64 [E]`` positive edge weights."""
    kinds: np.ndarray
    """``int8 [E]``: 0 doc_entity, 1 relation, 2 synonymy."""

    def to_igraph(self):
        """Return an undirected ``igraph.Graph`` with ``weight`` as Python floats."""
        import igraph as ig

        g = ig.Graph(n=self.spec.n_nodes, edges=self.edges.tolist(), directed=False)
        g.es["weight"] = self.weights.tolist()  # Python floats: igraph 1.0 ignores float32
        return g


def _popularity(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    # Zipf-like weights, shuffled so popular entities are spread over the id range.
    w = (np.arange(1, n + 1, dtype=np.float64)) ** (-exponent)
    rng.shuffle(w)
    return w / w.sum()


def _draw(missing: int, sample, key_base: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One batch of candidate pairs for ``missing`` more: the pairs, their int64 keys, and the index of
    each key's first draw in draw order (so the result depends only on the seed)."""
    cand = sample(max(1024, int(missing * 1.3)))
    if symmetric:
        cand = np.sort(cand, axis=1)
        cand = cand[cand[:, 0] != cand[:, 1]]
    keys = cand[:, 0] * key_base + cand[:, 1]
    _, first = np.unique(keys, return_index=True)
    first.sort()
    return cand, keys, first


def _unique_pairs(count: int, sample, forbid: set[int] | None, key_base: int, symmetric: bool) -> np.ndarray:
    """Draw ``count`` distinct pairs from ``sample(n) -> int64 [n, 2]``."""
    chosen: list[np.ndarray] = []
    seen: set[int] = set() if forbid is None else forbid
    have = 0
    while have < count:
        cand, keys, first = _draw(count - have, sample, key_base, symmetric)
        fresh = [i for i in first.tolist() if int(keys[i]) not in seen]
        fresh = fresh[: count - have]
        seen.update(int(keys[i]) for i in fresh)
        chosen.append(cand[fresh])
        have += len(fresh)
    return np.concatenate(chosen)


def make_synthetic_graph(spec: GraphSpec, seed: int = 0, exponent: float = 0.9) -> SyntheticGraph:
    """Build a seeded graph with exactly the counts of ``spec`` and heavy-tailed degrees.

    Entity popularity follows a Zipf law (``exponent``), so a few entities touch
    many documents (like "united states") while most appear once.

    Args:
        spec: Node and edge counts.
        seed: RNG seed; the same seed gives the same graph.
        exponent: Zipf exponent of entity popularity.

    Returns:
        The graph; doc–entity weight 1.0, relation weight = a small co-occurrence
        count (1–3), synonymy weight = a cosine in [0.8, 1.0) as in HippoRAG 2.
    """
    rng = np.random.default_rng(seed)
    pop = _popularity(spec.n_entities, exponent, rng)
    nd, ne = spec.n_docs, spec.n_entities

    def doc_entity(n: int) -> np.ndarray:
        return np.stack([rng.integers(0, nd, n), rng.choice(ne, n, p=pop)], axis=1)

    def ent_ent(n: int) -> np.ndarray:
        return np.stack([rng.choice(ne, n, p=pop), rng.choice(ne, n, p=pop)], axis=1)

    de = _unique_pairs(spec.n_doc_entity, doc_entity, None, ne, symmetric=False)
    seen_ee: set[int] = set()
    rel = _unique_pairs(spec.n_relation, ent_ent, seen_ee, ne, symmetric=True)
    syn = _unique_pairs(spec.n_synonymy, ent_ent, seen_ee, ne, symmetric=True)
    edges = np.concatenate([np.stack([de[:, 0], de[:, 1] + nd], 1), rel + nd, syn + nd]).astype(np.int64)
    weights = np.concatenate(
        [
            np.ones(len(de)),
            rng.choice([1.0, 1.0, 1.0, 2.0, 3.0], len(rel)),
            rng.uniform(0.8, 1.0, len(syn)),
        ]
    )
    kinds = np.concatenate(
        [np.zeros(len(de), np.int8), np.ones(len(rel), np.int8), np.full(len(syn), 2, np.int8)]
    )
    return SyntheticGraph(spec, edges, weights, kinds)


def make_seed_personalization(
    spec: GraphSpec, n_queries: int, seed: int = 1, min_seeds: int = 20, max_seeds: int = 50
) -> np.ndarray:
    """Random personalization rows seeding 20–50 entity nodes each.

    Returns:
        ``float64 [n_queries, n_nodes]``, every row summing to 1.
    """
    rng = np.random.default_rng(seed)
    p = np.zeros((n_queries, spec.n_nodes))
    for i in range(n_queries):
        k = int(rng.integers(min_seeds, max_seeds + 1))
        nodes = spec.n_docs + rng.choice(spec.n_entities, k, replace=False)
        p[i, nodes] = rng.uniform(0.1, 1.0, k)
    return p / p.sum(axis=1, keepdims=True)


def scale_spec(spec: GraphSpec, n_docs: int) -> GraphSpec:
    """``spec`` with every count scaled by ``n_docs / spec.n_docs`` (same Table 5 proportions).

    >>> s = scale_spec(HOTPOTQA_10K, 1_830)
    >>> (s.n_docs, s.n_entities, s.n_doc_entity, s.n_relation, s.n_synonymy)
    (1830, 12754, 20647, 38275, 74843)
    """
    f = n_docs / spec.n_docs
    return GraphSpec(
        f"{spec.name} x{f:g}",
        n_docs,
        max(1, round(spec.n_entities * f)),
        round(spec.n_doc_entity * f),
        round(spec.n_relation * f),
        round(spec.n_synonymy * f),
    )


def _unique_pairs_np(count: int, sample, key_base: int, symmetric: bool) -> np.ndarray:
    """Vectorized :func:`_unique_pairs`: ``count`` distinct pairs in draw order (sorted keys, no sets)."""
    chosen: list[np.ndarray] = []
    taken = np.zeros(0, np.int64)  # sorted keys already chosen
    have = 0
    while have < count:
        cand, keys, first = _draw(count - have, sample, key_base, symmetric)
        first = first[~np.isin(keys[first], taken, assume_unique=True)][: count - have]
        taken = np.union1d(taken, keys[first])
        chosen.append(cand[first])
        have += len(first)
    return np.concatenate(chosen) if chosen else np.zeros((0, 2), np.int64)


def make_scaled_graph(spec: GraphSpec, seed: int = 0, exponent: float = 0.9) -> SyntheticGraph:
    """Same distribution as :func:`make_synthetic_graph`, drawn with numpy only (for 10⁷–10⁸ edges).

    ``make_synthetic_graph`` deduplicates pairs in a Python set, which takes minutes and
    gigabytes of Python objects at a million documents (73 M edges); here duplicates are
    removed by sorting int64 keys. Entity popularity is the same shuffled Zipf law, the
    counts are exactly ``spec``'s, relation and synonymy edges are disjoint; the edges
    differ from ``make_synthetic_graph``'s for the same seed (another draw order).

    Args:
        spec: Node and edge counts (e.g. ``scale_spec(HOTPOTQA_10K, 1_000_000)``).
        seed: RNG seed; the same seed gives the same graph.
        exponent: Zipf exponent of entity popularity.

    Returns:
        The graph, weights as in :func:`make_synthetic_graph`.
    """
    rng = np.random.default_rng(seed)
    nd, ne = spec.n_docs, spec.n_entities
    cdf = np.cumsum(_popularity(ne, exponent, rng))

    def zipf(n: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), ne - 1)

    de = _unique_pairs_np(
        spec.n_doc_entity, lambda n: np.stack([rng.integers(0, nd, n), zipf(n)], 1), ne, symmetric=False
    )
    ee = _unique_pairs_np(
        spec.n_relation + spec.n_synonymy, lambda n: np.stack([zipf(n), zipf(n)], 1), ne, symmetric=True
    )
    rel, syn = ee[: spec.n_relation], ee[spec.n_relation :]
    edges = np.concatenate([np.stack([de[:, 0], de[:, 1] + nd], 1), ee + nd]).astype(np.int64)
    weights = np.concatenate(
        [np.ones(len(de)), rng.choice([1.0, 1.0, 1.0, 2.0, 3.0], len(rel)), rng.uniform(0.8, 1.0, len(syn))]
    )
    kinds = np.concatenate(
        [np.zeros(len(de), np.int8), np.ones(len(rel), np.int8), np.full(len(syn), 2, np.int8)]
    )
    return SyntheticGraph(spec, edges, weights, kinds)
