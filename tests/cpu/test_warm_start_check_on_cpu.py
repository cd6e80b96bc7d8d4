"""A cached warm start counts as complete only when its files match the checksums its build recorded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gta_verl.cpu.warm_start as warm_start
from gta_verl.cpu.warm_start import SFTSettings, build_warm_start, layout
from gta_verl.cpu.warm_start_check import record, whole

SETTINGS = SFTSettings(steps=3)


def _questions(ws) -> None:
    for p in (ws.train, ws.heldout):
        pq.write_table(pa.table({"question": ["q1", "q2"]}), p)


def _model(d: Path, size: int = 0) -> None:
    """A real safetensors file and config (``size`` > 0: that many bytes of junk instead)."""
    import numpy as np
    from safetensors.numpy import save_file

    d.mkdir(parents=True, exist_ok=True)
    if size:
        (d / "model.safetensors").write_bytes(b"\1" * size)
    else:
        save_file({"w": np.ones((32, 32), np.float32)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", "dtype": "float32"}))


def _looks_complete(root: Path):
    """What a killed copy leaves: every file there, a 100-byte model and a cut config.json."""
    ws = layout(root)
    root.mkdir(parents=True)
    _questions(ws)
    _model(ws.model, size=100)
    (ws.model / "config.json").write_text('{"model_type": "qw')
    return ws


def test_files_that_merely_exist_are_not_a_complete_warm_start(tmp_path: Path) -> None:
    ws = _looks_complete(tmp_path / "ws")
    assert not ws.complete  # True before: the files exist


def test_a_recorded_build_is_complete_until_a_file_changes(tmp_path: Path) -> None:
    ws = layout(tmp_path / "ws")
    ws.root.mkdir()
    _questions(ws)
    _model(ws.model)
    record(ws.root, [ws.model, ws.train, ws.heldout, ws.rl])
    assert ws.complete
    with open(ws.model / "model.safetensors", "r+b") as f:
        f.truncate(100)
    assert ws.check().bad == ("model/model.safetensors",)
    (ws.root / "complete.json").write_text('{"schema_version": 1, "files": {"../x": "00"}}')
    assert not ws.complete


@pytest.fixture
def fake_stages(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The build's stages as stand-ins: questions and SFT rows written at once, SFT 'trains' a model."""
    calls = SimpleNamespace(questions=0, sft=0)

    def questions(_kb, ws, _s):
        calls.questions += 1
        _questions(ws)
        return {"n": 2}

    def prepare(_kb, ws, _s):
        (ws.root / "sft").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"x": [1]}), ws.root / "sft" / "val.parquet")
        return {}

    def run(cmd, **kw):
        calls.sft += 1
        _model(Path(cmd[0]) / f"global_step_{SETTINGS.steps}" / "huggingface")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(warm_start, "_write_questions", questions)
    monkeypatch.setattr(warm_start, "_prepare_sft", prepare)
    monkeypatch.setattr(warm_start, "sft_command", lambda ws, s, out_dir, *a: [str(out_dir)])
    monkeypatch.setattr(warm_start, "sft_env", dict)
    monkeypatch.setattr(warm_start.subprocess, "run", run)
    return calls


def test_a_cut_model_and_report_are_rebuilt_not_returned(tmp_path: Path, fake_stages) -> None:
    ws = _looks_complete(tmp_path / "ws")
    (ws.root / "warm_start.json").write_text('{"settings": {"n_pa')  # cut: crashed the build before
    got = build_warm_start(tmp_path / "kb", root=ws.root, settings=SETTINGS)
    assert fake_stages.sft == 1 and fake_stages.questions == 0  # the readable questions were kept
    assert got.complete and whole(ws.model, [ws.train, ws.heldout])
    assert json.loads((ws.root / "warm_start.json").read_text())["settings"]["steps"] == SETTINGS.steps
    build_warm_start(tmp_path / "kb", root=ws.root, settings=SETTINGS)  # whole now: nothing redone
    assert fake_stages.sft == 1


def test_a_question_file_that_no_longer_matches_is_rewritten(tmp_path: Path, fake_stages) -> None:
    ws = layout(tmp_path / "ws")
    build_warm_start(tmp_path / "kb", root=ws.root, settings=SETTINGS)
    pq.write_table(pa.table({"question": ["edited"]}), ws.train)
    build_warm_start(tmp_path / "kb", root=ws.root, settings=SETTINGS)
    assert (fake_stages.questions, fake_stages.sft) == (2, 2)
    assert ws.complete


def test_an_intact_build_from_before_the_record_is_adopted_not_retrained(tmp_path: Path, fake_stages) -> None:
    ws = layout(tmp_path / "ws")
    ws.root.mkdir()
    _questions(ws)
    _model(ws.model)  # whole, but no complete.json: built before builds recorded checksums
    assert not ws.complete
    build_warm_start(tmp_path / "kb", root=ws.root, settings=SETTINGS)
    assert (fake_stages.questions, fake_stages.sft) == (0, 0) and ws.complete
    with open(ws.model / "model.safetensors", "r+b") as f:  # a cut copy of such a build is not adopted
        f.truncate(200)
    (ws.root / "complete.json").unlink()
    build_warm_start(tmp_path / "kb", root=ws.root, settings=SETTINGS)
    assert fake_stages.sft == 1 and ws.complete
