"""Save and load a KB directory.

Layout (``SCHEMA_VERSION`` 1)::

    manifest.json          schema_version, created_at, gta_verl version, config, counts,
                           embedder, openie report, corpus counts, files {name: sha256}
    passages.parquet       doc_id, title, text                  (row i = document node i)
    entities.parquet       entity                               (row j = node n_docs + j)
    triples.parquet        subject, relation, object, doc_id, subject_idx, object_idx
    edges.parquet          source, target, kind, weight         (igraph edge order)
    extractions.parquet    doc_id, status, n_malformed, entities, triples (raw OpenIE, for `kb add`)
    passage_emb.npy / entity_emb.npy / triple_emb.npy   float32, L2-normalized

The directory is written next to the target, fsynced, and exchanged with the old
one in a single rename under a one-writer lock, so a crash never leaves a half-written KB
or no KB (:mod:`gta_verl.kb.atomic`); only a KB or an empty directory is replaced; loading checks schema
version and every checksum and says which file is wrong. The manifest cannot switch those checks
off: its ``files`` must list exactly the files of its schema version, each a
regular file inside the directory, and every table and array must agree with
the others in shape (see :meth:`KnowledgeBase.problems`).
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import gta_verl
from gta_verl.data.types import Passage, Triple
from gta_verl.kb import atomic
from gta_verl.kb.atomic import KBWriteError
from gta_verl.kb.graph import graph_from_edge_table
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.kb.openie.base import Extraction

MANIFEST = "manifest.json"
KB_FILES = (
    "passages.parquet",
    "entities.parquet",
    "triples.parquet",
    "edges.parquet",
    "extractions.parquet",
    "passage_emb.npy",
    "entity_emb.npy",
    "triple_emb.npy",
)


class KBLoadError(RuntimeError):
    """The KB directory is missing, from another schema version, or was modified."""


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """A KB version's identity: sha256 (16 hex digits) of its files' checksums, sorted by name.

    Two directories with the same tables have the same digest whatever their creation time; any
    rewritten table (``kb add``) changes it. Shown by the retriever's ``health`` and ``stats``.
    """
    files = manifest.get("files") or {}
    text = json.dumps(sorted((str(k), str(v)) for k, v in files.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_out_dir(out_dir: str | Path, force: bool = False) -> None:
    """Refuse to replace anything at ``out_dir`` but a KB (or an empty directory), unless ``force``.

    Raises:
        KBWriteError: ``out_dir`` is a file, the working directory (or above it), or a non-empty non-KB
            directory.
    """
    atomic.check_replaceable(
        atomic.resolve_out(out_dir), _not_a_kb, "a KB", force=force, force_flag="--force"
    )


def _not_a_kb(out: Path) -> str | None:
    try:
        read_manifest(out)
        return None
    except KBLoadError as exc:
        return str(exc).split(": ", 1)[-1]


def _complete(d: Path) -> bool:
    try:
        verify_kb(d)
        return True
    except (KBLoadError, OSError):
        return False


# The tables and arrays of the directory (layout: the module docstring), and the size they take.


def _extractions_from_kb(kb: KnowledgeBase) -> dict[str, Extraction]:
    """Fallback when no raw extractions are given: the KB's own (normalized) triples.

    Normalization is idempotent, so rebuilding from these gives the same graph.
    """
    by_doc: dict[str, list[tuple[str, str, str]]] = {p.doc_id: [] for p in kb.passages}
    for t in kb.triples:
        by_doc[t.doc_id].append((t.subject, t.relation, t.object))
    return {d: Extraction(d, (), tuple(ts), "ok" if ts else "empty") for d, ts in by_doc.items()}


def _write_tables(kb: KnowledgeBase, d: Path, extractions: Mapping[str, Extraction]) -> None:
    import pandas as pd

    pd.DataFrame(
        {
            "doc_id": [p.doc_id for p in kb.passages],
            "title": [p.title for p in kb.passages],
            "text": [p.text for p in kb.passages],
        }
    ).to_parquet(d / "passages.parquet", index=False)
    pd.DataFrame({"entity": list(kb.entities)}).to_parquet(d / "entities.parquet", index=False)
    tei = np.asarray(kb.triple_entity_ids, dtype=np.int64).reshape(-1, 2)
    pd.DataFrame(
        {
            "subject": [t.subject for t in kb.triples],
            "relation": [t.relation for t in kb.triples],
            "object": [t.object for t in kb.triples],
            "doc_id": [t.doc_id for t in kb.triples],
            "subject_idx": tei[:, 0],
            "object_idx": tei[:, 1],
        }
    ).to_parquet(d / "triples.parquet", index=False)
    g = kb.graph
    el = np.asarray(g.get_edgelist(), dtype=np.int64).reshape(-1, 2)
    pd.DataFrame(
        {
            "source": el[:, 0],
            "target": el[:, 1],
            "kind": g.es["kind"] if g.ecount() else [],
            "weight": np.asarray(g.es["weight"] if g.ecount() else [], dtype=np.float64),
        }
    ).to_parquet(d / "edges.parquet", index=False)
    exs = [
        extractions.get(p.doc_id) or Extraction(p.doc_id, status="error", error="no extraction")
        for p in kb.passages
    ]
    pd.DataFrame(
        {
            "doc_id": [e.doc_id for e in exs],
            "status": [e.status for e in exs],
            "n_malformed": [e.n_malformed for e in exs],
            "error": [e.error for e in exs],
            "entities": [list(e.entities) for e in exs],
            "triples": [[list(t) for t in e.triples] for e in exs],
        }
    ).to_parquet(d / "extractions.parquet", index=False)
    for name, arr in (
        ("passage_emb", kb.passage_emb),
        ("entity_emb", kb.entity_emb),
        ("triple_emb", kb.triple_emb),
    ):
        np.save(d / f"{name}.npy", np.ascontiguousarray(arr, dtype=np.float32))


def _estimated_bytes(kb: KnowledgeBase) -> int:
    """Rough size of the KB on disk: vectors plus text (parquet compresses, so this errs high)."""
    vec = sum(int(np.asarray(a).size) * 4 for a in (kb.passage_emb, kb.entity_emb, kb.triple_emb))
    text = sum(len(p.text) + len(p.title) for p in kb.passages) * 2
    return vec + text + 64 * (len(kb.triples) + kb.graph.ecount()) + (1 << 20)


def save_kb(
    kb: KnowledgeBase,
    out_dir: str | Path,
    extractions: Mapping[str, Extraction] | None = None,
    force: bool = False,
    exchange: Callable[[Path, Path], bool] | None = None,
) -> KnowledgeBase:
    """Write ``kb`` to ``out_dir`` atomically and durably (replacing an existing KB there).

    Every file is fsynced and the manifest written last; the new directory is exchanged with the old one in
    one rename (see :mod:`gta_verl.kb.atomic`), under a one-writer lock.

    Args:
        force: Replace ``out_dir`` even if it is a non-empty directory that is not a KB.
        exchange: Directory-swap primitive (tests force the two-rename fallback with it).

    Returns:
        ``kb`` with the final manifest (checksums, creation time) attached.

    Raises:
        KBWriteError: ``out_dir`` is not a KB, another writer holds it, or the disk is full (one line).
    """
    out = atomic.resolve_out(out_dir)
    problems = kb.problems()
    if problems:  # no load would accept it: refuse before anything is written or replaced
        field_name, why = problems[0]
        raise KBWriteError(
            f"{out}: the built KB is invalid ({_FIELD_FILE.get(field_name, field_name)}: {why}); "
            "nothing was written"
        )
    with atomic.write_lock(out):
        atomic.recover(out, _complete)
        check_out_dir(out, force)
        atomic.remove_stale(out)
        atomic.check_free_space(out.parent, _estimated_bytes(kb))
        tmp = atomic.tmp_dir(out)
        try:
            tmp.mkdir()
            manifest = _write_dir(
                kb, tmp, extractions if extractions is not None else _extractions_from_kb(kb)
            )
            _check_written(tmp, out)
            atomic.swap_into_place(tmp, out, exchange)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise KBWriteError(
                    f"{out.parent}: no space left while writing the KB "
                    f"({Path(exc.filename or tmp).name}); nothing was replaced"
                ) from None
            raise atomic.os_error(out, exc, "write the KB (nothing was replaced)") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return replace(kb, manifest=manifest)


def _check_written(tmp: Path, out: Path) -> None:
    """Read the new copy back with the load-time checks (checksums were just taken from these bytes)."""
    try:
        _load(tmp, verify=False)
    except KBLoadError as exc:
        raise KBWriteError(
            f"{out}: the written KB does not load ({str(exc).replace(str(tmp), '<new copy>')}); "
            "nothing was replaced"
        ) from None


def recover_interrupted(kb_dir: str | Path) -> bool:
    """Clean up after a killed writer: put a complete KB back at ``kb_dir`` if a kill between the two renames
    left it missing, and delete the ``.NAME.tmp-*`` / ``.NAME.old-*`` copies killed writers left.

    Called by every load, so a reader does not keep a half-written or old copy on disk until the next write.
    Does nothing while another writer holds the directory's lock (its copy is live), or where the lock cannot
    be taken (read-only file system). Returns whether a KB was moved back.
    """
    try:
        out = atomic.resolve_out(kb_dir)
    except KBWriteError:  # a symlink loop: nothing to recover; the caller's own use of the path says why
        return False
    if not out.parent.is_dir() or (out.exists() and not atomic.leftovers(out)):
        return False
    try:
        with atomic.write_lock(out):
            moved = atomic.recover(out, _complete) is not None
            atomic.remove_stale(out)
            return moved
    except (KBWriteError, OSError):
        return False


def _write_dir(kb: KnowledgeBase, tmp: Path, extractions: Mapping[str, Extraction]) -> dict[str, Any]:
    _write_tables(kb, tmp, extractions)
    manifest = {
        **kb.manifest,
        "schema_version": gta_verl.SCHEMA_VERSION,
        "gta_verl_version": gta_verl.__version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "embedder": kb.embedder_name,
        "dim": int(kb.passage_emb.shape[1]),
        "files": {f: sha256_file(tmp / f) for f in KB_FILES},
    }
    atomic.fsync_tree(tmp)  # tables durable before the manifest that vouches for them
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    atomic.fsync_tree(tmp)
    return manifest


MAX_MANIFEST_BYTES = 16 << 20  # a manifest is a few KB; refuse to slurp anything huge
_SHA256_HEX = frozenset("0123456789abcdef")


def _plain_name(name: Any) -> bool:
    """A bare file name: no directory part, not absolute, not ``..``."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "\x00" not in name
        and Path(name).name == name
        and not Path(name).is_absolute()
    )


def _regular_file(kb_dir: Path, name: str, what: str) -> Path:
    """``kb_dir / name`` if it is a regular file inside ``kb_dir`` (after symlinks), else KBLoadError."""
    if not _plain_name(name):
        raise KBLoadError(
            f"{kb_dir / MANIFEST}: {what} {name!r} is not a plain file name inside the KB directory"
        )
    path = kb_dir / name
    try:
        real = path.resolve(strict=True)
        st = real.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise KBLoadError(f"{path}: {what} is missing; rebuild the KB with `gta-verl kb build`") from None
    except (OSError, RuntimeError) as exc:
        raise KBLoadError(f"{path}: cannot read {what}: {exc}") from None
    if not real.is_relative_to(kb_dir.resolve()):
        raise KBLoadError(f"{path}: {what} points outside the KB directory (to {real})")
    if not stat.S_ISREG(st.st_mode):
        raise KBLoadError(f"{path}: {what} is not a regular file")
    return path


def _check_files(kb_dir: Path, files: Any) -> dict[str, str]:
    """The manifest's ``files`` must list exactly :data:`KB_FILES`, each with a sha256."""
    where = kb_dir / MANIFEST
    if not isinstance(files, dict):
        raise KBLoadError(f"{where}: 'files' must map each KB file to its sha256, got {type(files).__name__}")
    for name in files:  # reject traversal/devices by name before comparing sets
        if not _plain_name(name):
            raise KBLoadError(f"{where}: file name {name!r} is not a plain file name inside the KB directory")
    missing, extra = sorted(set(KB_FILES) - set(files)), sorted(set(files) - set(KB_FILES))
    if missing or extra:
        raise KBLoadError(
            f"{where}: 'files' must list exactly the {len(KB_FILES)} files of schema version "
            f"{gta_verl.SCHEMA_VERSION}"
            + (f"; missing {missing}" if missing else "")
            + (f"; unexpected {extra}" if extra else "")
        )
    for name, digest in files.items():
        if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _SHA256_HEX:
            raise KBLoadError(f"{where}: checksum of {name} is not a sha256 hex digest: {digest!r}")
    return dict(files)


def read_manifest(kb_dir: str | Path) -> dict[str, Any]:
    """Read and check ``manifest.json``: a JSON object of this schema version listing exactly the KB files.

    Raises:
        KBLoadError: Naming the manifest (or the KB directory) and what is wrong.
    """
    kb_dir = Path(kb_dir)
    path = kb_dir / MANIFEST
    if not kb_dir.is_dir() or not path.exists():
        raise KBLoadError(f"{kb_dir}: not a KB directory (no {MANIFEST}); build one with `gta-verl kb build`")
    _regular_file(kb_dir, MANIFEST, "manifest")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise KBLoadError(f"{path}: manifest over {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise KBLoadError(f"{path}: manifest is not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise KBLoadError(f"{path}:{exc.lineno}: corrupt manifest: {exc.msg}") from None
    except RecursionError:
        raise KBLoadError(f"{path}: corrupt manifest: nested too deeply") from None
    if not isinstance(manifest, dict):
        raise KBLoadError(f"{path}: manifest must be a JSON object, got {type(manifest).__name__}")
    ver = manifest.get("schema_version")
    if ver != gta_verl.SCHEMA_VERSION:
        raise KBLoadError(
            f"{path}: KB schema version {ver!r}, this gta-verl reads version "
            f"{gta_verl.SCHEMA_VERSION}; rebuild it with `gta-verl kb build`"
        )
    if not isinstance(manifest.get("embedder", ""), str):
        raise KBLoadError(f"{path}: 'embedder' must be a string, got {manifest['embedder']!r}")
    _check_files(kb_dir, manifest.get("files"))
    return manifest


def verify_kb(kb_dir: str | Path) -> dict[str, Any]:
    """Check the manifest, that every KB file is a regular file inside ``kb_dir``, and its sha256."""
    kb_dir = Path(kb_dir)
    manifest = read_manifest(kb_dir)
    for name, expected in manifest["files"].items():
        path = _regular_file(kb_dir, name, "file listed in the manifest")
        got = sha256_file(path)
        if got != expected:
            raise KBLoadError(
                f"{path}: checksum mismatch (manifest {expected[:12]}…, file {got[:12]}…): "
                "the KB was modified after it was written; rebuild it with `gta-verl kb build`"
            )
    return manifest


def load_extractions(kb_dir: str | Path) -> dict[str, Extraction]:
    """The raw OpenIE extractions stored with a KB (input of ``kb add``)."""
    df = _read_table(
        Path(kb_dir),
        "extractions.parquet",
        ("doc_id", "entities", "triples", "status", "n_malformed", "error"),
    )
    return {
        r["doc_id"]: Extraction(
            r["doc_id"],
            tuple(r["entities"]),
            tuple(tuple(t) for t in r["triples"]),  # type: ignore[misc]
            r["status"],
            int(r["n_malformed"]),
            r["error"],
        )
        for r in df.to_dict("records")
    }


def read_doc_ids(kb_dir: str | Path) -> list[str]:
    """The KB's document ids (row order), after checking its manifest; no vectors are read."""
    read_manifest(kb_dir)
    return [str(d) for d in _read_table(Path(kb_dir), "passages.parquet", ("doc_id",))["doc_id"]]


def _read_table(kb_dir: Path, name: str, columns: tuple[str, ...]) -> Any:
    import pandas as pd

    path = _regular_file(kb_dir, name, "KB table")
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many types for a damaged file
        raise KBLoadError(f"{path}: unreadable parquet: {type(exc).__name__}: {exc}") from None
    absent = [c for c in columns if c not in df.columns]
    if absent:
        raise KBLoadError(f"{path}: missing column(s) {absent}")
    return df


def _read_array(kb_dir: Path, name: str) -> np.ndarray:
    path = _regular_file(kb_dir, name, "KB array")
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as exc:  # truncated header, bad magic, pickled object, ...
        raise KBLoadError(f"{path}: unreadable .npy array: {type(exc).__name__}: {exc}") from None
    if not isinstance(arr, np.ndarray):
        raise KBLoadError(f"{path}: not a single .npy array")
    return arr


def _edge_table(kb_dir: Path, n_nodes: int) -> Any:
    edf = _read_table(kb_dir, "edges.parquet", ("source", "target", "kind", "weight"))
    path = kb_dir / "edges.parquet"
    try:
        src, dst = (edf[c].to_numpy(dtype=np.int64) for c in ("source", "target"))
        weight = edf["weight"].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise KBLoadError(f"{path}: non-numeric source/target/weight: {exc}") from None
    if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n_nodes):
        raise KBLoadError(f"{path}: edge endpoint outside the {n_nodes} nodes of the passage/entity tables")
    if not np.isfinite(weight).all():
        raise KBLoadError(f"{path}: non-finite edge weight")
    return graph_from_edge_table(n_nodes, src, dst, edf["kind"].tolist(), weight)


# Which file holds each KnowledgeBase field (to name it in a KBLoadError).
_FIELD_FILE = {
    "passages": "passages.parquet",
    "triple_entity_ids": "triples.parquet",
    "graph": "edges.parquet",
    "passage_emb": "passage_emb.npy",
    "entity_emb": "entity_emb.npy",
    "triple_emb": "triple_emb.npy",
}


def load_kb(kb_dir: str | Path, verify: bool = True) -> KnowledgeBase:
    """Load a KB directory written by :func:`save_kb`.

    Every table and array is checked against the others (rows, widths, index
    ranges); the manifest's ``counts`` are recomputed from the loaded KB, never
    taken from the file. ``verify`` adds the sha256 of every file.

    Raises:
        KBLoadError: Missing directory/manifest, wrong schema version, a file set
            that differs from the schema's, a name outside the KB directory, a
            checksum mismatch, or tables/arrays that disagree (names the file).
    """
    kb_dir = Path(kb_dir)
    recover_interrupted(kb_dir)
    return _load(kb_dir, verify)


def _load(kb_dir: Path, verify: bool) -> KnowledgeBase:
    """:func:`load_kb` without the clean-up of killed writers (also the check of a copy before its swap)."""
    from gta_verl.kb.stats import kb_stats

    manifest = verify_kb(kb_dir) if verify else read_manifest(kb_dir)
    pdf = _read_table(kb_dir, "passages.parquet", ("doc_id", "title", "text"))
    passages = tuple(
        Passage(d, t, x) for d, t, x in zip(pdf["doc_id"], pdf["title"], pdf["text"], strict=True)
    )
    entities = tuple(_read_table(kb_dir, "entities.parquet", ("entity",))["entity"].tolist())
    tdf = _read_table(
        kb_dir, "triples.parquet", ("subject", "relation", "object", "doc_id", "subject_idx", "object_idx")
    )
    triples = tuple(
        Triple(s, r, o, d)
        for s, r, o, d in zip(tdf["subject"], tdf["relation"], tdf["object"], tdf["doc_id"], strict=True)
    )
    try:
        tei = tdf[["subject_idx", "object_idx"]].to_numpy(dtype=np.int64).reshape(-1, 2)
    except (TypeError, ValueError) as exc:
        raise KBLoadError(f"{kb_dir / 'triples.parquet'}: non-integer entity index: {exc}") from None
    graph = _edge_table(kb_dir, len(passages) + len(entities))
    ex_rows = _read_table(kb_dir, "extractions.parquet", ("doc_id", "status")).shape[0]
    if ex_rows != len(passages):
        raise KBLoadError(f"{kb_dir / 'extractions.parquet'}: {ex_rows} rows for {len(passages)} passages")
    emb = {n: _read_array(kb_dir, f"{n}.npy") for n in ("passage_emb", "entity_emb", "triple_emb")}
    kb = KnowledgeBase(
        passages=passages,
        entities=entities,
        triples=triples,
        triple_entity_ids=tei,
        graph=graph,
        passage_emb=emb["passage_emb"],
        entity_emb=emb["entity_emb"],
        triple_emb=emb["triple_emb"],
        embedder_name=manifest.get("embedder", ""),
        manifest=manifest,
    )
    problems = kb.problems()
    if problems:
        field_name, why = problems[0]
        raise KBLoadError(f"{kb_dir / _FIELD_FILE.get(field_name, MANIFEST)}: {why}; rebuild the KB")
    dim = manifest.get("dim")
    if dim is not None and dim != kb.passage_emb.shape[1]:
        raise KBLoadError(
            f"{kb_dir / 'passage_emb.npy'}: width {kb.passage_emb.shape[1]}, manifest says {dim}"
        )
    # Counts are derived data: recomputed, so an edited manifest cannot misreport the KB.
    return replace(kb, manifest={**manifest, "counts": kb_stats(kb)})
