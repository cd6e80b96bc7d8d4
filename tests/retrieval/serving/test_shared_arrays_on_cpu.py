"""Node-shared, memory-mapped retrieval arrays give the in-process answers on the MuSiQue KB; a damaged or
foreign node cache is rebuilt, never served (on the toy KB)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from gta_verl.kb.store import load_kb, manifest_digest
from gta_verl.retrieval.backends import open_kb_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.index import VectorIndex, cpu_has_bf16
from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.serving.shared_arrays import (
    SharedCacheError,
    cache_problem,
    load_shared_retriever,
    shared_cache_key,
)


def _no_build(self) -> None:
    raise AssertionError("a replica after the first must read the node cache's fact index, not build one")


@pytest.mark.parametrize(
    "settings",
    [
        {"index": "flat"},
        {"index": "ivf"},
        {"index": "hnsw", "index_refine": 2},
        {"index": "flat", "triple_scan": "bfloat16"},
    ],
    ids=["flat", "ivf", "hnsw-refine", "flat-bf16"],
)
def test_shared_equals_in_process(
    musique_kb_dir, musique_kb, musique_qa, embedder, tmp_path, monkeypatch, settings
) -> None:
    cfg = RetrieverConfig(**settings)
    local = open_kb_retriever(musique_kb, cfg, embedder)
    first = load_shared_retriever(musique_kb_dir, cfg, embedder, cache_root=tmp_path)
    assert first._fact_index.source is None  # the first replica built it
    monkeypatch.setattr(GraphRetriever, "_build_fact_index", _no_build)
    second = load_shared_retriever(musique_kb_dir, cfg, embedder, cache_root=tmp_path)  # reads the cache
    (cache,) = [p for p in tmp_path.iterdir() if p.is_dir()]  # written once
    assert second._fact_index.source == cache / "fact_index.faiss"
    scan = settings.get("triple_scan", "auto")  # auto: the bf16 pre-scan exactly where the CPU has bf16 units
    want_bf16 = cfg.index == "flat" and (scan == "bfloat16" or (scan == "auto" and cpu_has_bf16()))
    for fi in (first._fact_index, second._fact_index):  # the same pre-scan and rescoring as built in process
        assert (fi._bf16 is not None) == want_bf16
        assert (fi.vectors is not None) == (cfg.index != "flat")  # rescoring on by default (index_refine 4)
    questions = [q.question for q in musique_qa[:20]]
    want = local.rank(questions, 10)
    for shared in (first, second):
        got = shared.rank(questions, 10)
        assert [r.doc_ids for r in got] == [r.doc_ids for r in want]
        assert [[h.score for h in r.hits] for r in got] == [[h.score for h in r.hits] for r in want]
    # the big arrays are read-only maps of files, not private copies
    for arr in (
        second._passage_emb,
        second._fact_emb,
        second._transition.matrix.data,
        second._transition.matrix.indices,
    ):
        assert not arr.flags.writeable
    assert isinstance(np.load(cache / "fact_emb.npy", mmap_mode="r"), np.memmap)


def test_a_prebuilt_fact_index_must_fit(musique_kb, embedder) -> None:
    built = open_kb_retriever(musique_kb, RetrieverConfig(), embedder)
    n, dim = built._fact_emb.shape
    other = VectorIndex(np.eye(dim, dtype=np.float32))  # dim rows, not the KB's n unique facts
    with pytest.raises(
        ValueError, match=f"the index holds {dim}×{dim} vectors, the KB's unique facts are {n}×{dim}"
    ):
        open_kb_retriever(musique_kb, RetrieverConfig(), embedder, fact_index=other)
    with pytest.raises(ValueError, match="backend 'bm25' has no fact index"):
        open_kb_retriever(musique_kb, RetrieverConfig(backend="bm25"), embedder, fact_index=built._fact_index)
    with pytest.raises(ValueError, match="pass the indexed vectors"):
        VectorIndex.from_faiss(VectorIndex(np.eye(dim, dtype=np.float32), "hnsw")._index, "hnsw", refine=2)


# ---------------------------------------------------------------- the cache proves what it holds
def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 4096] = bytes(b ^ 0xFF for b in data[mid : mid + 4096])
    p.write_bytes(bytes(data))


def _other_data(p: Path) -> None:  # the same shape and dtype, so the same size: only the digest tells
    arr = np.load(p)
    np.save(p, np.random.default_rng(0).standard_normal(arr.shape).astype(arr.dtype))


def _other_kb(p: Path) -> None:
    meta = json.loads((p.parent / "meta.json").read_text())
    meta["kb_digest"] = "0123456789abcdef"
    (p.parent / "meta.json").write_text(json.dumps(meta))


DAMAGE = {
    "truncated-array": ("fact_emb.npy", _truncate, r"fact_emb\.npy: [\d,]+ bytes, [\d,]+ written"),
    "empty-array": ("matrix_indices.npy", lambda p: p.write_bytes(b""), r"matrix_indices\.npy: 0 bytes"),
    "missing-array": ("doc_freq.npy", Path.unlink, r"doc_freq\.npy missing"),
    "missing-meta": ("meta.json", Path.unlink, r"no meta\.json"),
    "truncated-meta": ("meta.json", _truncate, r"meta\.json unreadable"),
    "same-shape-other-data": ("fact_emb.npy", _other_data, r"fact_emb\.npy: sha256 \w+…, \w+… written"),
    "flipped-hnsw-bytes": (
        "fact_index.faiss",
        _flip,
        r"fact_index\.faiss: sha256 .* \(other data or damage\)",
    ),
    "other-kb": ("meta.json", _other_kb, r"built from KB '0123456789abcdef', the KB is '[0-9a-f]{16}'"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_or_foreign_cache_is_rebuilt_never_served(
    toy_kb_dir, hash_embedder, tmp_path, caplog, damage
) -> None:
    # Before: a truncated, empty or missing file failed every replica's start until deleted by hand; another
    # KB's or same-shape data, or flipped bytes in an HNSW index, were served silently with other answers.
    name, spoil, says = DAMAGE[damage]
    cfg = RetrieverConfig(index="hnsw", index_refine=2)
    questions = ["Where was Olaf Scholz born?", "capital of Japan", "the Somme"]
    want = [
        r.doc_ids for r in load_shared_retriever(toy_kb_dir, cfg, hash_embedder, tmp_path).rank(questions, 5)
    ]
    (cache,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    spoil(cache / name)
    with caplog.at_level(logging.WARNING, logger="gta_verl.retrieval.serving.shared_arrays"):
        again = load_shared_retriever(toy_kb_dir, cfg, hash_embedder, tmp_path)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert re.fullmatch(rf"{re.escape(str(cache))}: {says}.*; rebuilding it", warning), warning
    assert again._fact_index.source is None  # built anew, not read from the damaged copy
    assert [r.doc_ids for r in again.rank(questions, 5)] == want
    kb = load_kb(toy_kb_dir)
    key = shared_cache_key(kb.manifest, cfg)
    assert cache_problem(cache, key, manifest_digest(kb.manifest)) is None  # the rebuilt copy verifies
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([cache.name, f"{cache.name}.lock"])


def test_a_killed_builders_temporaries_are_removed(toy_kb_dir, hash_embedder, tmp_path) -> None:
    # Before: a builder killed mid-write left its temporary directory (54 MB at the load test's KB) forever.
    cfg = RetrieverConfig()
    load_shared_retriever(toy_kb_dir, cfg, hash_embedder, tmp_path)
    (cache,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    dead = tmp_path / f".{cache.name}.tmp-dead0000"
    dead.mkdir()
    (dead / "fact_emb.npy").write_bytes(b"x" * 4096)
    other = tmp_path / ".someone-else.tmp-0000"  # another cache's: not this replica's to remove
    other.mkdir()
    load_shared_retriever(toy_kb_dir, cfg, hash_embedder, tmp_path)
    assert not dead.exists() and other.exists()


def test_a_cache_that_cannot_be_rebuilt_is_refused_in_one_line(
    toy_kb_dir, hash_embedder, tmp_path, monkeypatch
) -> None:
    import errno

    from gta_verl.retrieval.serving import shared_arrays

    cfg = RetrieverConfig()
    load_shared_retriever(toy_kb_dir, cfg, hash_embedder, tmp_path)
    (cache,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (cache / "strength.npy").write_bytes(b"")

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shared_arrays, "_write_cache", full)
    with pytest.raises(SharedCacheError) as exc:
        load_shared_retriever(toy_kb_dir, cfg, hash_embedder, tmp_path)
    assert re.fullmatch(
        rf"{re.escape(str(cache))}: strength\.npy: 0 bytes, [\d,]+ written, and it cannot be written here "
        r"\(No space left on device\); free space or pass another cache_root",
        str(exc.value),
    )
    assert not list(tmp_path.glob(".*.tmp-*"))  # the failed build left nothing behind
