"""Is a cached warm start whole? Checksums recorded at the end of its build, verified before reuse.

Files that merely exist prove nothing: a killed copy leaves a short ``model.safetensors`` or a cut
``config.json`` that the consumer only fails on later. :func:`record` writes ``complete.json``
(schema version, sha256 of every file of the model and of the question sets) as the last step of
a build, atomically; :func:`mismatches` names what no longer matches it, so the build redoes only that.
A warm start built before the record existed is adopted (recorded) only when :func:`whole` finds every
safetensors file and JSON file of its model intact.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gta_verl.kb.store import sha256_file

COMPLETE_FILE = "complete.json"
SCHEMA_VERSION = 1
_NO_RECORD = COMPLETE_FILE


@dataclass(frozen=True)
class Checked:
    """What :func:`mismatches` found: ``bad`` holds relative paths (``complete.json`` if unreadable)."""

    bad: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.bad

    def touches(self, rel: str) -> bool:
        """Whether ``rel`` (a file or a directory prefix) is bad, or nothing can be trusted."""
        return any(b == _NO_RECORD or b == rel or b.startswith(rel.rstrip("/") + "/") for b in self.bad)


def _files(root: Path, parts: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in parts:
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.is_file()))
        elif p.is_file():
            out.append(p)
    return out


def record(root: Path, parts: list[Path]) -> dict[str, str]:
    """Write ``root/complete.json`` with the sha256 of every file under ``parts`` (temp, fsync, rename)."""
    files = {str(p.relative_to(root)): sha256_file(p) for p in _files(root, parts)}
    body = json.dumps({"schema_version": SCHEMA_VERSION, "files": files}, indent=2, sort_keys=True)
    tmp = root / f".{COMPLETE_FILE}.tmp"
    with open(tmp, "w") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / COMPLETE_FILE)
    return files


def _read(root: Path) -> dict[str, str] | None:
    try:
        data: Any = json.loads((root / COMPLETE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    files = data.get("files")
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) for v in files.values()):
        return None
    return files


def mismatches(root: Path, required: list[str]) -> Checked:
    """Check ``root`` against its ``complete.json``.

    Args:
        root: the warm start's directory.
        required: relative paths that must be recorded (a record without them is not a whole build).

    Returns:
        :class:`Checked` naming every recorded file that is missing or differs, every required
        path that was not recorded, or ``complete.json`` itself when it is absent or unreadable.
    """
    files = _read(root)
    if files is None:
        return Checked((_NO_RECORD,))
    bad = [r for r in required if not any(k == r or k.startswith(r + "/") for k in files)]
    for rel, digest in sorted(files.items()):
        path = root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:  # a record naming files outside its root
            return Checked((_NO_RECORD,))
        try:
            if not path.is_file() or sha256_file(path) != digest:
                bad.append(rel)
        except OSError:
            bad.append(rel)
    return Checked(tuple(bad))


def _safetensors_whole(path: Path) -> bool:
    """The header parses and the file is exactly as long as the tensors it declares (a cut file is not)."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100 << 20:
                return False
            header = json.loads(f.read(n))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        return path.stat().st_size == 8 + n + max(ends, default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        return False


def _json_whole(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def whole(model_dir: Path, tables: list[Path]) -> bool:
    """Whether an unrecorded build looks intact: its model has ``config.json`` and at least one
    safetensors file, every one of them whole, and each table reads as parquet."""
    import pyarrow.parquet as pq

    weights = sorted(model_dir.glob("*.safetensors"))
    if not weights or not (model_dir / "config.json").is_file():
        return False
    if not all(_safetensors_whole(w) for w in weights) or not all(
        _json_whole(j) for j in model_dir.glob("*.json")
    ):
        return False
    try:
        for t in tables:
            pq.read_metadata(t)
    except Exception:  # missing, cut, not parquet: pyarrow raises several types
        return False
    return True
