"""``gta-verl kb build … --ray``: OpenIE and embeddings as Ray Data pipelines, the graph on one node.

Stages (each a Ray Data dataset of *shards* mapped by an actor pool, ``map_batches`` with
:class:`ray.data.ActorPoolStrategy`):

1. **OpenIE** (extracting backends only; a precomputed file is read on the driver, as in the
   single-process build): shard ``i`` = passages ``[i·S, (i+1)·S)`` of the de-duplicated corpus.
   Each actor holds one backend (spaCy on a CPU, an OpenAI-compatible client with its bounded
   thread pool, or a vLLM engine with ``openie_num_gpus``) and the passage-hash
   :class:`~gta_verl.kb.openie.cache.ExtractionCache`.
2. **Embeddings**: the texts not in the driver's embedding cache, planned exactly as
   :class:`~gta_verl.kb.embed.CachedEmbedder` plans them (per list — passages, entities, triples —
   the unique missing texts in first-appearance order, cut every ``chunk`` texts); one shard =
   one chunk, encoded by one ``HFEmbedder.encode`` call (on a GPU with ``num_gpus``). The encoder's
   micro-batches therefore hold the same texts in the same order as in the single-process build,
   which makes the vectors bit-identical (batch composition changes float rounding; thread count
   does not).
3. **Graph** (normalization, synonymy k-NN with faiss, CSR) and saving run on the driver through
   :func:`gta_verl.kb.build.build_kb` and :func:`gta_verl.kb.store.save_kb`, reading the vectors
   the pool wrote; so the KB files and their checksums equal the single-process build's.

Resume: every shard is written as ``<name>.parquet`` (temp file + rename) and then a marker
``<name>.done.json`` holding its counts and the parquet's sha256. Shard names hash their inputs,
so rerunning the same command skips every shard whose marker is valid and recomputes the rest;
OpenIE shards with failed passages are rerun (the single-process cache never stores errors
either). The work directory (default ``<out>.ray-work`` next to ``out``) must be on storage
every node sees (NFS, a cluster file system) when the cluster has more than one node.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gta_verl.data.types import Passage
from gta_verl.kb.build import (
    KBConfig,
    build_kb,
    corpus_manifest,
    extract_passages,
    make_backend,
    read_corpus_logged,
)
from gta_verl.kb.embed import EmbeddingCache, cache_root, load_embedder, text_key
from gta_verl.kb.openie.base import Extraction, OpenIEReport
from gta_verl.kb.ray_shards import (
    RayOptions,
    StageStats,
    digest,
    finished_shard,
    read_shard,
    run_pool,
    summary_table,
    write_shard,
)

# The build's public face: the CLI and the tests import these from here.
__all__ = [
    "EncodeActor",
    "OpenIEActor",
    "RayOptions",
    "StageStats",
    "TableEmbedder",
    "build_kb_ray",
    "finished_shard",
    "plan_chunks",
    "ray_embed",
    "ray_extract",
    "summary_table",
    "write_shard",
]

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ OpenIE
def _extraction_table(exs: Sequence[Extraction]) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "doc_id": [e.doc_id for e in exs],
            "status": [e.status for e in exs],
            "n_malformed": [e.n_malformed for e in exs],
            "error": [e.error for e in exs],
            "entities": [json.dumps(list(e.entities), ensure_ascii=False) for e in exs],
            "triples": [json.dumps([list(t) for t in e.triples], ensure_ascii=False) for e in exs],
            "json_repair": [e.json_repair for e in exs],
        }
    )


def _extraction(r: dict[str, Any]) -> Extraction:
    return Extraction(
        r["doc_id"],
        tuple(json.loads(r["entities"])),
        tuple(tuple(t) for t in json.loads(r["triples"])),  # type: ignore[misc]
        r["status"],
        int(r["n_malformed"]),
        r["error"] or "",
        r.get("json_repair") or "",  # shards written before the column existed resume without it
    )


class OpenIEActor:
    """Actor of the OpenIE pool: one backend + the passage-hash cache; one row = one shard."""

    def __init__(self, spec: str, config: dict[str, Any], out_dir: str, cache_dir: str) -> None:
        from gta_verl.kb.openie.cache import ExtractionCache

        kb_config = KBConfig(**config)
        self.backend = make_backend(spec, kb_config)
        self.cache = None
        if kb_config.openie_cache:
            slug = hashlib.sha256(self.backend.identity.encode()).hexdigest()[:16]
            self.cache = ExtractionCache(self.backend.identity, Path(cache_dir) / "openie" / f"{slug}.jsonl")
        self.out_dir = Path(out_dir)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        from gta_verl.kb.openie.base import run_openie

        out = []
        for row in batch.to_pylist():
            passages = [Passage(d, t, x) for d, t, x in json.loads(row["payload"])]
            exs, report = run_openie(self.backend, passages, cache=self.cache, progress=False)
            ordered = [exs[p.doc_id] for p in passages]
            failed = [e.doc_id for e in ordered if e.status == "error"]
            meta = {"identity": self.backend.identity, "n_from_cache": report.n_from_cache, "failed": failed}
            write_shard(self.out_dir, row["shard"], _extraction_table(ordered), meta)
            out.append({"shard": row["shard"], "n": len(ordered), "failed": len(failed)})
        return pa.Table.from_pylist(out)


def ray_extract(
    passages: Sequence[Passage], spec: str, config: KBConfig, work: Path, opts: RayOptions, progress: bool
) -> tuple[dict[str, Extraction], dict[str, Any], StageStats]:
    """OpenIE stage → ({doc_id: Extraction}, manifest report, stats)."""
    t0 = time.perf_counter()
    if spec.startswith("precomputed"):  # reading a file: nothing to distribute
        exs, report = extract_passages(passages, spec, config, progress=False)
        return exs, report, _openie_stats(exs, report["n_triples"], 0, 0, t0, "OpenIE (precomputed, driver)")
    unique = list({p.doc_id: p for p in passages}.values())
    out_dir, size = work / "openie", opts.shard_passages
    key = [spec, config.llm_model, config.llm_base_url]  # what the backend's output depends on
    names = [
        f"{i:06d}-{digest(key, [(p.doc_id, p.contents) for p in unique[s : s + size]])}"
        for i, s in enumerate(range(0, len(unique), size))
    ]
    metas = {n: finished_shard(out_dir, n) for n in names}
    todo = [i for i, n in enumerate(names) if metas[n] is None or metas[n].get("failed")]
    rows = [
        {
            "shard": names[i],
            "payload": json.dumps([[p.doc_id, p.title, p.text] for p in unique[i * size : (i + 1) * size]]),
        }
        for i in todo
    ]
    run_pool(
        OpenIEActor,
        rows,
        {
            "spec": spec,
            "config": asdict(config),
            "out_dir": str(out_dir),
            "cache_dir": str(opts.cache_dir or cache_root()),
        },
        opts.concurrency,
        opts.openie_num_gpus,
    )
    exs: dict[str, Extraction] = {}
    report: OpenIEReport | None = None
    for n in names:
        meta = finished_shard(out_dir, n)
        if meta is None:
            raise RuntimeError(f"{out_dir / n}.parquet: the OpenIE pool finished without writing this shard")
        report = report or OpenIEReport(meta["identity"])
        for r in read_shard(out_dir, n):
            ex = _extraction(r)
            exs[ex.doc_id] = ex
            report.add(ex, cached=False)
        report.n_from_cache += int(meta["n_from_cache"])
        report.n_extracted -= int(meta["n_from_cache"])
    assert report is not None  # read_corpus never returns an empty corpus here
    rep = {**report.to_dict(), "spec": spec}
    log.info(report.summary())
    return exs, rep, _openie_stats(exs, report.n_triples, len(todo), len(names) - len(todo), t0, "OpenIE")


def _openie_stats(
    exs: dict[str, Extraction], n_triples: int, run: int, resumed: int, t0: float, stage: str
) -> StageStats:
    failed = [d for d, e in exs.items() if e.status == "error"]
    for d in failed[:20]:
        log.warning("OpenIE failed for %s: %s", d, exs[d].error)
    return StageStats(
        stage, len(exs), n_triples, len(failed), run, resumed, time.perf_counter() - t0, failed_ids=failed[:5]
    )


# ------------------------------------------------------------------ embeddings
def plan_chunks(lists: Iterable[Sequence[str]], is_known: Any, chunk: int) -> list[list[str]]:
    """The encoder calls a :class:`~gta_verl.kb.embed.CachedEmbedder` makes for ``lists`` encoded in turn.

    Per list: the unique texts not known (cached, or encoded for an earlier list), in
    first-appearance order, cut every ``chunk`` texts; each chunk is one ``inner.encode`` call.

    Args:
        lists: Text lists encoded one after the other (passages, entities, triples).
        is_known: ``f(list[str]) -> list[bool]``: which texts the cache already holds.
        chunk: Texts per encoder call.

    Returns:
        The chunks, in the order the single-process build encodes them.
    """
    planned: set[str] = set()
    out: list[list[str]] = []
    for texts in lists:
        uniq = [t for t in dict.fromkeys(str(t) for t in texts) if t not in planned]
        missing = [t for t, k in zip(uniq, is_known(uniq), strict=True) if not k]
        planned.update(missing)
        out += [missing[s : s + chunk] for s in range(0, len(missing), chunk)]
    return out


class EncodeActor:
    """Actor of the encoder pool: one ``HFEmbedder``; one row = one chunk of texts → one shard."""

    def __init__(
        self, embedder: str, device: str, allow_download: bool, batch_size: int, out_dir: str
    ) -> None:
        self.model = load_embedder(embedder, device=device, allow_download=allow_download, cache=False)
        self.batch_size = batch_size
        self.out_dir = Path(out_dir)

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        out = []
        for row in batch.to_pylist():
            texts = json.loads(row["payload"])
            vecs = self.model.encode(texts, batch_size=self.batch_size)
            vecs = np.ascontiguousarray(vecs, dtype=np.float32)
            table = pa.table(
                {
                    "key": pa.array([text_key(t) for t in texts], pa.binary(20)),
                    "vec": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), vecs.shape[1]),
                }
            )
            write_shard(self.out_dir, row["shard"], table, {"identity": self.model.identity})
            out.append({"shard": row["shard"], "n": len(texts)})
        return pa.Table.from_pylist(out)


@dataclass
class TableEmbedder:
    """:class:`~gta_verl.kb.embed.Embedder` over vectors already computed (``build_kb`` looks them up)."""

    name: str
    dim: int
    table: dict[bytes, np.ndarray]

    def encode(self, texts: Sequence[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        keys = [text_key(str(t)) for t in texts]
        missing = [t for t, k in zip(texts, keys, strict=True) if k not in self.table]
        if missing:
            raise KeyError(f"{len(missing)} texts have no vector from the Ray pool, e.g. {missing[0][:80]!r}")
        return np.stack([self.table[k] for k in keys]) if keys else np.zeros((0, self.dim), np.float32)


def _read_vectors(out_dir: Path, name: str, want: list[bytes]) -> tuple[list[bytes], np.ndarray]:
    """Keys and ``float32 [n, dim]`` vectors of one finished embedding shard, checked against its plan."""
    import pyarrow.parquet as pq

    path = out_dir / f"{name}.parquet"
    if finished_shard(out_dir, name) is None:
        raise RuntimeError(f"{path}: the encoder pool finished without writing this shard")
    tbl = pq.read_table(path)
    keys = tbl.column("key").to_pylist()
    if keys != want:
        raise RuntimeError(f"{path}: holds other texts than its plan; delete it and rerun")
    vec = tbl.column("vec").combine_chunks()
    flat = vec.flatten().to_numpy().astype(np.float32, copy=False)
    return keys, flat.reshape(len(keys), vec.type.list_size)


def ray_embed(
    lists: Sequence[Sequence[str]], config: KBConfig, work: Path, opts: RayOptions, allow_download: bool
) -> tuple[TableEmbedder, StageStats]:
    """Embedding stage: vectors of every text of ``lists`` (cache hits + the pool's shards)."""
    from gta_verl.kb.embed import CachedEmbedder

    t0 = time.perf_counter()
    inner = load_embedder(config.embedder, device="cpu", allow_download=allow_download, cache=False)
    cache = EmbeddingCache(inner.identity, root=Path(opts.cache_dir or cache_root()) / "emb")
    chunk = opts.embed_chunk or CachedEmbedder(inner, cache).chunk
    chunks = plan_chunks(
        lists, lambda ts: [v is not None for v in cache.get_many([text_key(t) for t in ts])], chunk
    )
    out_dir = work / "embeddings"
    names = [f"{i:06d}-{digest(inner.identity, config.embed_batch_size, c)}" for i, c in enumerate(chunks)]
    todo = [i for i, n in enumerate(names) if finished_shard(out_dir, n) is None]
    device = "cuda" if opts.num_gpus and config.device == "cpu" else config.device
    run_pool(
        EncodeActor,
        [{"shard": names[i], "payload": json.dumps(chunks[i])} for i in todo],
        {
            "embedder": config.embedder,
            "device": device,
            "allow_download": allow_download,
            "batch_size": config.embed_batch_size,
            "out_dir": str(out_dir),
        },
        opts.concurrency,
        opts.num_gpus,
        opts.encoder_num_cpus,
    )
    new_keys: list[bytes] = []
    new_vecs: list[np.ndarray] = []
    for n, texts in zip(names, chunks, strict=True):
        keys, vecs = _read_vectors(out_dir, n, [text_key(t) for t in texts])
        new_keys += keys
        new_vecs.append(vecs)
    table = dict(zip(new_keys, (v for block in new_vecs for v in block), strict=True))
    all_keys = list(dict.fromkeys(text_key(str(t)) for texts in lists for t in texts))
    for k, v in zip(all_keys, cache.get_many(all_keys), strict=True):
        if v is not None and k not in table:
            table[k] = np.asarray(v, dtype=np.float32)
    if new_keys:  # one atomic cache shard: later builds (Ray or not) reuse these exact vectors
        cache.put_many(new_keys, np.concatenate(new_vecs))
    stats = StageStats(
        "embeddings (unique texts)",
        len(all_keys),
        None,
        0,
        len(todo),
        len(names) - len(todo),
        time.perf_counter() - t0,
    )
    return TableEmbedder(inner.name, inner.dim, table), stats


# ------------------------------------------------------------------ driver
def _start_ray(address: str | None, progress: bool) -> bool:
    """Initialise Ray unless this process already did; True when we started it (and must shut it down)."""
    import ray
    import ray.data

    started = not ray.is_initialized()
    if started:
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress
    return started


def build_kb_ray(
    corpus_path: str | Path,
    corpus_format: str | None,
    openie_spec: str,
    out_dir: str | Path,
    config: KBConfig = KBConfig(),
    opts: RayOptions = RayOptions(),
    progress: bool = True,
    strict: bool = False,
    allow_download: bool = False,
    force: bool = False,
    allow_empty: bool = False,
) -> tuple[Any, list[StageStats]]:
    """Build and save a KB with Ray Data stages; the files equal ``build_kb_from_files``'s.

    Args:
        corpus_path, corpus_format, openie_spec, out_dir, config, progress, strict, allow_download, force,
            allow_empty:
            As :func:`gta_verl.kb.build.build_kb_from_files`.
        opts: Ray options (cluster address, pool sizes, GPUs, shard sizes, work/cache directories).

    Returns:
        ``(saved KB, per-stage stats)``; :func:`summary_table` renders the stats.
    """
    import ray

    out = Path(out_dir)
    work = Path(opts.work_dir) if opts.work_dir else out.with_name(out.name + ".ray-work")
    started = _start_ray(opts.address, progress)
    try:
        rep, stats = _read_corpus(corpus_path, corpus_format, strict)
        passages = rep.records
        exs, openie, st = ray_extract(passages, openie_spec, config, work, opts, progress)
        if not allow_empty:
            from gta_verl.kb.build import check_not_empty

            check_not_empty({**openie, "spec": openie_spec}, corpus_path)
        stats.append(st)
        from gta_verl.kb.graph import collect_nodes

        nodes = collect_nodes(passages, exs, config.include_ner_entities)
        lists = ([p.contents for p in passages], list(nodes.entities), [t.text for t in nodes.triples])
        embedder, st = ray_embed(lists, config, work, opts, allow_download)
        stats.append(st)
        manifest = {"openie": openie, "corpus": corpus_manifest(corpus_path, corpus_format, rep)}
        kb, st = _graph_and_save(passages, exs, embedder, config, out, manifest, progress, force)
        stats.append(st)
    finally:
        if started:
            ray.shutdown()
    return kb, stats


def _read_corpus(
    corpus_path: str | Path, corpus_format: str | None, strict: bool
) -> tuple[Any, list[StageStats]]:
    """The corpus's report (rejections logged; an empty corpus refused) and the corpus stage's stats."""
    t0 = time.perf_counter()
    rep = read_corpus_logged(corpus_path, corpus_format, strict)
    rejected = [str(r) for r in rep.rejected[:5]]
    stage = StageStats(
        "corpus", rep.n_in, None, len(rep.rejected), seconds=time.perf_counter() - t0, failed_ids=rejected
    )
    return rep, [stage]


def _graph_and_save(
    passages: Sequence[Passage],
    exs: dict[str, Extraction],
    embedder: TableEmbedder,
    config: KBConfig,
    out: Path,
    manifest: dict[str, Any],
    progress: bool,
    force: bool,
) -> tuple[Any, StageStats]:
    """The driver's stage: graph, synonymy and CSR through ``build_kb``, then ``save_kb``."""
    from gta_verl.kb.store import save_kb

    t1 = time.perf_counter()
    kb = build_kb(passages, exs, embedder, config, progress=progress, extra_manifest=manifest)
    kb = save_kb(kb, out, extractions=exs, force=force)
    n_items = kb.n_docs + kb.n_entities
    return kb, StageStats("graph + save (driver)", n_items, len(kb.triples), seconds=time.perf_counter() - t1)
