"""Model directories proved by their manifest, replaced without a gap, written by one writer at a time.

Through the public builders (``prepare_gemma`` with the toy build of :mod:`toy_models`, ``cut_model`` on a toy
Gemma source), so each test also runs against a tree without manifests.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from gta_verl.policies import gemma, vocab_cut
from tests.policies.toy_models import fake_gemma_build, toy_tokenizer_json, write_toy_gemma

TEXTS = ["abcd", "ab"]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gemma_build(monkeypatch)


def _qwen_like_tokenizer_json() -> str:
    """Another model's tokenizer.json: same format, other pieces."""
    other = toy_tokenizer_json()
    other["model"]["vocab"] = {f"x{i}": i for i in range(13)}
    other["model"]["merges"] = []
    return json.dumps(other)


def test_another_models_tokenizer_is_detected_and_rebuilt(toy: None, tmp_path: Path) -> None:
    """four files present is not "complete": another model's tokenizer.json must not pass as Gemma's."""
    out = gemma.prepare_gemma(tmp_path / "g")
    good = (out / "tokenizer.json").read_bytes()
    (out / "tokenizer.json").write_text(_qwen_like_tokenizer_json())
    assert gemma.prepare_gemma(out) == out
    assert (out / "tokenizer.json").read_bytes() == good


@pytest.mark.parametrize("model_type", ["llama", "bert"])
def test_wrong_model_type_is_detected_and_rebuilt(toy: None, tmp_path: Path, model_type: str) -> None:
    """a config.json naming llama or bert would load the wrong architecture."""
    out = gemma.prepare_gemma(tmp_path / "g")
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "model_type": model_type}))
    gemma.prepare_gemma(out)
    assert json.loads((out / "config.json").read_text())["model_type"] == "gemma3_text"


def test_manifest_names_kind_type_source_and_every_file(toy: None, tmp_path: Path) -> None:
    from gta_verl.policies.model_dir import sha256_file

    out = gemma.prepare_gemma(tmp_path / "g")
    m = json.loads((out / "gta_manifest.json").read_text())
    assert (m["schema_version"], m["kind"], m["model_type"], m["source_sha256"]) == (
        1,
        "gemma-3-270m-v1",
        "gemma3_text",
        "5" * 64,
    )
    names = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"}
    names |= {"tokenizer_config.json", "gta_policy.json"}
    assert set(m["files"]) == names
    assert all(m["files"][n] == sha256_file(out / n) for n in names)


def _spy_rmtree(monkeypatch: pytest.MonkeyPatch, out: Path, seen: list[str]) -> None:
    """After every rmtree, a reader looking at ``out`` must find a whole model there."""
    real = shutil.rmtree

    def rmtree(path, *a, **k):  # type: ignore[no-untyped-def]
        real(path, *a, **k)
        whole = (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
        seen.append(f"{Path(path).name}: {'whole' if whole else 'GONE'}")

    monkeypatch.setattr(shutil, "rmtree", rmtree)


def test_replacing_a_cut_never_leaves_it_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deleting the directory, then renaming the new one in, lets a reader catch it gone."""
    src = write_toy_gemma(tmp_path / "src")
    out = vocab_cut.cut_model(src, TEXTS, tmp_path / "cut")
    (out / "tokenizer_config.json").unlink()  # damaged: rebuilt
    seen: list[str] = []
    _spy_rmtree(monkeypatch, out, seen)
    vocab_cut.cut_model(src, TEXTS, out)
    assert seen and all(s.endswith("whole") for s in seen), seen
    assert (out / "tokenizer_config.json").is_file()


def test_two_writers_of_one_directory_build_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """two prepares of one directory: the second waits for the first and reuses its directory."""
    src = write_toy_gemma(tmp_path / "src")
    real, calls = vocab_cut._cut_tokenizer, []

    def slow(source, texts):  # type: ignore[no-untyped-def]
        calls.append(time.monotonic())
        time.sleep(0.5)
        return real(source, texts)

    monkeypatch.setattr(vocab_cut, "_cut_tokenizer", slow)
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(vocab_cut.cut_model(src, TEXTS, tmp_path / "cut")))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [tmp_path / "cut"] * 2
    assert len(calls) == 1


def test_killed_writers_temporaries_are_removed(tmp_path: Path) -> None:
    """a killed writer's temporary directory is removed by the next writer."""
    src = write_toy_gemma(tmp_path / "src")
    old_style = tmp_path / ".cut-k1ll3d0x"  # tempfile.mkdtemp's name in the writer before manifests
    new_style = tmp_path / ".cut.tmp-deadbeef"
    for d in (old_style, new_style):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"\0" * 1024)
    unrelated = tmp_path / ".cutting-board"
    unrelated.mkdir()
    vocab_cut.cut_model(src, TEXTS, tmp_path / "cut")
    assert not old_style.exists() and not new_style.exists()
    assert unrelated.exists()


def test_legacy_gemma_directory_is_verified_and_adopted(toy: None, tmp_path: Path) -> None:
    """Migration: a directory prepared before manifests keeps its files; its manifest is written once."""
    out = gemma.prepare_gemma(tmp_path / "g")
    (out / "gta_manifest.json").unlink()
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert gemma.prepare_gemma(out) == out
    m = json.loads((out / "gta_manifest.json").read_text())
    assert m["adopted"] is True and (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_legacy_gemma_directory_with_a_foreign_tokenizer_is_rebuilt(toy: None, tmp_path: Path) -> None:
    out = gemma.prepare_gemma(tmp_path / "g")
    good = (out / "tokenizer.json").read_bytes()
    (out / "gta_manifest.json").unlink()
    (out / "tokenizer.json").write_text(_qwen_like_tokenizer_json())
    gemma.prepare_gemma(out)
    m = json.loads((out / "gta_manifest.json").read_text())
    assert "adopted" not in m and (out / "tokenizer.json").read_bytes() == good
