"""One read-only copy of a KB's retrieval arrays per node, shared by every replica there.

A ``graph`` retriever replica needs the passage embeddings, the unique-fact vectors and their
faiss index, the entity document frequencies, the PPR transition (CSR) and, for
``ppr_method="linear"``, the passage basis. Built
separately, every replica holds its own copy of each. Here the first replica on a
node writes the derived arrays once to a node-local cache directory (keyed by the
KB's checksums, the index settings and the code that derives them), and every
replica memory-maps them read-only: the pages live once in the OS page cache and
are shared by all processes of the node, whatever restarts them (no owner has to
stay alive, unlike an object in Ray's object store). The KB's own ``.npy`` files
are mapped the same way. Results are bit-identical to a retriever built in
process (the same arrays, only mapped instead of copied).

The cache proves what it holds: ``meta.json`` (written last, after every array is fsynced) names the
KB digest, the index parameters, the full cache key and each file's size and sha256. A replica verifies
all of them before it maps anything (a streaming hash of every file, several files at once: about
``cache bytes / (0.5 GB/s × threads)`` — at 1M passages and triples a flat cache is ≈ 7.5 GB, 15 s on one
busy core, a few seconds on a node's cores; an IVF/HNSW build there takes minutes). A truncated, empty,
missing or swapped file, flipped bytes, or a cache of another KB or settings is rebuilt by the first replica
that takes the node lock (the others wait, then verify its copy) and never served; if it cannot be rebuilt,
one :class:`SharedCacheError` line says why. Temporaries of a killed builder are removed under the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

CACHE_FORMAT = 2  # 2: meta.json names the KB digest, the parameters and each file's size and sha256
_META = "meta.json"
_EMB = ("passage_emb", "entity_emb", "triple_emb")
_BASIS = ("doc_response", "ones_response", "emb_mass", "node_mass")
#: Modules whose code derives the cached arrays: a change to any of them invalidates the cache.
_CODE = (
    "gta_verl.retrieval.retriever",
    "gta_verl.retrieval.ppr.transition",
    "gta_verl.retrieval.index",
    __name__,
    "gta_verl.retrieval.ppr.linear",
    "gta_verl.retrieval.ppr.fused_power",
)


class SharedCacheError(RuntimeError):
    """The node cache is damaged or stale and cannot be rebuilt here (one line naming it and why)."""


def cache_params(config: Any) -> dict[str, Any]:
    """The settings the cached arrays are derived with (recorded in ``meta.json``)."""
    return {
        "index": config.index,
        "nprobe": config.ivf_nprobe,
        "hnsw_m": config.hnsw_m,
        "basis_alpha": config.alpha if config.uses_passage_basis else None,
        "scan": getattr(config, "triple_scan", "float32"),
    }


def shared_cache_key(manifest: dict[str, Any], config: Any) -> str:
    """sha256 of the KB checksums, the index settings and the deriving code."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    h = hashlib.sha256(
        json.dumps(
            {"files": files, "format": CACHE_FORMAT, **cache_params(config)}, sort_keys=True, default=str
        ).encode()
    )
    for name in _CODE:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ImportError(f"{name}: no source file to fingerprint the cache with")
        h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()


def _save_transition(tr: Any, d: Path) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "n": int(tr.matrix.shape[0]),
        "sym": tr.sym is not None,
        "perm": tr.perm is not None,
    }
    for tag, m in (("matrix", tr.matrix), ("sym", tr.sym)):
        if m is not None:
            for part in ("data", "indices", "indptr"):
                np.save(d / f"{tag}_{part}.npy", getattr(m, part))
    np.save(d / "strength.npy", tr.strength)
    if tr.perm is not None:
        np.save(d / "perm.npy", tr.perm)
    return meta


def _load_transition(d: Path, meta: dict[str, Any]) -> Any:
    import scipy.sparse as sp

    from gta_verl.retrieval.ppr.transition import Transition

    def csr(tag: str) -> Any:
        parts = [np.load(d / f"{tag}_{p}.npy", mmap_mode="r") for p in ("data", "indices", "indptr")]
        m = sp.csr_matrix((parts[0], parts[1], parts[2]), shape=(meta["n"], meta["n"]), copy=False)
        m.has_sorted_indices = True  # written sorted; scipy must not sort the read-only map in place
        return m

    return Transition(
        matrix=csr("matrix"),
        sym=csr("sym") if meta["sym"] else None,
        strength=np.load(d / "strength.npy", mmap_mode="r"),
        perm=np.load(d / "perm.npy", mmap_mode="r") if meta["perm"] else None,
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)  # releases the GIL: files hash in parallel threads
    return h.hexdigest()


def _hash_all(paths: list[Path]) -> list[str]:
    with ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1, len(paths)))) as pool:
        return list(pool.map(_sha256, paths))


def _files_digest(files: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def cache_problem(cache_dir: Path, key: str, kb_digest: str) -> str | None:
    """Why ``cache_dir`` must not be served (``None``: it holds what its ``meta.json`` says, for this KB,
    these settings and this code). Reads every file once (see the module docstring for the cost)."""
    if not cache_dir.is_dir():
        return "not built"
    try:
        meta = json.loads((cache_dir / _META).read_text())
    except FileNotFoundError:
        return f"no {_META} (an interrupted or damaged build)"
    except (OSError, ValueError) as exc:
        return f"{_META} unreadable ({exc})"
    return _meta_problem(meta, key, kb_digest) or _files_problem(cache_dir, meta["files"])


def _meta_problem(meta: Any, key: str, kb_digest: str) -> str | None:
    """Why ``meta.json``'s content does not describe a cache of this format, KB and key, or does not
    match its own file list (None: it does)."""
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        return f"cache format {got!r}, this code reads {CACHE_FORMAT}"
    if meta.get("kb_digest") != kb_digest:
        return f"built from KB {meta.get('kb_digest')!r}, the KB is {kb_digest!r}"
    if meta.get("key") != key:
        return "built with other index parameters or code"
    files = meta.get("files")
    if not isinstance(files, dict) or meta.get("digest") != _files_digest(files):
        return f"{_META}: its file list does not match its digest"
    return None


def _files_problem(cache_dir: Path, files: dict[str, Any]) -> str | None:
    """The first difference between ``cache_dir``'s files and ``files`` (name to bytes and sha256):
    one missing or extra, then sizes, then content (None: none)."""
    present = {p.name for p in cache_dir.iterdir() if p.name != _META}
    if missing := sorted(set(files) - present):
        return f"{missing[0]} missing"
    if extra := sorted(present - set(files)):
        return f"{extra[0]} not written by the builder"
    names = sorted(files)
    for name in names:
        size = (cache_dir / name).stat().st_size
        if size != files[name]["bytes"]:
            return f"{name}: {size:,} bytes, {files[name]['bytes']:,} written"
    for name, got in zip(names, _hash_all([cache_dir / n for n in names]), strict=True):
        if got != files[name]["sha256"]:
            return f"{name}: sha256 {got[:12]}…, {files[name]['sha256'][:12]}… written (other data or damage)"
    return None


def _write_cache(retriever: Any, d: Path) -> dict[str, Any]:
    """Write the derived arrays of ``retriever`` into ``d``; return what ``meta.json`` will hold."""
    import faiss

    np.save(d / "fact_pairs.npy", retriever._fact_pairs)
    np.save(d / "fact_emb.npy", np.ascontiguousarray(retriever._fact_emb, dtype=np.float32))
    np.save(d / "doc_freq.npy", retriever._doc_freq)
    meta = {
        "format": CACHE_FORMAT,
        "transition": _save_transition(retriever.transition, d),
        "fact_index": retriever._fact_index is not None,
    }
    if retriever._fact_index is not None:
        faiss.write_index(retriever._fact_index._index, str(d / "fact_index.faiss"))
    scan = retriever._fact_index._bf16 if retriever._fact_index is not None else None
    if scan is not None:
        np.save(d / "fact_bf16.npy", scan.bits)
        meta["bf16"] = {"max_norm": scan.max_norm}
    if retriever.uses_passage_basis:  # solved once per node (seconds to minutes on large KBs)
        basis = retriever.passage_basis
        for name in _BASIS:
            np.save(d / f"basis_{name}.npy", getattr(basis, name))
        meta["basis"] = {"alpha": basis.alpha, "ones_mass": basis.ones_mass}
    return meta


@contextlib.contextmanager
def _node_lock(cache_dir: Path) -> Iterator[None]:
    """Exclusive per-cache file lock: one process of the node builds, the others wait for it."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(cache_dir.parent / f"{cache_dir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _leftovers(cache_dir: Path) -> list[Path]:
    """Temporaries of builders of ``cache_dir`` (a live one's only while it holds the node lock)."""
    return sorted(cache_dir.parent.glob(f".{cache_dir.name}.tmp-*")) + sorted(
        cache_dir.parent.glob(f".{cache_dir.name}.old-*")
    )


def _write_atomic(kb_dir: str | Path, retriever: Any, cache_dir: Path, key: str, kb_digest: str) -> None:
    """Write into a temporary sibling (every file fsynced and hashed, ``meta.json`` last), then rename it
    into place; a damaged ``cache_dir`` is moved aside first and deleted after. Call under the node lock."""
    from gta_verl.kb.atomic import fsync_path

    tmp = cache_dir.parent / f".{cache_dir.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    old = None
    try:
        meta = _write_cache(retriever, tmp)
        names = sorted(p.name for p in tmp.iterdir())
        for name in names:
            fsync_path(tmp / name)
        digests = _hash_all([tmp / n for n in names])
        files = {
            n: {"bytes": (tmp / n).stat().st_size, "sha256": h} for n, h in zip(names, digests, strict=True)
        }
        meta.update(key=key, kb_digest=kb_digest, params=cache_params(retriever.config), files=files)
        meta["digest"] = _files_digest(files)
        with open(tmp / _META, "w") as f:
            f.write(json.dumps(meta))
            f.flush()
            os.fsync(f.fileno())
        fsync_path(tmp)
        if cache_dir.exists():
            old = cache_dir.parent / f".{cache_dir.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(cache_dir, old)  # replicas that mapped its files keep them until they exit
        os.replace(tmp, cache_dir)
        fsync_path(cache_dir.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    logger.info("shared retrieval arrays of %s written to %s", kb_dir, cache_dir)


def _map_index(path: Path, kind: str) -> Any:
    import faiss

    # Flat codes (IndexFlat*) and IVF lists can be memory-mapped; HNSW's graph cannot.
    mmap = faiss.IO_FLAG_MMAP
    flags = {"flat": faiss.IO_FLAG_MMAP_IFC, "ivf": mmap, "ivfpq": mmap}.get(kind, 0)
    return faiss.read_index(str(path), flags)


def cached_fact_index(cache_dir: Path, config: Any) -> Any:
    """The unique-fact index of ``cache_dir``, read (mapped where faiss can) instead of built.

    Returns:
        A :class:`~gta_verl.retrieval.index.VectorIndex` with ``source`` = the index file, or
        ``None`` when the KB has no triples.
    """
    from gta_verl.retrieval.index import Bf16Scan, VectorIndex, flat_vectors

    meta = json.loads((cache_dir / _META).read_text())
    if not meta["fact_index"]:
        return None
    path = cache_dir / "fact_index.faiss"
    index = _map_index(path, config.index)
    bf16 = None
    if meta.get("bf16"):
        bits = np.load(cache_dir / "fact_bf16.npy", mmap_mode="r")
        bf16 = Bf16Scan(flat_vectors(index), bits, meta["bf16"]["max_norm"])
    return VectorIndex.from_faiss(
        index,
        config.index,
        ef_search=config.hnsw_ef_search,
        refine=config.index_refine,
        vectors=np.load(cache_dir / "fact_emb.npy", mmap_mode="r"),
        bf16=bf16,
        source=path,
    )


def attach_shared_arrays(retriever: Any, cache_dir: Path) -> Any:
    """Swap ``retriever``'s private copies for read-only maps of ``cache_dir`` (in place)."""
    meta = json.loads((cache_dir / _META).read_text())
    retriever._fact_pairs = np.load(cache_dir / "fact_pairs.npy", mmap_mode="r")
    retriever._fact_emb = np.load(cache_dir / "fact_emb.npy", mmap_mode="r")
    retriever._doc_freq = np.load(cache_dir / "doc_freq.npy", mmap_mode="r")
    from_cache = getattr(retriever._fact_index, "source", None) == cache_dir / "fact_index.faiss"
    if meta["fact_index"] and retriever._fact_index is not None and not from_cache:
        retriever._fact_index._index = _map_index(cache_dir / "fact_index.faiss", retriever.config.index)
        retriever._fact_index.__dict__.pop("_keep", None)  # the mapped IVF index owns its quantizer
        if retriever._fact_index.vectors is not None:  # exact rescoring reads the mapped rows
            retriever._fact_index.vectors = retriever._fact_emb
    retriever._transition = _load_transition(cache_dir, meta["transition"])
    fact_index = retriever._fact_index
    if meta.get("bf16") and fact_index is not None and fact_index._bf16 is not None and not from_cache:
        from gta_verl.retrieval.index import Bf16Scan, flat_vectors

        retriever._fact_index._bf16 = Bf16Scan(
            flat_vectors(retriever._fact_index._index),
            np.load(cache_dir / "fact_bf16.npy", mmap_mode="r"),
            meta["bf16"]["max_norm"],
        )
    if meta.get("basis"):
        from gta_verl.retrieval.ppr.linear import PassageBasis

        retriever._basis = PassageBasis(
            **{n: np.load(cache_dir / f"basis_{n}.npy", mmap_mode="r") for n in _BASIS}, **meta["basis"]
        )
    return retriever


def mapped_kb(kb: Any, kb_dir: str | Path) -> Any:
    """``kb`` with its embedding matrices replaced by read-only maps of the KB's ``.npy`` files."""
    arrays = {n: np.load(Path(kb_dir) / f"{n}.npy", mmap_mode="r") for n in _EMB}
    for n, arr in arrays.items():
        if arr.shape != np.shape(getattr(kb, n)):
            raise ValueError(f"{Path(kb_dir) / (n + '.npy')}: shape {arr.shape} changed while loading")
    return replace(kb, **arrays)


def load_shared_retriever(
    kb_dir: str | Path, config: Any = None, embedder: Any = None, cache_root: str | Path | None = None
) -> Any:
    """The ``config.backend`` retriever of ``kb_dir`` with its large arrays node-shared memory maps.

    Every backend reads the KB's embedding matrices as maps of its ``.npy`` files; the ``graph``
    backend also maps its derived arrays (fact vectors and index, transition, passage basis)
    from the node cache. ``bm25`` keeps its own inverted index (built from the passage texts).

    Args:
        kb_dir: KB directory (checksums verified by ``load_kb``).
        config: :class:`RetrieverConfig` (default: GTA-RAG defaults).
        embedder: Query encoder (default: the KB's own).
        cache_root: Node-local cache root (default ``$GTA_VERL_CACHE/retriever-shared``).

    Returns:
        The retriever; its answers equal ``open_retriever(kb_dir, config, embedder)``'s.
    """
    from gta_verl.kb.embed import cache_root as default_root
    from gta_verl.kb.store import load_kb, manifest_digest
    from gta_verl.retrieval.backends import open_kb_retriever
    from gta_verl.retrieval.config import RetrieverConfig

    config = config or RetrieverConfig()
    kb = mapped_kb(load_kb(kb_dir), kb_dir)
    if config.backend != "graph":
        return open_kb_retriever(kb, config, embedder)
    root = Path(cache_root) if cache_root else default_root() / "retriever-shared"
    key = shared_cache_key(kb.manifest, config)
    cache_dir, kb_digest = root / key[:24], manifest_digest(kb.manifest)
    # A sound cache is served without the lock (a sound cache is never rewritten). Else the first replica
    # on a node to take the lock builds it (an IVF/HNSW index: minutes at 1M rows); the others wait for it,
    # then verify and read its index instead of building their own.
    problem = cache_problem(cache_dir, key, kb_digest)
    if problem is not None or _leftovers(cache_dir):
        with _node_lock(cache_dir):
            for stale in _leftovers(cache_dir):  # a killed builder's: a live one would hold the lock
                shutil.rmtree(stale, ignore_errors=True)
            problem = cache_problem(cache_dir, key, kb_digest)  # another replica may have rebuilt it
            if problem is not None:
                if problem != "not built":
                    logger.warning("%s: %s; rebuilding it", cache_dir, problem)
                retriever = open_kb_retriever(kb, config, embedder)
                try:
                    _write_atomic(kb_dir, retriever, cache_dir, key, kb_digest)
                except OSError as exc:
                    raise SharedCacheError(
                        f"{cache_dir}: {problem}, and it cannot be written here "
                        f"({exc.strerror or exc}); free space or pass another cache_root"
                    ) from None
                return attach_shared_arrays(retriever, cache_dir)
    retriever = open_kb_retriever(kb, config, embedder, fact_index=cached_fact_index(cache_dir, config))
    return attach_shared_arrays(retriever, cache_dir)
