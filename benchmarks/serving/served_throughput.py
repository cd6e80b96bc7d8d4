"""Served throughput through the Ray actor service at HotpotQA-10K scale, and where the time goes.

Usage:
    python -m benchmarks.serving.served_throughput [--root DIR] [--docs 18300] [--triples 1300000] [--dim 384]
        [--config index=hnsw,passage_index=hnsw] [--encoder precomputed|minilm]
        [--replicas 1,2] [--num-cpus 2] [--calls 4096] [--callers 256] [--max-batch 256]
        [--max-wait-ms 5] [--queries 1024] [--json-out FILE]

A synthetic KB of HotpotQA-10K's Table 5 counts (``make_synthetic_graph(HOTPOTQA_10K)``: 18,300 documents,
127,542 entities, 1.34 M edges) with ``--triples`` random unit triple vectors is written once as a real KB
directory under ``--root`` (:func:`write_synthetic_kb`; reused while its parameters match) and served by
``--replicas`` replicas of the Ray actor service sharing ``--num-cpus`` CPUs, each opened with the
``--config`` RetrieverConfig overrides (:func:`config_overrides`). ``--callers`` concurrent coroutines
send ``--calls`` one-query calls through :class:`~gta_verl.retrieval.serving.clients.RayRetrieverClient`.

Queries: ``precomputed`` (default) = ``"q<i>"`` looked up in the query vectors saved beside the KB
(:mod:`gta_verl.testing.precomputed_encoder`: encoding excluded, as in the ``whole`` and ``sweep``
sections); ``minilm`` = the bundled MuSiQue questions through the bundled all-MiniLM-L6-v2 (the KB is
stamped with its name, so the replicas load it: encoding included).

Printed: queries/s, p50/p95 per call, answers equal to the in-process retriever's (the same KB directory,
config and encoder, opened through ``open_retriever`` in this process before Ray starts), memory per
replica, and where the time goes (:func:`breakdown`): each stage of the replicas' batches per query (the
retriever's :class:`~gta_verl.retrieval.stage_clock.StageClock`: encode, dense, triple search, seeds, PPR,
results), the batch's rest (thread hand-off, query preparation), time queued in a replica, and time
outside it (Ray transport, serialization, routing, the driver's event loop), beside the in-process
retriever's own stages at batches of ``--max-batch``. Note: an ``hnsw`` index built on more than one
thread differs between processes (faiss inserts in parallel), so equality needs ``flat``/``ivf`` indexes
or one thread per replica.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NS, NAME = "gta_verl_bench", "served_throughput"
STAGES = ("encode", "dense", "triples", "seeds", "ppr", "results")
STAGE_NAMES = {
    "encode": "query encoding",
    "dense": "dense passage scores",
    "triples": "triple search",
    "seeds": "entity seeds",
    "ppr": "PPR",
    "results": "fusion and hits",
}


# ------------------------------------------------------------------ the KB
@dataclass(frozen=True)
class SynthSpec:
    """The synthetic KB: documents (HotpotQA-10K's counts at 18,300, scaled otherwise), triple vectors,
    dimension, seed, precomputed query vectors and the embedder name stamped on the KB."""

    docs: int = 18_300
    triples: int = 1_300_000
    dim: int = 384
    seed: int = 0
    queries: int = 1024
    embedder: str = "random"


def write_synthetic_kb(root: Path, spec: SynthSpec) -> tuple[Path, Path]:
    """``(root/kb, root/queries.npy)``: the KB of ``spec`` as a KB directory and its query vectors.

    Reused when ``root/synth.json`` records the same ``spec``. The KB's graph, passages and triples
    are ``benchmarks.retriever_synth.synthetic_kb``'s (igraph graph with edge kinds and weights);
    entity vectors are zeros (retrieval does not read them).
    """
    from benchmarks.retriever_synth import query_vectors, synthetic_kb
    from gta_verl.kb.store import save_kb
    from gta_verl.testing.synthetic_graphs import HOTPOTQA_10K, make_synthetic_graph, scale_spec

    kb_dir, q_path, stamp = root / "kb", root / "queries.npy", root / "synth.json"
    want = dataclasses.asdict(spec)
    if stamp.is_file() and json.loads(stamp.read_text()) == want and q_path.is_file():
        return kb_dir, q_path
    root.mkdir(parents=True, exist_ok=True)
    graph_spec = HOTPOTQA_10K if spec.docs == HOTPOTQA_10K.n_docs else scale_spec(HOTPOTQA_10K, spec.docs)
    sg = make_synthetic_graph(graph_spec, seed=spec.seed)
    kb = synthetic_kb(sg, spec.triples, spec.seed, spec.dim, with_igraph=True)
    kb = dataclasses.replace(
        kb,
        entity_emb=np.zeros((kb.n_entities, spec.dim), np.float32),
        embedder_name=spec.embedder,
    )
    save_kb(kb, kb_dir, force=True)
    np.save(q_path, query_vectors(kb.triple_emb, spec.queries, spec.seed + 1))
    stamp.write_text(json.dumps(want))
    return kb_dir, q_path


# ------------------------------------------------------------------ config
def config_overrides(text: str) -> dict[str, Any]:
    """``"index=hnsw,hnsw_ef_search=512,doc_frequency_norm=false"`` → RetrieverConfig overrides, each of
    its field's type (booleans: true/false/1/0).

    >>> config_overrides("index=hnsw,hnsw_ef_search=512,doc_frequency_norm=false")
    {'index': 'hnsw', 'hnsw_ef_search': 512, 'doc_frequency_norm': False}
    """
    from gta_verl.retrieval.config import RetrieverConfig

    default = RetrieverConfig()
    out: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not hasattr(default, name):
            fields = ", ".join(f.name for f in dataclasses.fields(RetrieverConfig))
            raise ValueError(f"--config: {item!r} is not KNOB=VALUE of a RetrieverConfig knob ({fields})")
        cur = getattr(default, name)
        if isinstance(cur, bool):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--config: {name} takes true or false, got {value!r}")
            out[name] = value.lower() in ("true", "1")
        else:
            out[name] = type(cur)(value)
    RetrieverConfig(**out)  # validated here, not in the replicas
    return out


# ------------------------------------------------------------------ where the time goes
_COUNTERS = ("queries", "batches", "run_s", "latency_s", "answered")


def replica_totals(per_replica: list[dict[str, Any]]) -> dict[str, Any]:
    """The replicas' ``stats`` summed: batcher counters and seconds per stage."""
    out: dict[str, Any] = {k: 0.0 for k in _COUNTERS}
    stages: dict[str, float] = {}
    for st in per_replica:
        for k in _COUNTERS:
            out[k] += st.get(k, 0)
        for name, s in ((st.get("stages") or {}).get("seconds") or {}).items():
            stages[name] = stages.get(name, 0.0) + s
    out["stages"] = stages
    return out


def diff_totals(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after − before`` of two :func:`replica_totals` (the calls of one measured run)."""
    out = {k: after[k] - before[k] for k in _COUNTERS}
    names = set(before["stages"]) | set(after["stages"])
    out["stages"] = {n: after["stages"].get(n, 0.0) - before["stages"].get(n, 0.0) for n in names}
    return out


def breakdown(
    delta: dict[str, Any], client_ms: list[float], wall_s: float, replicas: int
) -> dict[str, float]:
    """Where one run's time went, from :func:`diff_totals` and the client's per-call latencies (ms).

    Per query, of the replicas' busy time (ms): each stage of :data:`STAGES` and ``batch_other`` (the rest
    of a batch's run: thread hand-off, query preparation). Per call, mean (ms): ``client`` (end to end),
    ``in_replica`` (submit to answer inside the replica), ``outside_replica`` = client − in_replica (Ray
    transport, serialization, routing, the driver's event loop), ``batch_run`` (a batch's mean run
    time) and ``queued`` = in_replica − batch_run (waiting for one's batch). ``busy`` = the replicas'
    share of the wall time spent running batches; ``capacity_qps`` = the queries/s they would answer
    if always busy.

    >>> d = {"queries": 100, "batches": 4, "run_s": 0.5, "latency_s": 1.0, "answered": 100,
    ...      "stages": {"ppr": 0.25, "dense": 0.125}}
    >>> b = breakdown(d, [15.0, 25.0], wall_s=1.0, replicas=1)
    >>> b["ppr"], b["dense"], b["batch_other"], b["client"], b["in_replica"], b["outside_replica"]
    (2.5, 1.25, 1.25, 20.0, 10.0, 10.0)
    >>> b["batch_run"], b["queued"], b["busy"], b["capacity_qps"]
    (125.0, -115.0, 0.5, 200.0)
    """
    q = max(1.0, float(delta["queries"]))
    out = {name: delta["stages"].get(name, 0.0) * 1e3 / q for name in STAGES}
    out["batch_other"] = (delta["run_s"] - sum(delta["stages"].values())) * 1e3 / q
    out["client"] = float(np.mean(client_ms)) if client_ms else 0.0
    out["in_replica"] = delta["latency_s"] * 1e3 / max(1.0, float(delta["answered"]))
    out["outside_replica"] = out["client"] - out["in_replica"]
    out["batch_run"] = delta["run_s"] * 1e3 / max(1.0, float(delta["batches"]))
    out["queued"] = out["in_replica"] - out["batch_run"]
    out["busy"] = delta["run_s"] / max(1e-9, wall_s * replicas)
    out["capacity_qps"] = q / max(1e-9, delta["run_s"]) * replicas
    out["batch_mean"] = q / max(1.0, float(delta["batches"]))
    return out


def answers_equal(
    got: list[Any], queries: list[str], expected: dict[str, tuple[str, ...]]
) -> tuple[int, float]:
    """``(answers equal to the in-process ones, mean share of the in-process documents returned)`` over the
    results ``got[i]`` of query ``queries[i % len(queries)]`` (an error result counts as neither).

    >>> from gta_verl.data.types import RetrievalHit, RetrievalResult
    >>> hit = lambda d: RetrievalHit(doc_id=d, title="", text="", score=0.0, source="dense")
    >>> got = [RetrievalResult("a", hits=(hit("x"), hit("y"))), RetrievalResult("b", hits=(hit("z"),)),
    ...        RetrievalResult("a", error="boom")]
    >>> answers_equal(got, ["a", "b"], {"a": ("x", "y"), "b": ("w",)})
    (1, 0.3333333333333333)
    """
    same, share = 0, 0.0
    for i, r in enumerate(got):
        want = expected[queries[i % len(queries)]]
        if r is None or not r.ok:
            continue
        same += tuple(r.doc_ids) == tuple(want)
        share += len(set(r.doc_ids) & set(want)) / max(1, len(want))
    return same, share / max(1, len(got))


def breakdown_table(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown: one column per run (in-process reference and each replica count), one line per share."""
    cols = " | ".join(r["label"] for r in rows)
    lines = [
        "\n#### Where the time goes (ms per query of busy time; ms per call below the line)\n",
        f"| | {cols} |",
        "|---|" + "---:|" * len(rows),
    ]
    for name in STAGES:
        lines.append(f"| {STAGE_NAMES[name]} | " + " | ".join(f"{r['b'][name]:.2f}" for r in rows) + " |")
    lines.append("| batch rest (thread hand-off, query preparation) | " + _cells(rows, "batch_other") + " |")
    lines.append("| mean queries per batch | " + _cells(rows, "batch_mean", ".1f") + " |")
    lines.append("| busy share of the wall time | " + _cells(rows, "busy", ".2f") + " |")
    always = "queries/s if the replicas were always busy"
    lines.append(f"| {always} | " + _cells(rows, "capacity_qps", ".0f") + " |")
    lines.append("| **per call, mean ms:** end to end (client) | " + _cells(rows, "client", ".1f") + " |")
    lines.append("| inside the replica (submit → answer) | " + _cells(rows, "in_replica", ".1f") + " |")
    outside = "outside it (Ray transport, serialization, routing, driver)"
    lines.append(f"| {outside} | " + _cells(rows, "outside_replica", ".1f") + " |")
    lines.append("| its batch's run | " + _cells(rows, "batch_run", ".1f") + " |")
    lines.append("| queued in the replica | " + _cells(rows, "queued", ".1f") + " |")
    return lines


def _cells(rows: list[dict[str, Any]], key: str, spec: str = ".2f") -> str:
    return " | ".join(format(r["b"][key], spec) if key in r["b"] else "" for r in rows)


# ------------------------------------------------------------------ the runs
def in_process(kb_dir: Path, cfg: Any, enc: Any, qs: list[str], calls: int, batch: int) -> dict[str, Any]:
    """The reference: ``open_retriever`` in this process, its answers, queries/s and stages at ``batch``."""
    from gta_verl.retrieval.backends import open_retriever

    t0 = time.perf_counter()
    r = open_retriever(kb_dir, cfg, enc)
    r.warm()
    r.retrieve(qs[:8])
    ready_s = time.perf_counter() - t0
    expected = {q: tuple(res.doc_ids) for q, res in zip(qs, r.retrieve(qs), strict=True)}
    flat = [qs[i % len(qs)] for i in range(calls)]
    clock = getattr(r, "clock", None)  # the graph backend's stage clock
    before = clock.snapshot() if clock is not None else None
    t0 = time.perf_counter()
    for s in range(0, calls, batch):
        r.retrieve(flat[s : s + batch])
    wall = time.perf_counter() - t0
    after = clock.snapshot() if clock is not None else None
    b = breakdown(clock_delta(before, after, wall), [], wall, 1)
    for k in ("client", "in_replica", "outside_replica", "queued"):  # no caller, no queue: not measured
        b.pop(k)
    label = f"in process (batches of {batch})"
    return {"label": label, "qps": calls / wall, "ready_s": ready_s, "b": b, "expected": expected}


def clock_delta(before: dict[str, Any] | None, after: dict[str, Any] | None, run_s: float) -> dict[str, Any]:
    """A :func:`diff_totals`-shaped delta of two ``StageClock.snapshot()`` of one process that ran batches
    back to back for ``run_s`` seconds (``None``: a backend without a clock).

    >>> d = clock_delta({"batches": 1, "queries": 4, "seconds": {"ppr": 1.0}},
    ...                 {"batches": 3, "queries": 12, "seconds": {"ppr": 1.5, "dense": 0.25}}, 2.0)
    >>> d["queries"], d["batches"], d["run_s"], d["stages"]
    (8, 2, 2.0, {'ppr': 0.5, 'dense': 0.25})
    """
    if before is None or after is None:
        return {"queries": 0, "batches": 0, "run_s": run_s, "latency_s": 0.0, "answered": 0, "stages": {}}
    return {
        "queries": after["queries"] - before["queries"],
        "batches": after["batches"] - before["batches"],
        "run_s": run_s,
        "latency_s": 0.0,
        "answered": 0,
        "stages": {n: s - before["seconds"].get(n, 0.0) for n, s in after["seconds"].items()},
    }


def served(
    kb_dir: Path,
    cfg: Any,
    embedder: str | None,
    n: int,
    args: argparse.Namespace,
    qs: list[str],
    expected: dict,
) -> dict[str, Any]:
    """One run through the Ray actor service with ``n`` replicas."""
    import ray

    from benchmarks.serving.replicas import drive, memory_mib
    from gta_verl.retrieval.serving.clients import RayRetrieverClient
    from gta_verl.retrieval.serving.config import ServingConfig
    from gta_verl.retrieval.serving.service import RetrieverSpec

    serving = ServingConfig(
        num_replicas=n,
        num_cpus=args.num_cpus / n,
        placement="any",
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
    )
    spec = RetrieverSpec(
        kb_dir=str(kb_dir), config=cfg, serving=serving, name=NAME, namespace=NS, embedder=embedder
    )
    t0 = time.perf_counter()
    svc = spec.create()
    ray.get(svc.health.remote(3600.0))
    ready_s = time.perf_counter() - t0
    try:
        client = RayRetrieverClient(NAME, timeout_s=600, namespace=NS, seed=0)
        asyncio.run(drive(client.aretrieve, qs, 8 * n, 8 * n))  # warm every replica
        st0 = replica_totals(ray.get(svc.stats.remote())["per_replica"])
        res, lat, wall = asyncio.run(drive(client.aretrieve, qs, args.calls, args.callers))
        st1 = replica_totals(ray.get(svc.stats.remote())["per_replica"])
        pids = [ray.get(h.health.remote())["pid"] for _, h in ray.get(svc.replicas.remote())["replicas"]]
        mem = [memory_mib(p) for p in pids]
    finally:
        ray.get(svc.shutdown.remote())
        ray.kill(svc)
    same, share = answers_equal(res, qs, expected)
    return {
        "label": f"{n} replica{'s' if n > 1 else ''} × {args.num_cpus / n:g} CPU",
        "replicas": n,
        "qps": len(res) / wall,
        "p50": float(np.percentile(lat, 50)),
        "p95": float(np.percentile(lat, 95)),
        "same": same,
        "share": share,
        "errors": sum(not r.ok for r in res),
        "ready_s": ready_s,
        "b": breakdown(diff_totals(st0, st1), lat, wall, n),
        **{k: float(np.mean([m[k] for m in mem])) for k in ("rss", "pss", "uss")},
    }


def _queries(args: argparse.Namespace) -> tuple[list[str], SynthSpec]:
    if args.encoder == "minilm":
        from benchmarks.serving.replicas import questions
        from gta_verl.kb.embed import DEFAULT_EMBEDDER  # the bundled all-MiniLM-L6-v2 (384-d)

        spec = SynthSpec(args.docs, args.triples, args.dim, args.seed, args.queries, DEFAULT_EMBEDDER)
        return questions(), spec
    spec = SynthSpec(args.docs, args.triples, args.dim, args.seed, args.queries)
    return [f"q{i}" for i in range(args.queries)], spec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=None, help="default /tmp/gta_verl_served_<encoder>")
    ap.add_argument("--docs", type=int, default=18_300)
    ap.add_argument("--triples", type=int, default=1_300_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--queries", type=int, default=1024, help="distinct precomputed queries")
    ap.add_argument(
        "--config", default="", help="RetrieverConfig overrides, e.g. index=hnsw,passage_index=hnsw"
    )
    ap.add_argument("--encoder", choices=("precomputed", "minilm"), default="precomputed")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--num-cpus", type=float, default=2.0, help="Ray CPUs, shared by the replicas")
    ap.add_argument("--calls", type=int, default=4096)
    ap.add_argument("--callers", type=int, default=256)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--json-out", default="")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gta_verl.retrieval.config import RetrieverConfig
    from gta_verl.testing.precomputed_encoder import FACTORY, QUERIES_ENV, PrecomputedEncoder

    overrides = config_overrides(args.config)
    cfg = RetrieverConfig(**overrides)
    qs, spec = _queries(args)
    args.root = args.root or Path(f"/tmp/gta_verl_served_{args.encoder}")
    t0 = time.perf_counter()
    kb_dir, q_path = write_synthetic_kb(args.root, spec)
    kb_s = time.perf_counter() - t0
    print(f"KB at {kb_dir} ({kb_s:.0f} s)", flush=True)
    enc = PrecomputedEncoder(np.load(q_path)) if args.encoder == "precomputed" else None
    ref = in_process(kb_dir, cfg, enc, qs, args.calls, args.max_batch)
    expected = ref.pop("expected")
    gc.collect()
    import ray

    os.environ[QUERIES_ENV] = str(q_path)
    ray.init(
        address="local",
        num_cpus=int(args.num_cpus),
        include_dashboard=False,
        log_to_driver=False,
        namespace=NS,
        runtime_env={"env_vars": {QUERIES_ENV: str(q_path)}},
    )
    rows = []
    try:
        for n in [int(x) for x in args.replicas.split(",")]:
            rows.append(served(kb_dir, cfg, FACTORY if enc is not None else None, n, args, qs, expected))
            print(rows[-1], flush=True)
    finally:
        ray.shutdown()
    lines = report(args, spec, overrides, ref, rows, kb_s)
    print("\n".join(lines))
    if args.json_out:
        out = {"spec": dataclasses.asdict(spec), "config": overrides, "reference": ref, "rows": rows}
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


def report(
    args: argparse.Namespace, spec: SynthSpec, overrides: dict, ref: dict, rows: list[dict], kb_s: float
) -> list[str]:
    """The markdown tables of one run."""
    knobs = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "defaults"
    lines = [
        f"\n### Served throughput: {args.calls} one-query calls from {args.callers} concurrent callers "
        f"(synthetic HotpotQA-10K-scale KB: {spec.docs:,} docs, {spec.triples:,} triple vectors × "
        f"{spec.dim}; "
        f"RetrieverConfig {knobs}; queries {args.encoder}; Ray with {args.num_cpus:g} CPUs on "
        f"{os.cpu_count()} cores; KB written in {kb_s:.0f} s)\n",
        f"In-process reference (`open_retriever`, batches of {args.max_batch}): "
        f"**{ref['qps']:.1f} queries/s** (opened in {ref['ready_s']:.0f} s)\n",
        "| replicas | queries/s | ≥ 200 | p50 ms | p95 ms | answers = in-process "
        "| mean share of in-process docs | error results | ready s | RSS MiB/replica | PSS | USS |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['qps']:.1f} | {'yes' if r['qps'] >= 200 else 'no'} | {r['p50']:.0f} | "
            f"{r['p95']:.0f} | {r['same']}/{args.calls} | {r['share']:.4f} | {r['errors']} | "
            f"{r['ready_s']:.0f} | {r['rss']:.0f} | {r['pss']:.0f} | {r['uss']:.0f} |"
        )
    return lines + breakdown_table([ref, *rows])


if __name__ == "__main__":
    raise SystemExit(main())
