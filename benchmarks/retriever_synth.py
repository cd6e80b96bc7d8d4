"""The synthetic retriever of ``benchmarks/retrieval/retriever.py``: KB, query vectors, stage timings, PPR
variants.

A :class:`KnowledgeBase` over a synthetic graph (``gta_verl.testing.synthetic_graphs``) with random
unit vectors, queried by precomputed vectors (:class:`PrecomputedEncoder`: encoding is not timed);
:func:`stage_times` and :func:`time_retrieve` time it; :func:`parse_variants` reads the PPR settings
the ``whole`` and ``sweep`` sections compare. ``tests/retrieval/test_index_blas_on_cpu.py`` builds
its size-sweep KBs with the same functions.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from gta_verl.testing.precomputed_encoder import PrecomputedEncoder as PrecomputedEncoder  # re-exported
from gta_verl.testing.synthetic_graphs import SyntheticGraph


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``float32 [n, dim]`` random unit vectors, drawn in float32 (no float64 copy)."""
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def query_vectors(triple_emb: np.ndarray, n: int, seed: int, noise: float = 1.0) -> np.ndarray:
    """Queries near random triples (cosine ≈ 0.7 to one triple), so seeds are not pure noise."""
    rng = np.random.default_rng(seed)
    q = triple_emb[rng.integers(0, len(triple_emb), n)] + noise * unit_rows(rng, n, triple_emb.shape[1])
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def synthetic_kb(
    sg: SyntheticGraph,
    n_triples: int,
    seed: int,
    dim: int,
    with_igraph: bool,
    passage_vectors: str = "random",
) -> Any:
    """A :class:`KnowledgeBase` over graph ``sg`` with random unit triple vectors.

    Passage vectors: ``"random"`` = random unit rows (every query–passage cosine near 0: dense search is
    noise, the hardest case for an ANN index); ``"facts"`` = :func:`fact_passage_rows` (a passage near the
    facts it states, as a real encoder places it). The random draws are the same in both modes.

    Triples connect the endpoints of the graph's relation edges (drawn with repetition,
    distinct relation names, so every triple is a unique fact). ``with_igraph=False``
    gives an edgeless igraph graph: the caller attaches the transition and document
    frequencies from the edge arrays (igraph at 73 M edges needs tens of GB of Python
    objects), as ``gta_verl.retrieval.serving.shared_arrays`` does from its cache.
    """
    import igraph as ig

    from gta_verl.data.types import Passage, Triple
    from gta_verl.kb.knowledge_base import KnowledgeBase

    if passage_vectors not in ("random", "facts"):
        raise ValueError(f"passage_vectors is 'random' or 'facts', got {passage_vectors!r}")
    spec, nd = sg.spec, sg.spec.n_docs
    rng = np.random.default_rng(seed)
    passages = tuple(Passage(f"d{i:016x}", f"title {i}", f"text {i}") for i in range(nd))
    entities = tuple(f"entity {j}" for j in range(spec.n_entities))
    rel = sg.edges[sg.kinds == 1] - nd
    pairs = rel[rng.integers(0, len(rel), n_triples)]
    docs = rng.integers(0, nd, n_triples)
    triples = tuple(
        Triple(f"e{a}", f"r{i}", f"e{b}", passages[d].doc_id)
        for i, ((a, b), d) in enumerate(zip(pairs.tolist(), docs.tolist(), strict=True))
    )
    if with_igraph:
        g = sg.to_igraph()
        g.es["kind"] = [("doc_entity", "relation", "synonymy")[k] for k in sg.kinds.tolist()]
    else:
        g = ig.Graph(n=spec.n_nodes)
    passage_emb = unit_rows(rng, nd, dim)
    triple_emb = unit_rows(rng, n_triples, dim)
    if passage_vectors == "facts":
        passage_emb = fact_passage_rows(passage_emb, triple_emb, docs)
    return KnowledgeBase(
        passages,
        entities,
        triples,
        pairs,
        g,
        passage_emb,
        np.zeros((0, dim), np.float32),
        triple_emb,
        "random",
    )


def fact_passage_rows(noise: np.ndarray, triple_emb: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Passage vectors near their own facts: ``p_d = normalize(r_d + Σ_{t: doc(t) = d} e_t)``.

    Args:
        noise: ``float32 [n_docs, dim]`` random unit rows ``r_d`` (a passage says more than its facts).
        triple_emb: ``float32 [n_triples, dim]`` unit fact vectors ``e_t``.
        docs: ``int [n_triples]`` the document of each fact.

    A passage with k facts sits at cosine ≈ 1/√(k+1) to each of them (0.71 for one), a passage without
    facts stays random; a query drawn near a fact (:func:`query_vectors`) is then nearest that fact's
    passage, as a question is to the passage that answers it.
    """
    import scipy.sparse as sp

    n_docs, n_tr = len(noise), len(triple_emb)
    member = sp.csr_matrix((np.ones(n_tr, np.float32), (docs, np.arange(n_tr))), shape=(n_docs, n_tr))
    p = noise + member @ triple_emb
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    return p.astype(np.float32, copy=False)


def attach_graph(retriever: Any, sg: SyntheticGraph) -> None:
    """Give a retriever over an edgeless KB graph the transition and document frequencies of ``sg``."""
    from gta_verl.retrieval.ppr.transition import transition_from_edges

    nd = sg.spec.n_docs
    retriever._transition = transition_from_edges(sg.spec.n_nodes, sg.edges, sg.weights)
    de = sg.edges[sg.kinds == 0]
    retriever._doc_freq = np.bincount(de[:, 1] - nd, minlength=sg.spec.n_entities).astype(np.int64)


def stage_times(r: Any, q: np.ndarray, k: int = 10) -> dict[str, float]:
    """ms per query of each stage of ``GraphRetriever.score`` on query vectors ``q`` [B, dim]."""
    c, b = r.config, len(q)
    t0 = time.perf_counter()
    dense = r.dense_part(q, max(c.k_dense, k))  # every passage's cosine, or an approximate index's candidates
    t1 = time.perf_counter()
    s, ids, mins = r._fact_index.search_with_min(q, c.top_n_triples)
    t2 = time.perf_counter()
    seeds, seeded = r.entity_seeds(s, ids, mins)
    t3 = time.perf_counter()
    *_, touched_b = r.ppr_top(seeds[seeded], q[seeded], dense[seeded], k)  # the passage seeds are built here
    t4 = time.perf_counter()
    # the push-based solvers report what they touched; the global ones touch every node
    touched = float(r.transition.n_nodes) if touched_b is None else float(touched_b.mean())
    ms = [(t1 - t0) * 1e3 / b, (t2 - t1) * 1e3 / b, (t3 - t2) * 1e3 / b, (t4 - t3) * 1e3 / b]
    return {
        "dense": ms[0],
        "triples": ms[1],
        "pers": ms[2],
        "ppr": ms[3],
        "touched": touched,
        "seeded": float(seeded.mean()),
    }


def time_retrieve(r: Any, b: int, reps: int = 1) -> float:
    """ms per query of ``retrieve`` on ``b`` precomputed queries (best of ``reps``)."""
    texts = [f"q{i}" for i in range(b)]
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        r.retrieve(texts)
        best = min(best, (time.perf_counter() - t) * 1e3 / b)
    return best


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def current_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 2**20
    return float("nan")


# PPR settings compared: "push:<eps>[@<top>]" (forward push of the whole personalization, dense seeds on
# the best <top> documents, default all), "fused" (numba power iteration, float32, stopped at an L1 change of
# 1e-7, its float32 floor), "linear:<eps>" (passage basis + push from the entity seeds, ppr/linear.py).
WHOLE_VARIANTS = "push:3e-8,push:1e-6@100,fused,linear:1e-6"
SWEEP_VARIANTS = "push:3e-8,push:1e-6@100,fused,linear:1e-6"
FUSED = {"ppr_method": "fused", "ppr_dtype": "float32", "ppr_tol": 1e-7, "ppr_block_size": 256}


def parse_variants(spec: str) -> list[tuple[int, float | str]]:
    """``"push:3e-8@100,fused,linear:1e-6"`` → ``[(100, 3e-8), (0, "fused"), (0, "linear:1e-06")]``."""
    out: list[tuple[int, float | str]] = []
    for item in spec.split(","):
        body, _, top = item.strip().partition("@")
        kind, _, eps = body.partition(":")
        if kind == "push":
            out.append((int(top or 0), float(eps)))
        elif kind == "fused":
            out.append((int(top or 0), "fused"))
        elif kind == "linear":
            out.append((0, f"linear:{float(eps or 1e-6):g}"))
        else:
            raise ValueError(f"unknown PPR variant {item!r} (push:<eps>[@<top>], fused, linear:<eps>)")
    return out


def variant_config(top: int, eps: float | str) -> Any:
    from gta_verl.retrieval.config import RetrieverConfig

    if eps == "fused":
        return RetrieverConfig(passage_seed_top=top, **FUSED)
    if isinstance(eps, str) and eps.startswith("linear"):
        return RetrieverConfig(
            passage_seed_top=top, ppr_method="linear", ppr_linear_eps=float(eps.split(":")[1])
        )
    return RetrieverConfig(passage_seed_top=top, ppr_method="push", ppr_push_eps=float(eps))


def variant_label(top: int, eps: float | str) -> str:
    seeds = f"dense seeds on {'all docs' if top == 0 else f'top {top} docs'}"
    if eps == "fused":
        return f"fused numba power iteration (float32, L1 tol 1e-7), {seeds}"
    if isinstance(eps, str) and eps.startswith("linear"):
        return f"linear: passage basis + push ε={eps.split(':')[1]} from the entity seeds, {seeds}"
    return f"push ε={eps:g}, {seeds}"
