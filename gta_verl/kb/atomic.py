"""Durable, atomic replacement of a KB directory, and the lock that serializes writers.

A KB is written into a hidden sibling ``.NAME.tmp-XXXX`` (every file fsynced, the manifest last), then swapped
with the old one in one ``renameat2(RENAME_EXCHANGE)`` call, so at every instant ``NAME`` is a complete KB,
old or new. Where the kernel or file system has no exchange (non-Linux, some network file systems), two
renames are used and :func:`recover` puts a complete KB back at ``NAME`` if a kill landed between them. Only
one writer per ``NAME`` at a time: :func:`write_lock` holds an ``flock`` on ``.NAME.lock`` for the whole
build.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_held: dict[Path, int] = {}  # lock path -> depth, so save_kb inside a locked build does not lock itself out


class KBWriteError(RuntimeError):
    """A KB cannot be written at the requested place (not a KB, locked by another writer, no space)."""


def resolve_out(out: str | Path) -> Path:
    """``out`` made absolute with symlinks resolved; a symlink loop is one :class:`KBWriteError` line."""
    try:
        return Path(out).resolve()
    except (RuntimeError, OSError) as exc:  # Python < 3.13 raises RuntimeError("Symlink loop ...")
        raise KBWriteError(f"{out}: cannot resolve the path ({exc}); pick another --out") from None


def os_error(out: Path, exc: OSError, doing: str) -> KBWriteError:
    """One line naming ``out`` and the cause of an OS error met while ``doing`` (read-only, full, ...)."""
    where = f" ({exc.filename})" if exc.filename else ""
    return KBWriteError(f"{out}: cannot {doing}: {exc.strerror or exc}{where}")


def tmp_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"


def _siblings(out: Path, kind: str) -> list[Path]:
    return sorted(p for p in out.parent.glob(f".{out.name}.{kind}-*") if p.is_dir())


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory's entries are durable only after its own fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(d: Path) -> None:
    for p in d.iterdir():
        if p.is_file():
            fsync_path(p)
    fsync_path(d)


def exchange_paths(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the platform or file system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_into_place(tmp: Path, out: Path, exchange: Callable[[Path, Path], bool] | None = None) -> None:
    """Make the complete directory ``tmp`` appear at ``out``; the old ``out`` (if any) is deleted afterwards.

    ``exchange`` (default :func:`exchange_paths`) is a parameter so tests can force the two-rename fallback.
    """
    if out.exists() and (exchange or exchange_paths)(tmp, out):
        fsync_path(out.parent)
        shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old KB
        return
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(out, old)
    os.replace(tmp, out)
    fsync_path(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def recover(out: Path, is_complete: Callable[[Path], bool]) -> Path | None:
    """If ``out`` is missing after an interrupted two-rename swap, move a complete KB back; returns what
    moved.

    Prefers the new KB (a ``.tmp-*`` whose manifest checks out, since the manifest is written last), else the
    old one (``.old-*``). Call only while holding :func:`write_lock`, or when no writer can be running.
    """
    if out.exists():
        return None
    for cand in [*_siblings(out, "tmp"), *_siblings(out, "old")]:
        if is_complete(cand):
            os.replace(cand, out)
            fsync_path(out.parent)
            return cand
    return None


def leftovers(out: Path) -> list[Path]:
    """The ``.NAME.tmp-*`` / ``.NAME.old-*`` directories next to ``out`` (a live writer's, or a killed
    one's)."""
    return [*_siblings(out, "tmp"), *_siblings(out, "old")]


def remove_stale(out: Path) -> None:
    """Delete leftovers of killed writers (call only while holding the lock and after :func:`recover`)."""
    for p in leftovers(out):
        shutil.rmtree(p, ignore_errors=True)


def _holder_pid(fd: int, wait_s: float = 1.0) -> str:
    """The pid written in the lock file by its holder; waits briefly for one that just took the lock.

    The holder writes its pid right after its ``flock``; a second writer arriving in between would otherwise
    read an empty file (measured: 1 of 2 simultaneous builds said ``pid ?``).
    """
    deadline = time.monotonic() + wait_s
    while True:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if holder or time.monotonic() >= deadline:
            return holder or "?"
        time.sleep(0.005)


@contextlib.contextmanager
def write_lock(out: Path) -> Iterator[None]:
    """Hold the one-writer lock of KB directory ``out``; a second writer fails at once with one line."""
    out = resolve_out(out)
    lock = out.parent / f".{out.name}.lock"
    if lock in _held:
        _held[lock] += 1
        try:
            yield
        finally:
            _held[lock] -= 1
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # read-only file system, the lock path a directory, no permission, ...
        raise os_error(out, exc, "take the write lock") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            raise KBWriteError(
                f"{out}: another `gta-verl kb build`/`kb add` (pid {holder}) is writing this KB; "
                "wait for it to finish or pick another --out"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as exc:  # a disk with 0 bytes free
            exc.filename = exc.filename or str(lock)
            raise os_error(out, exc, "take the write lock") from None
        _held[lock] = 1
        try:
            yield
        finally:
            del _held[lock]
            os.ftruncate(fd, 0)  # still locked: the file names the holder only while it holds the lock
    finally:
        os.close(fd)  # closing releases the flock


def check_replaceable(
    out: Path,
    problem: Callable[[Path], str | None],
    what: str,
    *,
    force: bool = False,
    force_flag: str | None = None,
    error: type[Exception] = KBWriteError,
) -> None:
    """Refuse to replace ``out`` unless it is missing, empty, or already ``what`` (``problem(out)`` is None).

    The rule every writer of a whole directory shares (``kb build``, ``policy prepare|cut``): a command only
    replaces a directory it could have written, never the working directory (the shell would be left in a
    deleted one), whatever it holds.

    Args:
        out: The resolved target (:func:`resolve_out`).
        problem: Why a non-empty ``out`` is not ``what`` (None: it is, and may be replaced).
        what: The kind written, for the message ("a KB", "a gemma-3-270m model directory").
        force: Replace a non-empty directory of another kind too (only where the command offers it).
        force_flag: The option that sets ``force``, named in the refusal; None where there is none.
        error: The exception raised (one line).
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise error(f"{out}: exists and is not a directory; refusing to replace it")
    if Path.cwd().resolve().is_relative_to(out):
        raise error(
            f"{out}: is (or contains) the working directory; refusing to replace it — "
            "run from another directory"
        )
    if not any(out.iterdir()):
        return
    reason = problem(out)
    if reason is None or force:
        return
    hint = f", or pass {force_flag} to replace the directory and all it holds" if force_flag else ""
    raise error(
        f"{out}: not empty and not {what} ({reason}); refusing to replace it — pick another --out{hint}"
    )


def check_free_space(parent: Path, need_bytes: int) -> None:
    """Fail before writing when the file system clearly cannot hold ``need_bytes``."""
    try:
        free = shutil.disk_usage(parent).free
    except OSError as exc:
        raise os_error(parent, exc, "measure free space") from None
    if free < need_bytes:
        raise KBWriteError(
            f"{parent}: {free / 2**20:.1f} MiB free, the KB needs about {need_bytes / 2**20:.1f} MiB; "
            "free space or pick another --out"
        )
