"""The entity seeds of a query's personalization vector (GTA-RAG eq 7's p_q, the HippoRAG 2 way).

Pure numpy over the KB's arrays; :class:`gta_verl.retrieval.retriever.GraphRetriever` calls them
once per KB (:func:`entity_doc_frequency`) and once per query (:func:`seed_entities`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["entity_doc_frequency", "seed_entities"]


def seed_entities(
    triple_scores: np.ndarray,
    entity_pairs: np.ndarray,
    doc_freq: np.ndarray,
    max_seed_entities: int = 5,
    doc_frequency_norm: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Entity seeds of one query's personalization from its top triples (HippoRAG 2).

    Each triple's score goes to its subject and object; an entity's weight is the mean
    over its occurrences of ``score / df(entity)`` (``df`` = documents containing it,
    when ``doc_frequency_norm``). Entities are ranked by their mean triple score and
    only the best ``max_seed_entities`` are kept (0 = all).

    Args:
        triple_scores: ``float [n]`` normalized scores of the top-n triples.
        entity_pairs: ``int [n, 2]`` entity indices (subject, object) of those triples.
        doc_freq: ``int [n_entities]`` document frequency of every entity.
        max_seed_entities: Seeds kept.
        doc_frequency_norm: Divide by document frequency.

    Returns:
        ``(entity_ids int64 [m], weights float64 [m])``, ranked best first.

    >>> ids, w = seed_entities(np.array([1.0, 0.5]), np.array([[0, 1], [1, 2]]), np.array([1, 2, 1]))
    >>> ids.tolist(), w.tolist()
    ([0, 1, 2], [1.0, 0.375, 0.5])
    """
    sums: dict[int, list[float]] = {}
    for score, pair in zip(
        np.asarray(triple_scores, dtype=np.float64), np.asarray(entity_pairs), strict=True
    ):
        for ent in dict.fromkeys(int(e) for e in pair):  # a self-relation counts once
            sums.setdefault(ent, []).append(float(score))
    if not sums:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    ents = list(sums)  # insertion order = order of first (best) triple: stable tie-break
    link = np.array([np.mean(sums[e]) for e in ents])
    order = np.argsort(-link, kind="stable")
    if max_seed_entities:
        order = order[:max_seed_entities]
    ids = np.array(ents, dtype=np.int64)[order]
    weights = link[order]
    if doc_frequency_norm:
        weights = weights / np.maximum(np.asarray(doc_freq)[ids], 1)
    return ids, weights.astype(np.float64)


def entity_doc_frequency(kb: Any) -> np.ndarray:
    """``int64 [n_entities]``: documents linked to each entity by a ``doc_entity`` edge."""
    df = np.zeros(kb.n_entities, dtype=np.int64)
    g = kb.graph
    if g.ecount() == 0:
        return df
    edges = np.asarray(g.get_edgelist(), dtype=np.int64)
    kinds = np.asarray(g.es["kind"]) if "kind" in g.es.attributes() else None
    if kinds is not None:
        edges = edges[kinds == "doc_entity"]
    is_doc = edges < kb.n_docs
    mixed = is_doc[:, 0] != is_doc[:, 1]  # without kinds, any doc–entity pair
    ent_nodes = np.where(is_doc[mixed, 0], edges[mixed, 1], edges[mixed, 0])
    np.add.at(df, ent_nodes - kb.n_docs, 1)
    return df
