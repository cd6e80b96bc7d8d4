"""``gta-verl cpu tiny-model``: deterministic, offline, complete HF directory; recipe metric reader."""

from __future__ import annotations

import json

import pytest
import torch

from gta_verl.cpu.recipe_run import read_step_metrics
from gta_verl.cpu.tiny_model import REQUIRED_FILES, build_tiny_model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "a", seed=0)


def test_same_seed_same_weights_and_real_tokenizer(built, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from gta_verl.agent.tokenizer import tiny_qwen2

    b = build_tiny_model(tmp_path / "b", seed=0)
    assert all((built / f).is_file() for f in REQUIRED_FILES)
    wa, wb = load_file(str(built / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    other = tiny_qwen2(seed=1).state_dict()["model.embed_tokens.weight"]
    assert not torch.equal(wa["model.embed_tokens.weight"], other)
    tok = AutoTokenizer.from_pretrained(str(built))
    # Qwen2.5's ids: <|im_start|> 151644, <|im_end|> 151645, "user" 872, "\n" 198.
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [151644, 151645]
    assert tok.encode("user\n", add_special_tokens=False) == [872, 198]
    assert json.loads((built / "config.json").read_text())["vocab_size"] == 151646


def test_complete_directory_is_reused(built):
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(built, seed=0) == built
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp


def test_read_step_metrics(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "data": {"a": 1.5}}\n{"step": 2, "data": {"a": 2.0, "gta/x": 0}}\n')
    assert read_step_metrics(path) == {1: {"a": 1.5}, 2: {"a": 2.0, "gta/x": 0}}
    assert read_step_metrics(tmp_path / "missing.jsonl") == {}
    path.write_text('{"step": 1, "data": {}}\nnot json\n')
    with pytest.raises(ValueError, match="m.jsonl:2"):
        read_step_metrics(path)


def test_corpus_tiny_model_has_the_corpus_vocabulary_and_is_reused(musique_kb_dir, tmp_path):
    from transformers import AutoTokenizer

    from gta_verl.cpu.prepare import _ensure_stage1
    from gta_verl.cpu.tiny_model import build_corpus_tiny_model
    from gta_verl.protocol import SEARCH_CLOSE, SEARCH_OPEN

    stage1 = _ensure_stage1(musique_kb_dir, tmp_path / "stage1.parquet", seed=0)
    out = build_corpus_tiny_model(musique_kb_dir, stage1, tmp_path / "m", seed=0)
    cfg = json.loads((out / "config.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(out))
    # 4,096 = DEFAULT_VOCAB, the whole vocabulary (bytes, merges, 3 ChatML specials, 8 protocol tags).
    assert cfg["vocab_size"] == len(tok) == 4096
    assert (cfg["hidden_size"], cfg["num_hidden_layers"]) == (64, 2)
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    assert len(tok.encode(SEARCH_OPEN, add_special_tokens=False)) == 1
    assert len(tok.encode(SEARCH_CLOSE, add_special_tokens=False)) == 1
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert build_corpus_tiny_model(musique_kb_dir, stage1, out, seed=0) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_users_qwen2_checkpoint_given_as_out_is_refused(tmp_path):
    """Only a tiny model directory is replaced: a real Qwen2 checkpoint (24 layers, 896 wide) is not one."""
    from gta_verl.policies.model_dir import ModelDirError

    out = tmp_path / "Qwen2.5-0.5B"
    out.mkdir()
    (out / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24})
    )
    (out / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(ModelDirError, match="refusing to replace it"):
        build_tiny_model(out, seed=0)
    assert (out / "model.safetensors").read_bytes() == b"weights"


def test_a_tiny_model_without_manifest_is_rebuilt_with_one(built, tmp_path):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(built, old)
    (old / "gta_manifest.json").unlink()
    assert build_tiny_model(old, seed=0) == old
    m = json.loads((old / "gta_manifest.json").read_text())
    assert (m["kind"], m["model_type"]) == ("tiny-qwen2-v1", "qwen2")
