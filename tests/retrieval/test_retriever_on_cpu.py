"""GraphRetriever on the hand-built toy KB: personalization, union/provenance, fallbacks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.fusion import fuse
from gta_verl.retrieval.retriever import FLAG_NO_ENTITIES, FLAG_TRUNCATED, GraphRetriever, seed_entities
from gta_verl.testing.toy_kb import make_toy_kb

Q = "Where was the president of France born?"


@pytest.fixture(scope="module")
def retriever(toy_kb, hash_embedder) -> GraphRetriever:
    return GraphRetriever(toy_kb, hash_embedder)


def test_seed_entities_hand_computed() -> None:
    # triples (e0,e1) 0.9 and (e1,e2) 0.3; df = [1, 3, 2]
    # link scores: e0 0.9, e1 (0.9+0.3)/2 = 0.6, e2 0.3 → weights 0.9/1, 0.6/3, 0.3/2
    ids, w = seed_entities(np.array([0.9, 0.3]), np.array([[0, 1], [1, 2]]), np.array([1, 3, 2]))
    assert ids.tolist() == [0, 1, 2]
    np.testing.assert_allclose(w, [0.9, 0.2, 0.15])
    ids, w = seed_entities(np.array([0.9, 0.3]), np.array([[0, 1], [1, 2]]), np.array([1, 3, 2]), 2, False)
    assert ids.tolist() == [0, 1]
    np.testing.assert_allclose(w, [0.9, 0.6])


def test_personalization_from_hand_computed_triple_scores(retriever: GraphRetriever, toy_kb) -> None:
    kb = toy_kb
    t_paris = next(i for i, t in enumerate(kb.triples) if t.subject == "paris")  # (paris, capital of, france)
    t_macron = next(
        i for i, t in enumerate(kb.triples) if t.relation == "born in" and t.subject == "emmanuel macron"
    )
    scores = np.array([[0.8, 0.5]], dtype=np.float32)
    ids = np.array([[t_paris, t_macron]])
    dense = np.linspace(0.0, 0.9, kb.n_docs)[None, :]
    cfg = dataclasses.replace(retriever.config, passage_node_weight=0.1)
    pers, seeded = retriever.with_config(cfg).personalization(scores, ids, np.array([0.0]), dense)
    assert seeded.tolist() == [True]
    pers = pers.toarray()  # sparse [1, N]
    ent = {e: j for j, e in enumerate(kb.entities)}
    # documents mentioning each: paris {Paris}, france {Paris, France, Amiens}, macron/amiens 2 each
    # min–max with min 0, max 0.8 → 1.0 and 0.625; weight = score / df
    expected = {"paris": 1.0 / 1, "france": 1.0 / 3, "emmanuel macron": 0.625 / 2, "amiens": 0.625 / 2}
    for name, w in expected.items():
        assert pers[0, kb.n_docs + ent[name]] == pytest.approx(w), name
    assert np.count_nonzero(pers[0, kb.n_docs :]) == 4
    np.testing.assert_allclose(pers[0, : kb.n_docs], 0.1 * np.linspace(0, 1, kb.n_docs))
    # only the best 3 dense documents seeded: the last three of the linspace (1, 8/9, 7/9 after min–max)
    cfg3 = dataclasses.replace(cfg, passage_seed_top=3)
    pers3, _ = retriever.with_config(cfg3).personalization(scores, ids, np.array([0.0]), dense)
    docs3 = pers3.toarray()[0, : kb.n_docs]
    assert np.flatnonzero(docs3).tolist() == [kb.n_docs - 3, kb.n_docs - 2, kb.n_docs - 1]
    np.testing.assert_allclose(docs3[-3:], 0.1 * np.array([7, 8, 9]) / 9)


def test_hybrid_is_deduplicated_union_with_provenance(retriever: GraphRetriever) -> None:
    cfg = retriever.config
    (hyb,) = retriever.retrieve([Q])
    (g,) = retriever.with_config(dataclasses.replace(cfg, mode="graph")).retrieve([Q])
    (d,) = retriever.with_config(dataclasses.replace(cfg, mode="dense")).retrieve([Q])
    assert len(g.hits) == cfg.k_graph and len(d.hits) == cfg.k_dense
    assert len(hyb.doc_ids) == len(set(hyb.doc_ids)) == len(set(g.doc_ids) | set(d.doc_ids))
    for h in hyb.hits:
        in_g, in_d = h.doc_id in g.doc_ids, h.doc_id in d.doc_ids
        assert h.source == ("both" if in_g and in_d else "graph" if in_g else "dense")
        assert h.title and h.text
    # order = fuse(graph, dense) with the default dense_head = 3
    assert (cfg.fusion, cfg.dense_head) == ("dense_head", 3)
    idx = retriever.kb.doc_index_by_id()
    expect = fuse([idx[x] for x in g.doc_ids], [idx[x] for x in d.doc_ids], "dense_head", 3)
    assert [idx[x] for x in hyb.doc_ids] == expect
    assert all(f not in hyb.flags for f in (FLAG_NO_ENTITIES, FLAG_TRUNCATED))


def test_fusion_rules() -> None:
    assert fuse([5, 1, 2], [1, 7, 5], "dense_head", 1) == [1, 5, 2, 7]
    assert fuse([5, 1, 2], [1, 7, 5], "interleave") == [5, 1, 7, 2]
    assert fuse([5, 1, 2], [1, 7, 5], "graph_first") == [5, 1, 2, 7]
    assert fuse([5, 1, 2], [1, 7, 5], "dense_first") == [1, 7, 5, 2]
    # rrf (k=60): 5 → 1/61 + 1/63, 1 → 1/62 + 1/61, 2 → 1/63, 7 → 1/62
    assert fuse([5, 1, 2], [1, 7, 5], "rrf") == [1, 5, 7, 2]


def test_rank_gives_full_ordering(retriever: GraphRetriever) -> None:
    (r,) = retriever.rank([Q], k=None)
    assert sorted(r.doc_ids) == sorted(p.doc_id for p in retriever.kb.passages)
    assert retriever.rank([Q], 4)[0].doc_ids == r.doc_ids[:4]


def test_no_usable_triples_falls_back_to_dense_flagged(
    retriever: GraphRetriever, toy_kb, hash_embedder
) -> None:
    for mode in ("hybrid", "graph"):
        strict = retriever.with_config(
            dataclasses.replace(retriever.config, mode=mode, min_triple_score=0.999)
        )
        (r,) = strict.retrieve([Q])
        assert FLAG_NO_ENTITIES in r.flags
        assert {h.source for h in r.hits} == {"dense"}
    bare = GraphRetriever(make_toy_kb(hash_embedder, with_triples=False), hash_embedder)
    (r,) = bare.retrieve([Q])
    assert FLAG_NO_ENTITIES in r.flags and len(r.hits) == 3


def test_query_validation_and_truncation(retriever: GraphRetriever) -> None:
    with pytest.raises(ValueError, match="query 1 is empty"):
        retriever.retrieve([Q, "   \n"])
    with pytest.raises(TypeError, match="sequence of queries"):
        retriever.retrieve(Q)  # type: ignore[arg-type]
    short = retriever.with_config(
        dataclasses.replace(retriever.config, max_query_chars=10, max_query_words=0)
    )
    (r,) = short.retrieve(["capital of Japan and more words"])
    assert r.query == "capital of" and FLAG_TRUNCATED in r.flags
    words = retriever.with_config(dataclasses.replace(retriever.config, max_query_words=2))
    assert words.retrieve(["capital of Japan"])[0].query == "capital of"


def test_batch_equals_single_queries(retriever: GraphRetriever) -> None:
    qs = [Q, "capital of Japan", "Who is the chancellor of Germany?"]
    batched = retriever.retrieve(qs)
    single = [retriever.retrieve([q])[0] for q in qs]
    assert [r.doc_ids for r in batched] == [r.doc_ids for r in single]


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="mode"):
        RetrieverConfig(mode="sparse")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        RetrieverConfig(alpha=0.0)
    with pytest.raises(ValueError, match="unknown RetrieverConfig keys"):
        RetrieverConfig.from_dict({"k": 3})
    assert RetrieverConfig.from_dict(RetrieverConfig(k_graph=5).to_dict()).k_graph == 5


def test_embedder_mismatch_is_rejected(toy_kb) -> None:
    from gta_verl.testing.toy_kb import HashEmbedder

    with pytest.raises(ValueError, match="embedded with"):
        GraphRetriever(toy_kb, HashEmbedder(name="other"))


@pytest.mark.parametrize("index", ["ivf", "hnsw"])
def test_approximate_indexes_run(retriever: GraphRetriever, index: str) -> None:
    r = retriever.with_config(dataclasses.replace(retriever.config, index=index)).retrieve([Q])[0]
    assert r.ok and r.hits
