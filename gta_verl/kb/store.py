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

The directory is written next to the target and renamed into place, so a
crash never leaves a half-written KB; loading checks schema version and every
checksum and says which file is wrong.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import gta_verl
from gta_verl.data.types import Passage, Triple
from gta_verl.kb.graph import graph_from_edge_table
from gta_verl.kb.knowledge_base import KnowledgeBase
from gta_verl.kb.openie.base import Extraction

MANIFEST = "manifest.json"
KB_FILES = ("passages.parquet", "entities.parquet", "triples.parquet", "edges.parquet",
            "extractions.parquet", "passage_emb.npy", "entity_emb.npy", "triple_emb.npy")


class KBLoadError(RuntimeError):
    """The KB directory is missing, from another schema version, or was modified."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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

    pd.DataFrame({"doc_id": [p.doc_id for p in kb.passages], "title": [p.title for p in kb.passages],
                  "text": [p.text for p in kb.passages]}).to_parquet(d / "passages.parquet", index=False)
    pd.DataFrame({"entity": list(kb.entities)}).to_parquet(d / "entities.parquet", index=False)
    tei = np.asarray(kb.triple_entity_ids, dtype=np.int64).reshape(-1, 2)
    pd.DataFrame({"subject": [t.subject for t in kb.triples], "relation": [t.relation for t in kb.triples],
                  "object": [t.object for t in kb.triples], "doc_id": [t.doc_id for t in kb.triples],
                  "subject_idx": tei[:, 0], "object_idx": tei[:, 1]}).to_parquet(
        d / "triples.parquet", index=False)
    g = kb.graph
    el = np.asarray(g.get_edgelist(), dtype=np.int64).reshape(-1, 2)
    pd.DataFrame({"source": el[:, 0], "target": el[:, 1], "kind": g.es["kind"] if g.ecount() else [],
                  "weight": np.asarray(g.es["weight"] if g.ecount() else [], dtype=np.float64)}).to_parquet(
        d / "edges.parquet", index=False)
    exs = [extractions.get(p.doc_id) or Extraction(p.doc_id, status="error", error="no extraction")
           for p in kb.passages]
    pd.DataFrame({"doc_id": [e.doc_id for e in exs], "status": [e.status for e in exs],
                  "n_malformed": [e.n_malformed for e in exs], "error": [e.error for e in exs],
                  "entities": [list(e.entities) for e in exs],
                  "triples": [[list(t) for t in e.triples] for e in exs]}).to_parquet(
        d / "extractions.parquet", index=False)
    for name, arr in (("passage_emb", kb.passage_emb), ("entity_emb", kb.entity_emb),
                      ("triple_emb", kb.triple_emb)):
        np.save(d / f"{name}.npy", np.ascontiguousarray(arr, dtype=np.float32))


def save_kb(kb: KnowledgeBase, out_dir: str | Path,
            extractions: Mapping[str, Extraction] | None = None) -> KnowledgeBase:
    """Write ``kb`` to ``out_dir`` atomically (replacing an existing KB there).

    Returns:
        ``kb`` with the final manifest (checksums, creation time) attached.
    """
    out = Path(out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _write_tables(kb, tmp, extractions if extractions is not None else _extractions_from_kb(kb))
        manifest = {**kb.manifest, "schema_version": gta_verl.SCHEMA_VERSION,
                    "gta_verl_version": gta_verl.__version__,
                    "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "embedder": kb.embedder_name, "dim": int(kb.passage_emb.shape[1]),
                    "files": {f: sha256_file(tmp / f) for f in KB_FILES}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return replace(kb, manifest=manifest)


def read_manifest(kb_dir: str | Path) -> dict[str, Any]:
    path = Path(kb_dir) / MANIFEST
    if not path.exists():
        raise KBLoadError(f"{kb_dir}: not a KB directory (no {MANIFEST}); build one with `gta-verl kb build`")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KBLoadError(f"{path}:{exc.lineno}: corrupt manifest: {exc.msg}") from exc
    ver = manifest.get("schema_version")
    if ver != gta_verl.SCHEMA_VERSION:
        raise KBLoadError(f"{kb_dir}: KB schema version {ver}, this gta-verl reads version "
                          f"{gta_verl.SCHEMA_VERSION}; rebuild it with `gta-verl kb build`")
    return manifest


def verify_kb(kb_dir: str | Path) -> dict[str, Any]:
    """Check schema version and every file's sha256; return the manifest."""
    kb_dir = Path(kb_dir)
    manifest = read_manifest(kb_dir)
    for name, expected in manifest.get("files", {}).items():
        path = kb_dir / name
        if not path.exists():
            raise KBLoadError(f"{path}: file listed in the manifest is missing; rebuild the KB")
        got = sha256_file(path)
        if got != expected:
            raise KBLoadError(f"{path}: checksum mismatch (manifest {expected[:12]}…, file {got[:12]}…): "
                              "the KB was modified after it was written; rebuild it with `gta-verl kb build`")
    return manifest


def load_extractions(kb_dir: str | Path) -> dict[str, Extraction]:
    """The raw OpenIE extractions stored with a KB (input of ``kb add``)."""
    import pandas as pd

    df = pd.read_parquet(Path(kb_dir) / "extractions.parquet")
    return {r["doc_id"]: Extraction(r["doc_id"], tuple(r["entities"]),
                                    tuple(tuple(t) for t in r["triples"]),  # type: ignore[misc]
                                    r["status"], int(r["n_malformed"]), r["error"])
            for r in df.to_dict("records")}


def load_kb(kb_dir: str | Path, verify: bool = True) -> KnowledgeBase:
    """Load a KB directory written by :func:`save_kb`.

    Raises:
        KBLoadError: Missing directory/manifest, wrong schema version, or a
            checksum mismatch (names the file).
    """
    import pandas as pd

    kb_dir = Path(kb_dir)
    manifest = verify_kb(kb_dir) if verify else read_manifest(kb_dir)
    pdf = pd.read_parquet(kb_dir / "passages.parquet")
    passages = tuple(Passage(d, t, x) for d, t, x in zip(pdf["doc_id"], pdf["title"], pdf["text"]))
    entities = tuple(pd.read_parquet(kb_dir / "entities.parquet")["entity"].tolist())
    tdf = pd.read_parquet(kb_dir / "triples.parquet")
    triples = tuple(Triple(s, r, o, d) for s, r, o, d in
                    zip(tdf["subject"], tdf["relation"], tdf["object"], tdf["doc_id"]))
    tei = tdf[["subject_idx", "object_idx"]].to_numpy(dtype=np.int64).reshape(-1, 2)
    edf = pd.read_parquet(kb_dir / "edges.parquet")
    graph = graph_from_edge_table(len(passages) + len(entities), edf["source"].to_numpy(),
                                  edf["target"].to_numpy(), edf["kind"].tolist(), edf["weight"].to_numpy())
    emb = {n: np.load(kb_dir / f"{n}.npy") for n in ("passage_emb", "entity_emb", "triple_emb")}
    return KnowledgeBase(passages=passages, entities=entities, triples=triples, triple_entity_ids=tei,
                         graph=graph, passage_emb=emb["passage_emb"], entity_emb=emb["entity_emb"],
                         triple_emb=emb["triple_emb"], embedder_name=manifest.get("embedder", ""),
                         manifest=manifest)
