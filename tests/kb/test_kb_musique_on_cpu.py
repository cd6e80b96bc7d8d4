"""The bundled MuSiQue KB (built by the session fixture exactly as `gta-verl kb build` does)."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest

from gta_verl.kb.normalize import alnum_count, normalize_entity
from gta_verl.kb.stats import kb_stats
from gta_verl.kb.store import KBLoadError, load_extractions, load_kb


def test_counts_match_manifest_and_table5_shape(musique_kb):
    st = kb_stats(musique_kb)
    assert st["document_nodes"] == 1890
    assert st["entity_nodes"] > 10000
    assert min(st["doc_entity_edges"], st["relation_edges"], st["synonymy_edges"]) > 0
    assert musique_kb.manifest["counts"] == st
    assert musique_kb.graph.vcount() == 1890 + st["entity_nodes"]
    op = musique_kb.manifest["openie"]
    assert op["n_malformed_triples"] == 185 and op["by_status"]["empty"] == 2 and op["n_passages"] == 1890


def test_shapes_and_normalized_embeddings(musique_kb):
    kb = musique_kb
    for emb, n in (
        (kb.passage_emb, kb.n_docs),
        (kb.entity_emb, kb.n_entities),
        (kb.triple_emb, len(kb.triples)),
    ):
        assert emb.dtype == np.float32 and emb.shape == (n, 384)
        np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)
    assert kb.triple_entity_ids.shape == (len(kb.triples), 2)
    ents = np.asarray(kb.entities, dtype=object)
    tei = kb.triple_entity_ids
    assert list(ents[tei[:, 0]]) == [t.subject for t in kb.triples]
    assert list(ents[tei[:, 1]]) == [t.object for t in kb.triples]
    assert all(normalize_entity(e) == e and e for e in kb.entities)


def test_every_doc_entity_edge_is_backed_by_an_extraction(musique_kb, musique_kb_dir):
    kb = musique_kb
    raw = load_extractions(musique_kb_dir)
    backed: set[tuple[int, int]] = set()
    ent_idx = {e: j for j, e in enumerate(kb.entities)}
    for d, p in enumerate(kb.passages):
        for s, _, o in raw[p.doc_id].triples:
            for name in (normalize_entity(s), normalize_entity(o)):
                if name:
                    backed.add((d, kb.n_docs + ent_idx[name]))
    de = {(e.source, e.target) for e in kb.graph.es if e["kind"] == "doc_entity"}
    assert de == backed


def test_relation_and_synonymy_edges(musique_kb):
    kb = musique_kb
    n = kb.n_docs
    pair_count = Counter(tuple(sorted(p)) for p in kb.triple_entity_ids.tolist() if p[0] != p[1])
    rel = {(e.source - n, e.target - n): e["weight"] for e in kb.graph.es if e["kind"] == "relation"}
    assert rel == {k: float(v) for k, v in pair_count.items()}
    syn = [(e.source - n, e.target - n, e["weight"]) for e in kb.graph.es if e["kind"] == "synonymy"]
    a, b, w = (np.array(x) for x in zip(*syn, strict=True))
    cos = np.einsum("ij,ij->i", kb.entity_emb[a], kb.entity_emb[b])
    assert (w >= 0.8).all() and (cos >= 0.8 - 1e-5).all()
    np.testing.assert_allclose(w, cos, atol=1e-5)
    assert all(alnum_count(kb.entities[i]) > 2 for i in np.concatenate([a, b]))
    assert all(type(x) is float for x in kb.graph.es["weight"])
    assert not kb.graph.is_directed() and not kb.graph.has_multiple()


def test_save_load_roundtrip(musique_kb, musique_kb_dir, tmp_path):
    from gta_verl.kb.store import save_kb

    out = tmp_path / "copy"
    save_kb(musique_kb, out, extractions=load_extractions(musique_kb_dir))
    again = load_kb(out)
    assert again.passages == musique_kb.passages and again.entities == musique_kb.entities
    assert again.triples == musique_kb.triples
    np.testing.assert_array_equal(again.triple_emb, musique_kb.triple_emb)
    assert again.graph.get_edgelist() == musique_kb.graph.get_edgelist()
    assert again.graph.es["weight"] == musique_kb.graph.es["weight"]
    assert again.manifest["counts"] == musique_kb.manifest["counts"]


def test_tampered_file_fails_with_clear_message(musique_kb_dir, tmp_path):
    copy = tmp_path / "kb"
    shutil.copytree(musique_kb_dir, copy)
    with open(copy / "entity_emb.npy", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x00\x80\x7f")
    with pytest.raises(KBLoadError, match=r"entity_emb\.npy: checksum mismatch"):
        load_kb(copy)
    (copy / "entity_emb.npy").unlink()
    with pytest.raises(KBLoadError, match="missing"):
        load_kb(copy)


def test_wrong_schema_and_not_a_kb(musique_kb_dir, tmp_path):
    with pytest.raises(KBLoadError, match="not a KB directory"):
        load_kb(tmp_path)
    copy = tmp_path / "kb"
    shutil.copytree(musique_kb_dir, copy)
    m = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**m, "schema_version": 999}))
    with pytest.raises(KBLoadError, match="schema version 999"):
        load_kb(copy)
