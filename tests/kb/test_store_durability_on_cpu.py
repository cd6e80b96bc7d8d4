"""A KB write never destroys data.

Refuses to replace a non-KB directory, leaves a loadable KB at ``--out`` when killed at any point of the
swap, fsyncs what it writes, lets one writer at a time in, and fails a full disk with one line.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gta_verl.bundled import MUSIQUE_OPENIE
from gta_verl.cli import main
from gta_verl.kb import atomic
from gta_verl.kb.store import KBWriteError, load_kb, read_manifest, save_kb
from gta_verl.testing.toy_kb import TOY_DOCS, HashEmbedder, make_toy_kb

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def toy():
    return make_toy_kb(HashEmbedder())


def _leftovers(out: Path) -> list[str]:
    """Hidden tmp/old copies next to ``out`` (the lock file ``.NAME.lock`` is meant to stay)."""
    return sorted(p.name for p in out.parent.glob(f".{out.name}.*-*"))


def test_cli_build_refuses_a_non_kb_directory_and_keeps_its_files(tmp_path: Path, capsys) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "thesis.txt").write_text("precious")
    rc = main(["kb", "build", "--corpus", str(tmp_path / "none.jsonl"), "--openie", "spacy", "--out", str(d)])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(d) in err and "not a KB" in err and "--force" in err
    assert len(err.strip().splitlines()) == 1
    assert (d / "thesis.txt").read_text() == "precious"


def test_cli_build_refuses_the_working_directory_even_with_force(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "notes.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    rc = main(["kb", "build", "--corpus", "none.jsonl", "--openie", "spacy", "--out", ".", "--force"])
    assert rc == 2 and "working directory" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "keep"


def test_save_replaces_a_kb_or_an_empty_dir_and_a_non_kb_only_with_force(toy, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    save_kb(toy, empty)
    save_kb(toy, empty)  # a KB is replaced
    assert load_kb(empty).n_docs == len(TOY_DOCS)
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("x")
    with pytest.raises(KBWriteError, match="not empty and not a KB"):
        save_kb(toy, other)
    assert (other / "a.txt").exists()
    save_kb(toy, other, force=True)
    assert not (other / "a.txt").exists() and load_kb(other).n_docs == len(TOY_DOCS)
    assert _leftovers(empty) == [] and _leftovers(other) == []


def test_every_file_and_the_directories_are_fsynced(toy, tmp_path: Path, monkeypatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    save_kb(toy, tmp_path / "kb")
    # 8 tables + tmp dir before the manifest; 9 files + tmp dir after; the parent after the rename = 20
    assert len(synced) >= 8 + 1 + 9 + 1 + 1


_KILL_SCRIPT = """
import os, signal, sys
from pathlib import Path
from gta_verl.kb import atomic
from gta_verl.kb.store import save_kb
from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb
real = os.replace
def replace_then_die(a, b):
    real(a, b)
    os.kill(os.getpid(), signal.SIGKILL)   # killed between the two renames
atomic.os.replace = replace_then_die
kb = make_toy_kb(HashEmbedder())
kb = kb.__class__(**{**kb.__dict__, "manifest": {**kb.manifest, "marker": "new"}})
save_kb(kb, Path(sys.argv[1]), exchange=lambda a, b: False)
"""


def test_a_kill_between_the_two_renames_leaves_a_loadable_kb(toy, tmp_path: Path) -> None:
    out = tmp_path / "kb"
    save_kb(toy, out)
    proc = subprocess.run([sys.executable, "-c", _KILL_SCRIPT, str(out)], cwd=REPO, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert not out.exists()  # the fallback's window: the old KB renamed aside, the new one not yet in place
    kb = load_kb(out)  # recovers the new KB (its manifest was written last, so it is complete)
    assert kb.n_docs == len(TOY_DOCS) and read_manifest(out).get("marker") == "new"
    # the recovering load also deletes the old copy: cleaning up does not wait for the next write
    assert _leftovers(out) == []
    save_kb(toy, out)
    assert _leftovers(out) == []  # the old copy left by the kill is cleaned under the lock


def test_the_exchange_keeps_a_kb_at_out_at_every_instant(toy, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "kb"
    save_kb(toy, out)
    seen: list[bool] = []
    real = atomic.exchange_paths

    def exchange_and_look(a: Path, b: Path) -> bool:
        seen.append((b / "manifest.json").exists())
        ok = real(a, b)
        seen.append((b / "manifest.json").exists())
        return ok

    monkeypatch.setattr(atomic, "exchange_paths", exchange_and_look)
    save_kb(toy, out, exchange=exchange_and_look)
    if seen == []:
        pytest.skip("no renameat2 here")
    assert seen == [True, True]
    assert load_kb(out).n_docs == len(TOY_DOCS)


_HOLD_SCRIPT = """
import sys, time
from pathlib import Path
from gta_verl.kb.atomic import write_lock
with write_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_second_writer_fails_with_one_line(toy, tmp_path: Path) -> None:
    out = tmp_path / "kb"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SCRIPT, str(out)], cwd=REPO, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        with pytest.raises(KBWriteError, match=rf"pid {holder.pid}\) is writing this KB") as exc:
            save_kb(toy, out)
        assert "\n" not in str(exc.value) and not out.exists()
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.05)
    save_kb(toy, out)  # the lock dies with its holder
    assert load_kb(out).n_docs == len(TOY_DOCS)


def test_a_second_writer_arriving_before_the_holder_wrote_its_pid_still_names_it(tmp_path: Path) -> None:
    """The lock file is still empty between the holder's flock and its pid write; the second writer waits
    for the pid rather than naming `pid ?` (two simultaneous builds, benchmarks/kb/reliability_stress.py)."""
    import fcntl
    import threading

    out = tmp_path / "kb"
    fd = os.open(tmp_path / ".kb.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a holder between its flock and its pid write
        threading.Timer(0.05, lambda: os.pwrite(fd, b"4242", 0)).start()
        with pytest.raises(KBWriteError, match=r"\(pid 4242\) is writing this KB"):
            with atomic.write_lock(out):
                pass
    finally:
        os.close(fd)
    with atomic.write_lock(out):
        assert (tmp_path / ".kb.lock").read_text() == str(os.getpid())
    assert (tmp_path / ".kb.lock").read_text() == ""  # a released lock names no holder


def test_a_full_disk_fails_with_one_line_and_keeps_the_old_kb(toy, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "kb"
    save_kb(toy, out)

    def no_space(path, arr):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(np, "save", no_space)
    with pytest.raises(KBWriteError, match="no space left while writing the KB") as exc:
        save_kb(toy, out)
    assert "\n" not in str(exc.value)
    monkeypatch.undo()
    assert load_kb(out).n_docs == len(TOY_DOCS) and _leftovers(out) == []


def test_too_little_free_space_is_refused_before_writing(toy, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda p: type("U", (), {"free": 1024})())
    with pytest.raises(KBWriteError, match=r"0\.0 MiB free, the KB needs about"):
        save_kb(toy, tmp_path / "kb")
    assert not (tmp_path / "kb").exists() and _leftovers(tmp_path / "kb") == []


def test_stale_tmp_of_a_killed_writer_is_removed(toy, tmp_path: Path) -> None:
    out = tmp_path / "kb"
    save_kb(toy, out)
    stale = out.parent / ".kb.tmp-deadbeef"
    stale.mkdir()
    (stale / "passages.parquet").write_bytes(b"half")
    save_kb(toy, out)
    assert not stale.exists()


def test_a_load_removes_a_killed_writers_copy_but_not_a_live_one(toy, tmp_path: Path) -> None:
    """A writer SIGKILLed mid-write leaves a partial `.kb.tmp-*`; the next load removes it once no writer
    holds the lock (benchmarks/kb/reliability_stress.py's kill case)."""
    out = tmp_path / "kb"
    save_kb(toy, out)
    stale = out.parent / ".kb.tmp-deadbeef"
    stale.mkdir()
    (stale / "passages.parquet").write_bytes(b"half")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_SCRIPT, str(out)], cwd=REPO, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        assert load_kb(out).n_docs == len(TOY_DOCS)
        assert stale.exists()  # a writer holds the lock: the copy may be its own, in progress
    finally:
        holder.kill()
        holder.wait()
    assert load_kb(out).n_docs == len(TOY_DOCS)
    assert _leftovers(out) == []


def test_cli_add_takes_the_lock(tmp_path: Path, toy, capsys) -> None:
    out = tmp_path / "kb"
    save_kb(toy, out)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_HOLD_SCRIPT), str(out)], cwd=REPO, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"locked"
        rc = main(["kb", "add", str(out), "--corpus", str(tmp_path / "x.jsonl"), "--openie", "spacy"])
        assert rc == 2 and "is writing this KB" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()


def test_a_build_whose_openie_found_nothing_fails_unless_allowed(tmp_path: Path, capsys) -> None:
    """A precomputed OpenIE file for another corpus must fail, not give an empty graph and exit 0."""
    from gta_verl.kb.build import check_not_empty

    corpus = REPO / "assets" / "hipporag_sample" / "sample_corpus.json"
    other = MUSIQUE_OPENIE
    out = tmp_path / "kb"
    rc = main(
        [
            "kb",
            "build",
            "--corpus",
            str(corpus),
            "--format",
            "hipporag",
            "--openie",
            f"precomputed:{other}",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "found no triple in any of" in err[-1] and "--allow-empty" in err[-1]
    assert not out.exists()
    check_not_empty({"n_triples": 3, "n_passages": 2}, corpus)  # any triple is enough


def test_cli_build_refuses_the_working_directory_when_it_is_a_kb(toy, tmp_path: Path, monkeypatch, capsys):
    # Before: `cd KB && gta-verl kb build ... --out .` exchanged the KB the shell stood in for a new one.
    kb_dir = tmp_path / "kb"
    save_kb(toy, kb_dir)
    before = read_manifest(kb_dir)["created_at"], os.stat(kb_dir).st_ino
    monkeypatch.chdir(kb_dir)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"title": "t", "text": "Tokyo is the capital of Japan."}\n')
    rc = main(["kb", "build", "--corpus", str(corpus), "--openie", "spacy", "--out", "."])
    err = capsys.readouterr().err
    assert rc == 2 and "working directory" in err and len(err.strip().splitlines()) == 1, err
    assert (read_manifest(kb_dir)["created_at"], os.stat(kb_dir).st_ino) == before


def test_a_kb_no_load_accepts_is_refused_and_the_old_one_kept(toy, tmp_path: Path) -> None:
    # Before: NaN vectors (a poisoned embedding cache) were written with rc 0 over a good KB.
    import dataclasses

    out = tmp_path / "kb"
    save_kb(toy, out)
    digest = read_manifest(out)["files"]
    emb = toy.passage_emb.copy()
    emb[0, 0] = np.nan
    with pytest.raises(KBWriteError, match="passage_emb.npy.*NaN.*nothing was"):
        save_kb(dataclasses.replace(toy, passage_emb=emb), out)
    assert read_manifest(out)["files"] == digest and _leftovers(out) == []
    load_kb(out)


def test_the_written_copy_is_read_back_before_the_swap(toy, tmp_path: Path, monkeypatch) -> None:
    # A copy that passes the in-memory checks but does not read back (here: a table cut after writing).
    import gta_verl.kb.store as store

    out = tmp_path / "kb"
    save_kb(toy, out)
    digest = read_manifest(out)["files"]
    real = store._write_dir

    def write_then_cut(kb, tmp, extractions):
        manifest = real(kb, tmp, extractions)
        with open(tmp / "extractions.parquet", "r+b") as f:
            f.truncate(10)
        return manifest

    monkeypatch.setattr(store, "_write_dir", write_then_cut)
    with pytest.raises(KBWriteError, match="does not load.*nothing was replaced"):
        save_kb(toy, out)
    assert read_manifest(out)["files"] == digest and _leftovers(out) == []


def _build(out: Path, tmp_path: Path) -> list[str]:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"title": "t", "text": "Tokyo is the capital of Japan."}\n')
    return ["kb", "build", "--corpus", str(corpus), "--openie", "spacy", "--out", str(out)]


def _enospc_on_lock(monkeypatch):
    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "pwrite", pwrite)


def _erofs_on_open(monkeypatch):
    real = os.open

    def fake_open(path, flags, *a):
        if str(path).endswith(".lock"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *a)

    monkeypatch.setattr(atomic.os, "open", fake_open)


@pytest.mark.parametrize("case", ["lock path is a directory", "symlink loop", "read-only", "0 bytes free"])
def test_write_side_os_errors_are_one_line_naming_out(tmp_path: Path, monkeypatch, capsys, case) -> None:
    # Before: a traceback naming the lock file (or a RuntimeError for the loop), not --out.
    out = tmp_path / "kb"
    if case == "lock path is a directory":
        (tmp_path / ".kb.lock").mkdir()
        cause = "Is a directory"
    elif case == "symlink loop":
        out.symlink_to(out)
        cause = "Symlink loop"
    elif case == "read-only":
        _erofs_on_open(monkeypatch)
        cause = "Read-only file system"
    else:
        _enospc_on_lock(monkeypatch)
        cause = "No space left on device"
    rc = main(_build(out, tmp_path))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and str(out) in err and cause in err, err
