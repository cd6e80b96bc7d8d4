"""Hugging Face model directories written whole or not at all, and proved by a manifest on every resolve.

A model directory is written like a KB (:mod:`gta_verl.kb.atomic`): into a hidden sibling ``.NAME.tmp-XXXX``
under a one-writer lock (``.NAME.lock``; a second writer waits, then reuses what the first wrote), every file
fsynced, :data:`MANIFEST` written last, then exchanged with the old directory in one rename, so a reader sees
the old directory or the new one, never neither. Killed writers' temporaries are removed by the next writer.

The manifest names the directory's kind, its ``model_type``, the digest of what it was built from and the
sha256 of each file; :func:`ensure_model_dir` checks all of them on every resolve and rebuilds a directory
that fails (logging the file at fault). Only a missing or empty directory, or one of the same kind, is ever
replaced (:func:`gta_verl.kb.atomic.check_replaceable`, the ``kb build`` rule): every other ``--out`` gets a
one-line :class:`ModelDirError`.

Directories written before the manifest existed are recognized by their kind's ``legacy`` test; a kind
with an ``adopt`` check (Gemma-3-270M's weights, a minute to rebuild) verifies the old directory in place
and writes its manifest once; the others are rebuilt.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gta_verl.kb import atomic
from gta_verl.kb.atomic import KBWriteError

log = logging.getLogger(__name__)

#: Files whose presence marks a loadable causal LM directory.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
MANIFEST = "gta_manifest.json"
MANIFEST_SCHEMA_VERSION = 1
#: ``tempfile.mkdtemp`` names of the writer before the manifest (``.NAME-XXXXXXXX``), removed like the others.
_OLD_TMP = re.compile(r"^\.(?P<name>.+)-[a-z0-9_]{8}$")


class ModelDirError(RuntimeError):
    """A model directory cannot be used or written here (one line naming the path and the cause)."""


@dataclass(frozen=True)
class ModelKind:
    """What a model directory holds.

    Attributes:
        kind: Written to the manifest; only a directory of the same kind is replaced.
        model_type: ``config.json``'s ``model_type`` (None for a tokenizer-only directory).
        required: Files the directory must hold.
        legacy: Recognizes a manifest-less directory written by an older gta-verl as this kind.
        adopt: Verifies such a directory in place (None: it is good, its manifest is written); the reason
            otherwise, and it is rebuilt. Without ``adopt`` legacy directories are rebuilt.
    """

    kind: str
    model_type: str | None
    required: tuple[str, ...] = REQUIRED_FILES
    legacy: Callable[[Path], bool] | None = None
    adopt: Callable[[Path], str | None] | None = None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digest_text(*parts: str) -> str:
    """sha256 of ``parts`` joined by NUL (a combined source digest)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def files_digest(files: Mapping[str, str]) -> str:
    """A directory's identity: sha256 of its files' digests, sorted by name."""
    return digest_text(json.dumps(sorted(files.items())))


def read_json(path: Path) -> Any:
    """``path`` parsed, or None when it is absent or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def config_model_type(path: Path) -> str | None:
    cfg = read_json(path / "config.json")
    return cfg.get("model_type") if isinstance(cfg, dict) else None


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of ``path``, checked for shape; :class:`ModelDirError` naming it otherwise."""
    where = path / MANIFEST
    if not where.is_file():
        raise ModelDirError(f"{where}: missing (not a gta-verl model directory, or written before manifests)")
    m = read_json(where)
    if not isinstance(m, dict):
        raise ModelDirError(f"{where}: not a JSON object")
    if m.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise ModelDirError(
            f"{where}: schema_version {m.get('schema_version')!r}, expected {MANIFEST_SCHEMA_VERSION}"
        )
    files = m.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and k == Path(k).name and k not in ("", ".", "..") and isinstance(v, str)
        for k, v in files.items()
    ):
        raise ModelDirError(f"{where}: 'files' must map each plain file name to its sha256")
    return m


def dir_problem(path: Path, kind: ModelKind | None = None, source_sha256: str | None = None) -> str | None:
    """Why ``path`` is not a complete directory of ``kind`` built from ``source_sha256`` (None: it is).

    Checks the manifest, then every listed file's sha256 and ``config.json``'s ``model_type``. ``kind`` None
    accepts any kind, ``source_sha256`` None any source. The reason starts with the file at fault.
    """
    if not path.is_dir():
        return f"{path}: no such directory"
    try:
        m = read_manifest(path)
    except ModelDirError as exc:
        return str(exc)
    where = path / MANIFEST
    if kind is not None:
        wrong_kind = _kind_problem(m, kind)
        if wrong_kind is not None:
            return f"{where}: {wrong_kind}"
    if source_sha256 is not None and m.get("source_sha256") != source_sha256:
        return f"{where}: built from source {str(m.get('source_sha256'))[:12]}…, not {source_sha256[:12]}…"
    damaged = _files_problem(path, m["files"])
    if damaged is not None:
        return damaged
    if "config.json" in m["files"] and config_model_type(path) != m.get("model_type"):
        found = config_model_type(path)
        return f"{path / 'config.json'}: model_type {found!r}, the manifest says {m.get('model_type')!r}"
    return None


def _kind_problem(m: dict[str, Any], kind: ModelKind) -> str | None:
    """Why manifest ``m`` does not describe a directory of ``kind`` (None: it does)."""
    if m.get("kind") != kind.kind:
        return f"holds a {m.get('kind')!r} directory, not {kind.kind!r}"
    if m.get("model_type") != kind.model_type:
        return f"model_type {m.get('model_type')!r}, expected {kind.model_type!r}"
    missing = [f for f in kind.required if f not in m["files"]]
    if missing:
        return f"does not list {', '.join(missing)}"
    return None


def _files_problem(path: Path, files: dict[str, str]) -> str | None:
    """The first of ``files`` (name to sha256) under ``path`` that is missing, not a regular file, or
    changed, with why (None: all are as listed)."""
    for name, digest in files.items():
        f = path / name
        try:
            st = f.lstat()
        except OSError:
            return f"{f}: missing"
        if not stat.S_ISREG(st.st_mode):
            return f"{f}: not a regular file"
        if sha256_file(f) != digest:
            return f"{f}: checksum differs from the manifest (modified or damaged)"
    return None


def is_complete(path: Path, kind: ModelKind | None = None, source_sha256: str | None = None) -> bool:
    return dir_problem(Path(path), kind, source_sha256) is None


def _not_same_kind(kind: ModelKind) -> Callable[[Path], str | None]:
    def problem(path: Path) -> str | None:
        try:
            found = read_manifest(path).get("kind")
        except ModelDirError:
            if kind.legacy is not None and kind.legacy(path):
                return None
            return "no gta-verl model manifest"
        return None if found == kind.kind else f"it holds a {found!r} directory"

    return problem


def check_out(target: str | Path, kind: ModelKind) -> Path:
    """``target`` resolved, if writing ``kind`` there may replace what it holds, else
    :class:`ModelDirError`."""
    try:
        out = atomic.resolve_out(target)
        atomic.check_replaceable(out, _not_same_kind(kind), f"a {kind.kind} directory", error=ModelDirError)
    except KBWriteError as exc:
        raise ModelDirError(str(exc)) from None
    except OSError as exc:
        raise _os_error(Path(target), exc, "inspect the directory") from None
    return out


def _os_error(out: Path, exc: OSError, doing: str) -> ModelDirError:
    where = f" ({exc.filename})" if exc.filename else ""
    return ModelDirError(f"{out}: cannot {doing}: {exc.strerror or exc}{where}")


@contextlib.contextmanager
def writer_lock(out: Path) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``out``; a second writer waits here, then finds the first one's result."""
    lock = out.parent / f".{out.name}.lock"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # read-only file system, no permission, the parent a file, ...
        raise _os_error(out, exc, "take the write lock") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s: another writer holds %s; waiting for it", out, lock)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def remove_stale(out: Path) -> None:
    """Delete killed writers' temporaries beside ``out`` (hold :func:`writer_lock`)."""
    atomic.remove_stale(out)
    for p in out.parent.iterdir():
        m = _OLD_TMP.match(p.name)
        if m and m["name"] == out.name and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def write_manifest(
    path: Path, kind: ModelKind, source_sha256: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Digest every file of ``path`` and write :data:`MANIFEST` last (temporary name, fsync, rename)."""
    import gta_verl

    names = sorted(p.name for p in path.iterdir() if p.is_file() and p.name != MANIFEST)
    missing = [f for f in kind.required if f not in names]
    if missing:
        raise ModelDirError(f"{path}: the writer produced no {', '.join(missing)}")
    found = config_model_type(path) if "config.json" in names else None
    if found != kind.model_type:
        raise ModelDirError(f"{path / 'config.json'}: model_type {found!r}, expected {kind.model_type!r}")
    manifest = {
        **(extra or {}),
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "kind": kind.kind,
        "model_type": kind.model_type,
        "source_sha256": source_sha256,
        "gta_verl_version": gta_verl.__version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "files": {n: sha256_file(path / n) for n in names},
    }
    atomic.fsync_tree(path)  # the files durable before the manifest that vouches for them
    tmp = path / f".{MANIFEST}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
        atomic.fsync_path(tmp)
        os.replace(tmp, path / MANIFEST)
    finally:
        tmp.unlink(missing_ok=True)
    atomic.fsync_path(path)
    return manifest


def ensure_model_dir(
    target: str | Path,
    kind: ModelKind,
    source_sha256: str | None,
    write: Callable[[Path], object],
    force: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Return ``target`` if it is a complete ``kind`` directory built from ``source_sha256``; else write it.

    Args:
        target: The model directory.
        kind: What it holds.
        source_sha256: Digest of what it is built from (None: accept any; then ``write`` must not be needed).
        write: Fills an empty directory with the model's files (no manifest).
        force: Rebuild even if complete.
        extra: More manifest fields (for people reading it; not checked).

    Raises:
        ModelDirError: ``target`` is not a directory of ``kind`` (and not empty), or cannot be written (one
            line naming the path and the cause).
    """
    out = Path(target)
    problem = dir_problem(out, kind, source_sha256)
    if problem is None and not force:
        return out
    out = check_out(out, kind)
    try:
        with writer_lock(out):
            atomic.recover(out, lambda d: is_complete(d, kind, source_sha256))
            remove_stale(out)
            problem = dir_problem(out, kind, source_sha256)
            if problem is None and not force:  # another writer finished while this one waited
                return out
            check_out(out, kind)
            if not force and _adopted(out, kind, source_sha256, extra):
                return out
            if out.exists() and any(out.iterdir()):
                log.warning(
                    "%s: rebuilding the model directory (%s)", out, problem if not force else "--force"
                )
            if source_sha256 is None:
                raise ModelDirError(f"{out}: {problem}; its source is unavailable, so it cannot be rebuilt")
            _write_new(out, kind, source_sha256, write, extra)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ModelDirError(
                f"{out.parent}: no space left while writing the model directory "
                f"({Path(exc.filename or out).name}); nothing was replaced"
            ) from None
        raise _os_error(out, exc, "write the model directory (nothing was replaced)") from None
    return out


def _adopted(out: Path, kind: ModelKind, source_sha256: str | None, extra: Mapping[str, Any] | None) -> bool:
    """Migration: a manifest-less directory of ``kind`` verified in place gets its manifest; True if so."""
    if kind.adopt is None or kind.legacy is None or (out / MANIFEST).exists() or not out.is_dir():
        return False
    if not kind.legacy(out) or source_sha256 is None:
        return False
    why = kind.adopt(out)
    if why is not None:
        log.warning("%s: written before manifests and not verified (%s); rebuilding it", out, why)
        return False
    try:
        write_manifest(out, kind, source_sha256, {**(extra or {}), "adopted": True})
    except OSError as exc:  # verified but read-only: use it as it is, verify again next time
        log.warning("%s: verified, but its manifest cannot be written (%s)", out, exc.strerror or exc)
    log.info("%s: written before manifests; verified and its manifest written", out)
    return True


def _write_new(
    out: Path,
    kind: ModelKind,
    source_sha256: str,
    write: Callable[[Path], object],
    extra: Mapping[str, Any] | None,
) -> None:
    tmp = atomic.tmp_dir(out)
    try:
        tmp.mkdir()
        write(tmp)
        write_manifest(tmp, kind, source_sha256, extra)
        atomic.swap_into_place(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
