"""The heterogeneous entity–document graph (GTA-RAG §3.2, HippoRAG 2 construction).

Nodes: documents ``0..n_docs-1`` then entities ``n_docs..n_docs+n_entities-1``.
Edges (undirected, at most one per node pair, Python-float ``weight``, ``kind``):
    1. ``doc_entity`` (d_i, e), weight 1.0, when e is the normalized subject or
       object of a triple extracted from d_i (optionally also a NER entity of d_i);
    2. ``relation`` (e_h, e_t), one per entity pair, weight = number of triple rows
       (subject, relation, object, doc) linking the pair in either direction;
       self-pairs (e_h = e_t) add no edge;
    3. ``synonymy`` (e_a, e_b), weight = cos(h_a, h_b), when e_b is among the k
       nearest neighbours of e_a and cos ≥ δ; phrases with ≤ 2 alphanumerics are
       skipped; a pair that already has a relation edge keeps only that edge.

The graph is built from edge lists in one ``igraph.Graph`` call (not edge by edge).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gta_verl.data.types import Passage, Triple
from gta_verl.kb.normalize import alnum_count, normalize_entity, normalize_relation
from gta_verl.kb.openie.base import Extraction


@dataclass
class NodeTables:
    """Normalized node/triple tables derived from the extractions (no embeddings yet)."""

    entities: list[str]
    triples: list[Triple]
    triple_entity_ids: np.ndarray  # int64 [n_triples, 2]
    doc_entity: list[tuple[int, int]]  # (doc index, entity index), sorted, unique
    counts: dict[str, int] = field(default_factory=dict)


def collect_nodes(
    passages: Sequence[Passage], extractions: Mapping[str, Extraction], include_ner_entities: bool = False
) -> NodeTables:
    """Normalize every extraction into entity/triple tables, in corpus order.

    Entity order = first appearance (document order, then triple order), so the
    same passages and extractions always give the same node ids.
    Triples whose subject or object normalizes to "" are dropped and counted.
    """
    ent_index: dict[str, int] = {}
    triples: list[Triple] = []
    pair_ids: list[tuple[int, int]] = []
    doc_ent: set[tuple[int, int]] = set()
    seen: set[tuple[str, str, str, str]] = set()
    dropped = dup = missing = 0

    def ent(name: str) -> int:
        return ent_index.setdefault(name, len(ent_index))

    for d, p in enumerate(passages):
        ex = extractions.get(p.doc_id)
        if ex is None:
            missing += 1
            continue
        for s_raw, r_raw, o_raw in ex.triples:
            s, r, o = normalize_entity(s_raw), normalize_relation(r_raw), normalize_entity(o_raw)
            if not s or not o:
                dropped += 1
                continue
            if (s, r, o, p.doc_id) in seen:
                dup += 1
                continue
            seen.add((s, r, o, p.doc_id))
            si, oi = ent(s), ent(o)
            triples.append(Triple(s, r, o, p.doc_id))
            pair_ids.append((si, oi))
            doc_ent.update(((d, si), (d, oi)))
        if include_ner_entities:
            for e_raw in ex.entities:
                e = normalize_entity(e_raw)
                if e:
                    doc_ent.add((d, ent(e)))
    tei = np.asarray(pair_ids, dtype=np.int64).reshape(-1, 2)
    counts = {
        "triples_dropped_empty_entity": dropped,
        "triples_duplicate": dup,
        "passages_without_extraction": missing,
    }
    return NodeTables(list(ent_index), triples, tei, sorted(doc_ent), counts)


def relation_edges(triple_entity_ids: np.ndarray) -> list[tuple[int, int, float]]:
    """One edge per unordered entity pair; weight = triple count. Returns sorted (a, b, w), a < b."""
    counts: dict[tuple[int, int], int] = {}
    for a, b in triple_entity_ids.tolist():
        if a != b:
            key = (a, b) if a < b else (b, a)
            counts[key] = counts.get(key, 0) + 1
    return [(a, b, float(c)) for (a, b), c in sorted(counts.items())]


def synonymy_edges(
    entity_emb: np.ndarray,
    entities: Sequence[str],
    threshold: float = 0.8,
    k: int = 2047,
    min_alnum: int = 3,
    chunk: int = 4096,
    progress: bool = False,
) -> list[tuple[int, int, float]]:
    """Synonymy pairs: exact neighbours with cos ≥ δ among each entity's k nearest (faiss, inner product).

    Same result as HippoRAG 2's k-NN search then threshold, computed as an exact
    faiss range search (cos ≥ δ) capped at the k best per entity: with δ = 0.8
    almost no entity has k neighbours above δ, so this skips the k-heap work
    (≈ 10× faster on MuSiQue, see docs/benchmarks/kb.md). Pairs are symmetrized
    (kept if found from either side) and weighted by the cosine.

    Args:
        entity_emb: ``float32 [n_entities, dim]``, L2-normalized.
        entities: Normalized names (for the ≤ 2-alphanumerics rule).
        threshold: δ.
        k: Neighbours kept per entity at most (HippoRAG 2: 2047).
        min_alnum: Phrases with fewer alphanumerics than this are skipped (3 ⇒ "≤ 2 skipped").
        chunk: Query rows per faiss call.

    Returns:
        Sorted ``(a, b, cos)`` with ``a < b`` (entity indices).
    """
    import faiss

    idx_ok = np.flatnonzero([alnum_count(e) >= min_alnum for e in entities])
    if len(idx_ok) < 2:
        return []
    emb = np.ascontiguousarray(entity_emb[idx_ok], dtype=np.float32)
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    best: dict[tuple[int, int], float] = {}
    starts = range(0, len(idx_ok), chunk)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="synonymy search", unit="chunk")
    for s in starts:
        # faiss keeps scores > radius; step just below δ, then apply ≥ δ exactly
        lims, scores, nbrs = index.range_search(
            emb[s : s + chunk], float(np.nextafter(threshold, -1, dtype=np.float32))
        )
        for r in range(len(lims) - 1):
            hits = slice(lims[r], lims[r + 1])
            _fold_hits(best, idx_ok, int(idx_ok[s + r]), scores[hits], nbrs[hits], threshold, k)
    return [(a, b, w) for (a, b), w in sorted(best.items())]


def _fold_hits(
    best: dict[tuple[int, int], float],
    idx_ok: np.ndarray,
    a: int,
    sc: np.ndarray,
    nb: np.ndarray,
    threshold: float,
    k: int,
) -> None:
    """Fold entity ``a``'s range-search hits into ``best``: cos ≥ δ, its k best, the pair's best cosine.

    ``nb`` are rows of the searched subset (entity ``idx_ok[row]``); a pair is keyed ``(min, max)``
    so either side's hit keeps it.
    """
    keep = sc >= threshold
    sc, nb = sc[keep], nb[keep]
    if len(sc) > k + 1:  # the k best besides the entity itself
        top = np.argsort(-sc, kind="stable")[: k + 1]
        sc, nb = sc[top], nb[top]
    for b_local, w in zip(nb.tolist(), sc.tolist(), strict=True):
        b = int(idx_ok[b_local])
        if a != b:
            key = (a, b) if a < b else (b, a)
            best[key] = max(best.get(key, -1.0), float(w))


def assemble_graph(
    n_docs: int,
    n_entities: int,
    doc_entity: Sequence[tuple[int, int]],
    relations: Sequence[tuple[int, int, float]],
    synonyms: Sequence[tuple[int, int, float]],
) -> tuple[object, int]:
    """Build the undirected igraph from the three edge lists.

    Returns:
        (graph, number of synonymy pairs skipped because a relation edge already joins them).
    """
    import igraph as ig

    rel_pairs = {(a, b) for a, b, _ in relations}
    syn = [(a, b, w) for a, b, w in synonyms if (a, b) not in rel_pairs]
    edges = [(d, n_docs + e) for d, e in doc_entity]
    edges += [(n_docs + a, n_docs + b) for a, b, _ in relations]
    edges += [(n_docs + a, n_docs + b) for a, b, _ in syn]
    weights = [1.0] * len(doc_entity) + [float(w) for *_, w in relations] + [float(w) for *_, w in syn]
    kinds = ["doc_entity"] * len(doc_entity) + ["relation"] * len(relations) + ["synonymy"] * len(syn)
    g = ig.Graph(
        n=n_docs + n_entities, edges=edges, directed=False, edge_attrs={"weight": weights, "kind": kinds}
    )
    return g, len(synonyms) - len(syn)


def graph_from_edge_table(
    n_nodes: int, src: np.ndarray, dst: np.ndarray, kind: Sequence[str], weight: np.ndarray
) -> object:
    """Rebuild the graph from a stored edge table; weights become Python floats."""
    import igraph as ig

    return ig.Graph(
        n=n_nodes,
        edges=list(zip(src.tolist(), dst.tolist(), strict=True)),
        directed=False,
        edge_attrs={"weight": np.asarray(weight, dtype=np.float64).tolist(), "kind": [str(k) for k in kind]},
    )
