"""Node-shared, memory-mapped retrieval arrays give the in-process answers on the MuSiQue KB."""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.retrieval.backends import open_kb_retriever
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever


@pytest.mark.parametrize("index", ["flat", "ivf"])
def test_shared_equals_in_process(musique_kb_dir, musique_kb, musique_qa, embedder, tmp_path, index) -> None:
    cfg = RetrieverConfig(index=index)
    local = open_kb_retriever(musique_kb, cfg, embedder)
    first = load_shared_retriever(musique_kb_dir, cfg, embedder, cache_root=tmp_path)
    second = load_shared_retriever(musique_kb_dir, cfg, embedder, cache_root=tmp_path)  # reads the cache
    (cache,) = [p for p in tmp_path.iterdir() if p.is_dir()]  # written once
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
