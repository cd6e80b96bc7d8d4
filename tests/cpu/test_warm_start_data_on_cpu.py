"""Warm-start pieces that verl's SFT trainer reads: the corpus tokenizer and the agent-layout dataset."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from gta_verl.cpu.corpus_tokenizer import PROTOCOL_TOKENS, train_corpus_tokenizer
from gta_verl.cpu.sft_dataset import AgentLayoutSFTDataset

TEXTS = [
    "Paris is the capital of France.",
    "The Eiffel Tower is in Paris.",
    "Berlin is the capital of Germany.",
] * 20


@pytest.fixture(scope="module")
def tok():
    return train_corpus_tokenizer(TEXTS, vocab_size=400)


def test_specials_tags_and_template(tok) -> None:
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == 0
    text = "<think>x</think>\n<search> capital of France </search>"
    ids = tok.encode(text, add_special_tokens=False)
    for tag in PROTOCOL_TOKENS[:4]:
        assert tok.convert_tokens_to_ids(tag) in ids  # one token per tag
    assert tok.decode(ids) == text  # byte-level: lossless round trip
    assert tok.decode(ids, skip_special_tokens=True) == text  # tags are not "special"
    assert len(tok) <= 400
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def _write(path: Path, ids, mask) -> Path:
    pq.write_table(pa.table({"input_ids": ids, "loss_mask": mask}), path)
    return path


def test_dataset_items_are_verls_no_padding_layout(tmp_path: Path, tok) -> None:
    f = _write(tmp_path / "a.parquet", [[5, 6, 7, 8], [9, 10]], [[0, 1, 0, 1], [0, 1]])
    ds = AgentLayoutSFTDataset(parquet_files=str(f), tokenizer=tok, config={"max_length": 8})
    item = ds[0]
    assert len(ds) == 2
    assert torch.equal(item["input_ids"], torch.tensor([5, 6, 7, 8]))
    assert torch.equal(item["position_ids"], torch.tensor([0, 1, 2, 3]))
    assert torch.equal(item["loss_mask"], torch.tensor([0, 1, 0, 1]))


def test_dataset_rejects_bad_rows(tmp_path: Path, tok) -> None:
    f = _write(tmp_path / "b.parquet", [[5, 6]], [[0]])
    with pytest.raises(ValueError, match=r"b\.parquet: row 0: 2 input_ids but 1 loss_mask"):
        AgentLayoutSFTDataset(parquet_files=[str(f)], tokenizer=tok, config={})
    g = _write(tmp_path / "c.parquet", [[5, 100000]], [[0, 1]])
    with pytest.raises(ValueError, match="outside the tokenizer"):
        AgentLayoutSFTDataset(parquet_files=[str(g)], tokenizer=tok, config={})
    h = _write(tmp_path / "d.parquet", [[5, 6, 7]], [[0, 1, 1]])
    ds = AgentLayoutSFTDataset(parquet_files=[str(h)], tokenizer=tok, config={"max_length": 2})
    with pytest.raises(ValueError, match="data.max_length=2"):
        ds[0]
