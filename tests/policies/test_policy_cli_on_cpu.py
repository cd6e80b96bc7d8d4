"""``gta-verl policy prepare|cut|path``: no ``--out`` that is someone else's folder is ever emptied, a
read-only cache and a misspelt name are one line, never a traceback or the name printed back.

The Gemma build is the toy one (:func:`toy_models.fake_gemma_build`): what is tested is which directories
the commands may replace, not the weights.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gta_verl.cli import main
from tests.policies.toy_models import fake_gemma_build, write_toy_gemma


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("GTA_VERL_CACHE", str(root))
    fake_gemma_build(monkeypatch)
    return root


def _user_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "thesis.tex").write_text("three years of work")
    (path / "data").mkdir(exist_ok=True)
    (path / "data" / "runs.csv").write_text("1,2,3")
    return path


def _intact(path: Path) -> bool:
    return (path / "thesis.tex").read_text() == "three years of work" and (
        path / "data" / "runs.csv"
    ).is_file()


def _one_line_error(err: str, *words: str) -> bool:
    lines = err.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("gta-verl: error: ") and all(w in lines[0] for w in words)


def _cut_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A toy Gemma source and texts it can cut to (no KB is read)."""
    from gta_verl.policies import vocab_cut

    monkeypatch.setattr(vocab_cut, "policy_texts", lambda kb, data=(): ["abcd", "ab"])
    src = write_toy_gemma(tmp_path / "src")
    return ["policy", "cut", str(src), "--kb", str(tmp_path / "kb")]


COMMANDS = {
    "prepare": lambda tmp, mp: ["policy", "prepare", "gemma-3-270m"],
    "prepare --tokenizer-only": lambda tmp, mp: ["policy", "prepare", "gemma-3-270m", "--tokenizer-only"],
    "cut": _cut_args,
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_out_holding_a_user_folder_is_refused_and_kept(
    command: str,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """a writer that replaces any directory not holding a complete model deletes the folder, exit 0."""
    out = _user_folder(tmp_path / "mine")
    args = COMMANDS[command](tmp_path, monkeypatch)
    capsys.readouterr()
    rc = main([*args, "--out", str(out)])
    assert rc == 2 and _intact(out)
    assert _one_line_error(capsys.readouterr().err, str(out), "not empty", "refusing to replace it")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_out_dot_is_refused_and_the_working_directory_kept(
    command: str,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--out .`` emptied the working directory, then crashed."""
    args = COMMANDS[command](tmp_path, monkeypatch)
    work = _user_folder(tmp_path / "work")
    monkeypatch.chdir(work)
    capsys.readouterr()
    assert main([*args, "--out", "."]) == 2 and _intact(work)
    assert _one_line_error(capsys.readouterr().err, "working directory")


def test_out_of_another_kind_is_refused(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A complete tokenizer-only directory is not a place to write the full model (nor the reverse)."""
    tok = tmp_path / "tok"
    assert main(["policy", "prepare", "gemma-3-270m", "--tokenizer-only", "--out", str(tok)]) == 0
    before = sorted(p.name for p in tok.iterdir())
    capsys.readouterr()
    assert main(["policy", "prepare", "gemma-3-270m", "--out", str(tok)]) == 2
    assert _one_line_error(capsys.readouterr().err, "gemma-3-270m-tokenizer-v1")
    assert sorted(p.name for p in tok.iterdir()) == before


def test_empty_out_and_own_kind_are_written(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert main(["policy", "prepare", "gemma-3-270m", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert main(["policy", "prepare", "gemma-3-270m", "--out", str(out), "--force"]) == 0
    assert (out / "gta_manifest.json").is_file()


@pytest.fixture
def read_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Paths listed here behave as on a read-only file system (the tests run as root, which
    permissions would not stop): creating a directory or opening a file to write under them is EROFS."""
    roots: list[Path] = []

    def under(path: object) -> bool:
        try:
            p = Path(os.fsdecode(path)).absolute()  # type: ignore[arg-type]
        except TypeError:
            return False
        return any(p == r or r in p.parents for r in roots)

    def refuse(path: object) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))  # type: ignore[arg-type]

    real_mkdir, real_os_open, real_open = os.mkdir, os.open, builtins.open

    def mkdir(path, *a, **k):  # type: ignore[no-untyped-def]
        if under(path):
            raise refuse(path)
        return real_mkdir(path, *a, **k)

    def os_open(path, flags, *a, **k):  # type: ignore[no-untyped-def]
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and under(path):
            raise refuse(path)
        return real_os_open(path, flags, *a, **k)

    def open_(file, mode="r", *a, **k):  # type: ignore[no-untyped-def]
        if any(c in mode for c in "wax+") and under(file):
            raise refuse(file)
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(io, "open", open_)
    yield roots


@pytest.mark.parametrize(
    "args",
    [["policy", "path", "gemma-3-270m"], ["policy", "prepare", "gemma-3-270m", "--tokenizer-only"]],
    ids=["path", "prepare --tokenizer-only"],
)
def test_read_only_cache_is_one_line(
    args: list[str], cache: Path, read_only: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """the OSError of a read-only cache is one line, not raised out of ``main``."""
    read_only.append(cache)
    assert main(args) == 2
    assert _one_line_error(capsys.readouterr().err, "Read-only file system")


def test_complete_directory_on_a_read_only_cache_is_used(
    cache: Path, read_only: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "path", "gemma-3-270m"]) == 0
    path = capsys.readouterr().out.strip()
    read_only.append(cache)
    assert main(["policy", "path", "gemma-3-270m"]) == 0
    assert capsys.readouterr().out.strip() == path


def test_path_of_a_name_in_another_case_is_the_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``policy path gemma-3-270M`` is the policy, not the name printed back with exit status 0."""
    from gta_verl import policies

    made = tmp_path / "gemma-dir"
    monkeypatch.setitem(policies.POLICIES, "gemma-3-270m", lambda: made)
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "path", "gemma-3-270M"]) == 0
    assert capsys.readouterr().out.strip() == str(made)


def test_path_of_an_unknown_name_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """a name that is no policy, directory or hub id exits 2 naming the known policies."""
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "path", "gemma-3-27m"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and _one_line_error(captured.err, "'gemma-3-27m'", "known: gemma-3-270m")
    # A directory and a hub id keep passing through.
    assert main(["policy", "path", str(tmp_path)]) == 0
    assert main(["policy", "path", "Qwen/Qwen2.5-3B-Instruct"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path), "Qwen/Qwen2.5-3B-Instruct"]


@pytest.mark.parametrize("command", ["eval", "cpu vllm-model"])
def test_other_commands_resolving_a_name_give_one_line(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model directory that cannot be used, met outside the policy commands (``gta-verl eval --policy``,
    ``cpu vllm-model``), is the top-level handler's one line with exit status 2, not a traceback."""
    import pandas as pd

    from gta_verl import policies
    from gta_verl.data.schema import make_verl_row
    from gta_verl.data.types import QAExample
    from gta_verl.policies.model_dir import ModelDirError

    message = f"{tmp_path}/models/gemma-3-270m-v1: cannot take the write lock: Read-only file system"

    def broken() -> Path:
        raise ModelDirError(message)

    monkeypatch.setitem(policies.POLICIES, "gemma-3-270m", broken)
    data = tmp_path / "qa.parquet"
    pd.DataFrame([make_verl_row(QAExample("q1", "Who wrote Hamlet?", ("Shakespeare",)), 0)]).to_parquet(data)
    args = {
        "eval": ["eval", "--policy", "gemma-3-270m", "--data", str(data), "--kb", str(tmp_path / "kb")],
        "cpu vllm-model": ["cpu", "vllm-model", "gemma-3-270m"],
    }[command]
    assert main([*args, "--out", str(tmp_path / "out")] if command == "eval" else args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"gta-verl: error: {message}"
