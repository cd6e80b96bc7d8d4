"""The pure parts of ``benchmarks/serving/served_throughput.py`` (Ray is not started here): the synthetic KB
written as a real KB directory, the config passed to a replica, the equality check against the
in-process retriever, and the aggregation of where the time goes; plus the stage clock and the
batcher's counters it reads from the replicas' stats."""

from __future__ import annotations

import asyncio
import doctest

import numpy as np
import pytest

from benchmarks.serving import served_throughput as st
from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.serving.batching import MicroBatcher
from gta_verl.retrieval.stage_clock import StageClock


@pytest.mark.parametrize(
    "module", ["benchmarks.serving.served_throughput", "benchmarks.retrieval.scale_table"]
)
def test_benchmark_docstring_examples(module) -> None:
    import importlib

    failed, tried = doctest.testmod(importlib.import_module(module), raise_on_error=False)
    assert tried > 0 and failed == 0


def test_config_overrides_typed_and_checked() -> None:
    got = st.config_overrides("index=ivf, ivf_nprobe=1000000,doc_frequency_norm=0,ppr_linear_eps=1e-7")
    assert got == {
        "index": "ivf",
        "ivf_nprobe": 1_000_000,
        "doc_frequency_norm": False,
        "ppr_linear_eps": 1e-7,
    }
    assert st.config_overrides("") == {}
    with pytest.raises(ValueError, match="not KNOB=VALUE"):
        st.config_overrides("nprobe=3")
    with pytest.raises(ValueError, match="true or false"):
        st.config_overrides("doc_frequency_norm=maybe")
    with pytest.raises(ValueError, match="RetrieverConfig.index"):
        st.config_overrides("index=annoy")  # RetrieverConfig's own check, before any replica starts


def test_synthetic_kb_directory_serves_like_the_in_process_retriever(tmp_path, monkeypatch) -> None:
    """A tiny KB written by the benchmark loads as a KB; the replica's path (node-shared arrays, encoder
    from the environment, the config's overrides) answers every query as ``open_retriever`` does."""
    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.retrieval.serving.shared_arrays import load_shared_retriever
    from gta_verl.testing.precomputed_encoder import FACTORY, QUERIES_ENV, PrecomputedEncoder

    spec = st.SynthSpec(docs=30, triples=60, dim=8, seed=0, queries=24)
    kb_dir, q_path = st.write_synthetic_kb(tmp_path / "root", spec)
    manifest = (kb_dir / "manifest.json").stat().st_mtime_ns
    assert st.write_synthetic_kb(tmp_path / "root", spec) == (kb_dir, q_path)  # reused, not rewritten
    assert (kb_dir / "manifest.json").stat().st_mtime_ns == manifest
    q = np.load(q_path)
    assert q.shape == (24, 8)
    cfg = RetrieverConfig(**st.config_overrides("index=ivf,passage_index=hnsw,basis_index=hnsw"))
    local = open_retriever(kb_dir, cfg, PrecomputedEncoder(q))
    assert (local.kb.n_docs, len(local.kb.triples), local.kb.entity_emb.shape[1]) == (30, 60, 8)
    monkeypatch.setenv(QUERIES_ENV, str(q_path))
    from gta_verl.retrieval.serving.replica import _import_factory

    enc = _import_factory(FACTORY)()  # as a replica builds its encoder
    shared = load_shared_retriever(kb_dir, cfg, enc, cache_root=tmp_path / "cache")
    assert shared.config == cfg
    qs = [f"q{i}" for i in range(24)]
    expected = {x: tuple(r.doc_ids) for x, r in zip(qs, local.retrieve(qs), strict=True)}
    got = shared.retrieve(qs + qs[:5])
    assert st.answers_equal(got, qs, expected) == (29, 1.0)
    broken = [RetrievalResult(q, error="timeout") for q in qs[:2]] + got[2:]
    assert st.answers_equal(broken, qs, expected)[0] == 27


def test_retriever_stage_clock_counts_each_batch() -> None:
    from benchmarks.retriever_synth import PrecomputedEncoder, attach_graph, query_vectors, synthetic_kb
    from gta_verl.retrieval.backends import open_kb_retriever
    from gta_verl.testing.synthetic_graphs import HOTPOTQA_10K, make_scaled_graph, scale_spec

    sg = make_scaled_graph(scale_spec(HOTPOTQA_10K, 40), seed=0)
    kb = synthetic_kb(sg, 80, seed=0, dim=8, with_igraph=False)
    r = open_kb_retriever(
        kb, RetrieverConfig(batch_size=4), PrecomputedEncoder(query_vectors(kb.triple_emb, 6, 1))
    )
    attach_graph(r, sg)
    r.retrieve(["q0", "q1", "q2", "q3", "q4", "q5"])  # two chunks of batch_size 4
    snap = r.clock.snapshot()
    assert (snap["batches"], snap["queries"]) == (2, 6)
    assert set(snap["seconds"]) == {"encode", "dense", "triples", "seeds", "ppr", "results"}
    assert all(s >= 0 for s in snap["seconds"].values())


def test_stage_clock_sums() -> None:
    c = StageClock()
    c.add(3, encode=0.5)
    c.add_seconds(results=0.25)
    assert c.snapshot() == {"batches": 1, "queries": 3, "seconds": {"encode": 0.5, "results": 0.25}}


def test_batcher_counts_run_and_latency_seconds() -> None:
    def fn(qs: list[str]) -> list[RetrievalResult]:
        return [RetrievalResult(q) for q in qs]

    async def go() -> dict:
        b = MicroBatcher(fn, max_batch=4, max_wait_ms=1)
        await asyncio.gather(*(b.submit([f"q{i}"]) for i in range(10)))
        return b.stats()

    stats = asyncio.run(go())
    assert stats["answered"] == 10 and stats["queries"] == 10
    assert stats["run_s"] > 0 and stats["latency_s"] >= stats["run_s"]


def test_where_the_time_goes_from_replica_stats() -> None:
    """Two replicas' stats before and after a run, summed and differenced by hand."""
    before = [
        {"queries": 10, "batches": 2, "run_s": 1.0, "latency_s": 2.0, "answered": 10, "stages": None},
        {"queries": 0, "batches": 0, "run_s": 0.0, "latency_s": 0.0, "answered": 0},
    ]
    after = [
        {
            "queries": 210,
            "batches": 4,
            "run_s": 2.0,
            "latency_s": 6.0,
            "answered": 210,
            "stages": {"seconds": {"ppr": 0.4, "triples": 0.2}},
        },
        {
            "queries": 200,
            "batches": 2,
            "run_s": 1.2,
            "latency_s": 3.0,
            "answered": 200,
            "stages": {"seconds": {"ppr": 0.6, "encode": 0.1}},
        },
    ]
    delta = st.diff_totals(st.replica_totals(before), st.replica_totals(after))
    assert delta["queries"] == 400 and delta["batches"] == 4 and delta["answered"] == 400
    assert delta["run_s"] == pytest.approx(2.2) and delta["latency_s"] == pytest.approx(7.0)
    assert delta["stages"] == pytest.approx({"ppr": 1.0, "triples": 0.2, "encode": 0.1})
    b = st.breakdown(delta, [30.0, 40.0], wall_s=2.0, replicas=2)
    # per query: ppr 1.0 s / 400 = 2.5 ms, triples 0.5 ms, encode 0.25 ms; rest (2.2 − 1.3) / 400 = 2.25 ms
    assert b["ppr"] == pytest.approx(2.5) and b["triples"] == pytest.approx(0.5) and b["dense"] == 0.0
    assert b["batch_other"] == pytest.approx(2.25)
    # per call: client 35 ms, in replica 7.0 / 400 = 17.5 ms, outside 17.5 ms; batch 2.2 / 4 = 550 ms
    assert (b["client"], b["in_replica"], b["outside_replica"]) == pytest.approx((35.0, 17.5, 17.5))
    assert b["batch_run"] == pytest.approx(550.0) and b["batch_mean"] == 100.0
    assert b["busy"] == pytest.approx(2.2 / 4) and b["capacity_qps"] == pytest.approx(400 / 2.2 * 2)
    rows = [{"label": "2 replicas × 1 CPU", "b": b}]
    table = "\n".join(st.breakdown_table(rows))
    assert (
        "| PPR | 2.50 |" in table
        and "| outside it (Ray transport, serialization, routing, driver) | 17.5 |" in table
    )
