"""Node-shared, memory-mapped retrieval arrays give the in-process answers on the MuSiQue KB."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.retrieval.backends import open_kb_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.index import VectorIndex, cpu_has_bf16
from gta_verl.retrieval.retriever import GraphRetriever
from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever


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
