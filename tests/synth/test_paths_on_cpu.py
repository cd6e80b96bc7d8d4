"""Path sampler invariants (GTA-RAG §3.4, eq. 13) on the real MuSiQue KB and a hand-built KB."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gta_verl.synth.paths import (
    PathSampler,
    PathSamplerConfig,
    build_path,
    build_path_index,
    hop_mix_for,
    sample_path,
    sample_paths,
)


@pytest.fixture(scope="module")
def musique_index(musique_kb):
    return build_path_index(musique_kb)


@pytest.fixture(scope="module")
def musique_paths(musique_index):
    return sample_paths(musique_index, 300, seed=7)


def _edge_kind(g, a: int, b: int) -> str | None:
    eid = g.get_eid(a, b, directed=False, error=False)
    return None if eid < 0 else g.es[eid]["kind"]


def test_paths_respect_hops_and_visit_each_document_once(musique_kb, musique_paths):
    assert len(musique_paths) == 300
    for p in musique_paths:
        assert p.hops in (2, 3, 4)
        assert len(set(p.doc_indices)) == p.hops  # without replacement
        assert all(0 <= d < musique_kb.n_docs for d in p.doc_indices)
        assert p.doc_ids == tuple(musique_kb.passages[d].doc_id for d in p.doc_indices)
        assert len(p.links) == p.hops - 1
        assert p.hops <= p.sampled_docs <= 10  # paper cap: 10 sampled document nodes per path
        bridges = [e for link in p.links for e in link.entity_ids]
        assert len(bridges) == len(set(bridges))  # entity nodes are not revisited either


def test_consecutive_documents_linked_through_at_most_two_entities(musique_kb, musique_paths):
    g, n = musique_kb.graph, musique_kb.n_docs
    for p in musique_paths:
        for link, (a, b) in zip(p.links, zip(p.doc_indices, p.doc_indices[1:], strict=False), strict=True):
            assert (link.src_doc, link.dst_doc) == (a, b)
            assert 1 <= len(link.entity_ids) <= 2
            first, last = (n + e for e in (link.entity_ids[0], link.entity_ids[-1]))
            assert _edge_kind(g, a, first) == "doc_entity"
            assert _edge_kind(g, b, last) == "doc_entity"
            if len(link.entity_ids) == 1:
                assert link.kind == "shared"
            else:
                assert link.kind in ("relation", "synonymy")
                assert _edge_kind(g, first, last) == link.kind
            assert link.entities == tuple(musique_kb.entities[e] for e in link.entity_ids)


def test_hop_triples_justify_the_link(musique_kb, musique_paths):
    ids = musique_kb.doc_index_by_id()
    n_justified = 0
    for p in musique_paths:
        for link in p.links:
            for t in link.src_triples:
                assert ids[t.doc_id] == link.src_doc and link.entities[0] in (t.subject, t.object)
            for t in link.dst_triples:
                assert ids[t.doc_id] == link.dst_doc and link.entities[-1] in (t.subject, t.object)
            for t in link.link_triples:
                assert {t.subject, t.object} == set(link.entities)
            n_justified += bool(link.src_triples and link.dst_triples)
    # bundled KB links documents through triple entities, so almost every hop has triples on both ends
    assert n_justified >= 0.9 * sum(len(p.links) for p in musique_paths)


def test_sampling_is_reproducible_and_deduplicated(musique_index, musique_paths):
    again = sample_paths(musique_index, 300, seed=7)
    assert [p.key for p in again] == [p.key for p in musique_paths]
    other = sample_paths(musique_index, 300, seed=8)
    assert [p.key for p in other] != [p.key for p in musique_paths]
    assert len({p.key for p in musique_paths}) == len(musique_paths)


def test_hop_mix_follows_config(musique_paths, musique_index):
    counts = Counter(p.hops for p in musique_paths)
    assert set(counts) == {2, 3, 4}  # every configured hop count occurs on the real KB
    only3 = sample_paths(musique_index, 20, PathSamplerConfig(hop_mix=hop_mix_for([3])), seed=1)
    assert {p.hops for p in only3} == {3}


def test_hop_probabilities_hand_computed():
    # our default mix (the paper gives none): weights 0.8, 0.15, 0.05 sum to 1
    assert PathSamplerConfig().hop_probs.tolist() == pytest.approx([0.8, 0.15, 0.05])
    # hop_mix_for([2, 5]): 5 is not in the base mix → the smallest base weight 0.05;
    # normalized 0.8/0.85 = 0.941176, 0.05/0.85 = 0.058824
    cfg = PathSamplerConfig(hop_mix=hop_mix_for([2, 5]), max_sampled_docs=10)
    assert cfg.hops == (2, 5) and cfg.hop_probs.tolist() == pytest.approx([0.941176, 0.058824], abs=1e-6)


def test_hop_draws_follow_the_mix(monkeypatch):
    """Each walk's hop count is drawn from the mix (kept paths then skew short: long walks dead-end
    more). 10 attempts × 1,000 = 10,000 draws; expected 8,000 / 1,500 / 500 with binomial
    σ = sqrt(10⁴·0.8·0.2) = 40, sqrt(10⁴·0.15·0.85) = 35.7, sqrt(10⁴·0.05·0.95) = 21.8; allow 4σ."""
    import gta_verl.synth.paths as paths

    drawn: list[int] = []
    monkeypatch.setattr(paths, "sample_path", lambda index, h, rng, cfg: drawn.append(h))  # every walk fails
    sampler = PathSampler(None, PathSamplerConfig(max_attempts_factor=10), seed=0)
    assert sampler.sample(1000) == [] and len(drawn) == 10_000
    c = Counter(drawn)
    assert abs(c[2] - 8000) <= 160 and abs(c[3] - 1500) <= 143 and abs(c[4] - 500) <= 87


def test_bridges_skip_numbers_dates_and_hubs(musique_kb, musique_index, musique_paths):
    for p in musique_paths:
        for link in p.links:
            for e in link.entity_ids:
                assert musique_index.bridge_ok[e]
                assert len(musique_index.entity_docs[e]) <= 50
    j = musique_kb.entities.index("1963") if "1963" in musique_kb.entities else None
    if j is not None:
        assert not musique_index.bridge_ok[j]


def test_tiny_kb_link_kinds_and_manual_path(tiny_kb):
    index = build_path_index(tiny_kb)
    paths = sample_paths(index, 25, seed=1)
    assert {link.kind for p in paths for link in p.links} == {"shared", "relation", "synonymy"}
    titles = [p.title for p in tiny_kb.passages]
    path = build_path(index, [titles.index("Barack Obama"), titles.index("Honolulu")], [["honolulu"]])
    (link,) = path.links
    assert link.kind == "shared"
    assert [(t.subject, t.relation, t.object) for t in link.src_triples] == [
        ("barack obama", "born in", "honolulu")
    ]
    assert {t.relation for t in link.dst_triples} == {"capital of", "located on"}
    syn = build_path(
        index,
        [titles.index("Barack Obama"), titles.index("Obama Presidential Center")],
        [["barack obama", "obama"]],
    )
    assert syn.links[0].kind == "synonymy"
    with pytest.raises(ValueError, match="does not link"):
        build_path(index, [titles.index("Oahu"), titles.index("Chicago")], [["oahu"]])


def test_cap_on_sampled_documents_abandons_long_walks(tiny_kb):
    index = build_path_index(tiny_kb)
    cfg = PathSamplerConfig(hop_mix=((4, 1.0),), max_sampled_docs=4)
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = sample_path(index, 4, rng, cfg)
        assert p is None or p.sampled_docs <= 4
    sampler = PathSampler(index, cfg, seed=0)
    sampler.sample(5)
    s = sampler.stats
    assert s.attempts == s.paths + s.dead_ends + s.duplicates


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hop_mix": ()}, "empty"),
        ({"hop_mix": ((2, -1.0),)}, "weight"),
        ({"hop_mix": ((0, 1.0),)}, "hop count"),
        ({"hop_mix": ((12, 1.0),)}, "max_sampled_docs"),
        ({"max_bridge_docs": 1}, "max_bridge_docs"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PathSamplerConfig(**kwargs)
