"""Score-level fusion (``fusion="score"``): hand-computed orders, validation, the retriever path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.fusion import fuse, score_fusion
from gta_verl.retrieval.retriever import GraphRetriever

# graph ranking 5, 1, 2 with PPR 0.30, 0.15, 0.06; dense ranking 1, 7, 5
GRAPH, PPR, DENSE = [5, 1, 2], [0.30, 0.15, 0.06], [1, 7, 5]
COS = {5: 0.50, 1: 0.70, 2: 0.40, 7: 0.60}
# candidates in interleaved order: 5, 1, 7, 2
# dense min–max over them (min 0.40 = doc 2, max 0.70 = doc 1): 5 → 1/3, 1 → 1, 7 → 2/3, 2 → 0
# PPR / best PPR 0.30: 5 → 1, 1 → 0.5, 2 → 0.2, 7 (not in the graph ranking) → 0


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        # λ = 0.5: 5 → (1/3 + 1)/2 = 0.667, 1 → (1 + 0.5)/2 = 0.75, 7 → (2/3)/2 = 0.333, 2 → 0.2/2 = 0.1
        (0.5, [1, 5, 7, 2]),
        # λ = 0.2: 5 → 0.2/3 + 0.8 = 0.867, 1 → 0.2 + 0.4 = 0.6, 7 → 0.2·2/3 = 0.133, 2 → 0.8·0.2 = 0.16
        (0.2, [5, 1, 2, 7]),
        # λ = 0.9: 5 → 0.3 + 0.1 = 0.4, 1 → 0.9 + 0.05 = 0.95, 7 → 0.6, 2 → 0.02
        (0.9, [1, 7, 5, 2]),
        (1.0, [1, 7, 5, 2]),  # dense cosine order of the candidates
        (0.0, [5, 1, 2, 7]),  # PPR order, then the dense-only document
    ],
)
def test_score_fusion_hand_computed(weight: float, expected: list[int]) -> None:
    assert score_fusion(GRAPH, DENSE, PPR, COS, weight) == expected
    assert fuse(GRAPH, DENSE, "score", graph_scores=PPR, dense_scores=COS, dense_weight=weight) == expected


def test_score_fusion_reads_a_full_dense_row_and_keeps_interleaved_order_on_ties() -> None:
    row = np.zeros(8)
    for d, c in COS.items():
        row[d] = c
    assert score_fusion(GRAPH, DENSE, PPR, row, 0.5) == [1, 5, 7, 2]
    # equal cosines (span 0 → every dense term 1) and zero PPR (every graph term 0): a full tie,
    # so the interleaved order g1, d1, g2, d2, … stays: 5, 1, 7, 2
    assert score_fusion(GRAPH, DENSE, [0.0, 0.0, 0.0], dict.fromkeys(COS, 0.3), 0.5) == [5, 1, 7, 2]


def test_score_fusion_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="graph_scores"):
        score_fusion(GRAPH, DENSE, PPR[:2], COS, 0.5)
    with pytest.raises(ValueError, match="dense_weight"):
        score_fusion(GRAPH, DENSE, PPR, COS, 1.5)
    with pytest.raises(ValueError, match="needs graph_scores"):
        fuse(GRAPH, DENSE, "score")


def test_config_validates_fusion_weight() -> None:
    assert RetrieverConfig(fusion="score", fusion_weight=0.3).fusion_weight == 0.3
    for bad in (-0.1, 1.01):
        with pytest.raises(ValueError, match="fusion_weight"):
            RetrieverConfig(fusion_weight=bad)


def test_retriever_orders_hybrid_hits_by_score_fusion(toy_kb, hash_embedder) -> None:
    q = "Where was the president of France born?"
    cfg = RetrieverConfig(fusion="score", fusion_weight=0.4)
    r = GraphRetriever(toy_kb, hash_embedder, cfg)
    (hyb,) = r.retrieve([q])
    (g,) = r.with_config(dataclasses.replace(cfg, mode="graph")).retrieve([q])
    (d,) = r.with_config(dataclasses.replace(cfg, mode="dense")).retrieve([q])
    idx = toy_kb.doc_index_by_id()
    dense_row = hash_embedder.encode([q])[0] @ toy_kb.passage_emb.T
    expect = score_fusion(
        [idx[x] for x in g.doc_ids], [idx[x] for x in d.doc_ids], [h.score for h in g.hits], dense_row, 0.4
    )
    assert [idx[x] for x in hyb.doc_ids] == expect
    assert set(hyb.doc_ids) == set(g.doc_ids) | set(d.doc_ids)
