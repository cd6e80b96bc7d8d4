"""Named corruptions of a saved KB directory and a time-bounded load, for the store tests and benchmarks.

``tests/kb/test_store_hardening_on_cpu.py`` applies each of :data:`KB_CORRUPTIONS` to a copy
of the toy KB and checks the :class:`~gta_verl.kb.store.KBLoadError` it must give;
``benchmarks/serving/stress.py`` applies them to copies of the MuSiQue KB and tabulates the results.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gta_verl.kb.store import KB_FILES, load_kb

if TYPE_CHECKING:
    from gta_verl.kb.knowledge_base import KnowledgeBase


def read_manifest(d: Path) -> dict[str, Any]:
    """The parsed ``manifest.json`` of the KB directory ``d``."""
    return json.loads((d / "manifest.json").read_text())


def write_manifest(d: Path, m: Any) -> None:
    """Overwrite ``d/manifest.json`` with ``m`` as JSON (any value: corruptions write non-objects)."""
    (d / "manifest.json").write_text(json.dumps(m))


def _rehash(d: Path, name: str) -> None:
    """Record ``name``'s current sha256 in the manifest: only the structural checks can catch it."""
    m = read_manifest(d)
    m["files"][name] = hashlib.sha256((d / name).read_bytes()).hexdigest()
    write_manifest(d, m)


def load_kb_bounded(d: Path, timeout_s: float = 60.0) -> KnowledgeBase:
    """``load_kb(d)`` in a daemon thread; a load that does not finish is a test failure.

    Args:
        d: The KB directory.
        timeout_s: How long to wait for the load.

    Returns:
        The loaded KB.

    Raises:
        AssertionError: The load was still running after ``timeout_s``.
        BaseException: Whatever ``load_kb`` raised (a :class:`KBLoadError` for a corrupt KB).
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["kb"] = load_kb(d)
        except BaseException as exc:  # handed to the test
            box["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():  # not an ``assert``: it must hold under ``python -O`` too
        raise AssertionError(f"load_kb({d}) still running after {timeout_s} s")
    if "exc" in box:
        raise box["exc"]
    return box["kb"]


# ---------------------------------------------------------------- manifest edits
def _drop_files_key(d: Path) -> None:
    m = read_manifest(d)
    del m["files"]
    write_manifest(d, m)


def _drop_one_entry(d: Path) -> None:
    m = read_manifest(d)
    del m["files"]["entity_emb.npy"]
    write_manifest(d, m)
    np.save(d / "entity_emb.npy", np.zeros((14, 64), np.float32))  # and corrupt the unlisted file


def _add_entry(name: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        m = read_manifest(d)
        m["files"][name] = "0" * 64
        write_manifest(d, m)

    return edit


def _manifest_is(value: Any) -> Callable[[Path], None]:
    return lambda d: write_manifest(d, value)


def _set(key: str, value: Any) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        m = read_manifest(d)
        m[key] = value
        write_manifest(d, m)

    return edit


# ---------------------------------------------------------------- file corruption
def _short_rows(name: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        arr = np.load(d / name)
        np.save(d / name, arr[:-3])  # 3 rows short, checksum updated
        _rehash(d, name)

    return edit


def _truncate(name: str, rehash: bool) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: len(data) // 2])
        if rehash:
            _rehash(d, name)

    return edit


def _flip(name: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        data = bytearray((d / name).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (d / name).write_bytes(bytes(data))

    return edit


def _delete(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def _symlink(name: str, target: str) -> Callable[[Path], None]:
    def edit(d: Path) -> None:
        (d / name).unlink()
        os.symlink(target, d / name)

    return edit


def _edge_out_of_range(d: Path) -> None:
    edf = pd.read_parquet(d / "edges.parquet")
    edf.loc[0, "target"] = 10**9  # past any KB's node count
    edf.to_parquet(d / "edges.parquet", index=False)
    _rehash(d, "edges.parquet")


def _triple_index_out_of_range(d: Path) -> None:
    tdf = pd.read_parquet(d / "triples.parquet")
    tdf.loc[0, "object_idx"] = 10**9  # past any KB's entity count (toy: 0..13)
    tdf.to_parquet(d / "triples.parquet", index=False)
    _rehash(d, "triples.parquet")


def _nan_embedding(d: Path) -> None:
    arr = np.load(d / "passage_emb.npy")
    arr[2, 5] = np.nan
    np.save(d / "passage_emb.npy", arr)
    _rehash(d, "passage_emb.npy")


def _wrong_dtype(d: Path) -> None:
    np.save(d / "triple_emb.npy", np.load(d / "triple_emb.npy").astype(np.float64))
    _rehash(d, "triple_emb.npy")


def _pickled_array(d: Path) -> None:
    np.save(d / "entity_emb.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _rehash(d, "entity_emb.npy")


def _manifest_not_utf8(d: Path) -> None:
    (d / "manifest.json").write_bytes(b'{"schema_version": 1, "embedder": "\xff"}')


#: Corruptions of a saved KB, by name: ``(edit the KB directory in place, regex the KBLoadError
#: message must match)``. The message names the file; the row and node counts in the regexes are
#: the toy KB's (:func:`~gta_verl.testing.toy_kb.make_toy_kb` with the 64-dimensional
#: :class:`~gta_verl.testing.toy_kb.HashEmbedder`).
KB_CORRUPTIONS: dict[str, tuple[Callable[[Path], None], str]] = {
    "manifest without files": (_drop_files_key, r"manifest\.json: 'files' must map"),
    "manifest missing one file": (_drop_one_entry, r"manifest\.json: .*missing \['entity_emb\.npy'\]"),
    "manifest lists /dev/zero": (
        _add_entry("/dev/zero"),
        r"manifest\.json: .*'/dev/zero' is not a plain file",
    ),
    "manifest path traversal": (_add_entry("../../../../etc/hostname"), r"manifest\.json: .*etc/hostname"),
    "manifest extra file": (_add_entry("notes.txt"), r"manifest\.json: .*unexpected \['notes\.txt'\]"),
    "manifest is a list": (_manifest_is([1, 2]), r"manifest\.json: manifest must be a JSON object, got list"),
    "manifest is a string": (_manifest_is("kb"), r"manifest\.json: manifest must be a JSON object, got str"),
    "manifest not UTF-8": (_manifest_not_utf8, r"manifest\.json: manifest is not UTF-8"),
    "manifest bad checksum value": (
        _set("files", {f: "x" for f in KB_FILES}),
        r"manifest\.json: checksum of",
    ),
    "manifest embedder not a string": (
        _set("embedder", ["a"]),
        r"manifest\.json: 'embedder' must be a string",
    ),
    "entity_emb 3 rows short": (_short_rows("entity_emb.npy"), r"entity_emb\.npy: 11 rows for 14 table rows"),
    "triple_emb 3 rows short": (_short_rows("triple_emb.npy"), r"triple_emb\.npy: 10 rows for 13 table rows"),
    "passage_emb NaN": (_nan_embedding, r"passage_emb\.npy: holds NaN"),
    "triple_emb float64": (_wrong_dtype, r"triple_emb\.npy: expected a float32 matrix, got float64"),
    "entity_emb pickled": (_pickled_array, r"entity_emb\.npy: unreadable \.npy array"),
    "edge endpoint out of range": (_edge_out_of_range, r"edges\.parquet: edge endpoint outside the 24 nodes"),
    "triple entity index out of range": (
        _triple_index_out_of_range,
        r"triples\.parquet: entity index outside",
    ),
    "truncated parquet, checksum updated": (
        _truncate("passages.parquet", True),
        r"passages\.parquet: unreadable parquet",
    ),
    "truncated npy, checksum updated": (_truncate("passage_emb.npy", True), r"passage_emb\.npy: unreadable"),
    "truncated parquet": (_truncate("triples.parquet", False), r"triples\.parquet: checksum mismatch"),
    "flipped bytes": (_flip("edges.parquet"), r"edges\.parquet: checksum mismatch"),
    "deleted file": (
        _delete("entities.parquet"),
        r"entities\.parquet: file listed in the manifest is missing",
    ),
    "symlink to /dev/zero": (
        _symlink("passage_emb.npy", "/dev/zero"),
        r"passage_emb\.npy: file listed in the manifest (is not a regular file|points outside)",
    ),
    "symlink outside the KB": (
        _symlink("entities.parquet", "/etc/hostname"),
        r"entities\.parquet: file listed in the manifest points outside the KB directory",
    ),
}
