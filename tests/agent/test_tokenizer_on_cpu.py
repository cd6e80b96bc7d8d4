"""The offline Qwen2.5 tokenizer and the tiny random Qwen2."""

from __future__ import annotations

import torch

from gta_verl.agent.tokenizer import QWEN2_VOCAB_SIZE, tiny_qwen2


def test_qwen25_special_ids_and_template(qwen_tokenizer) -> None:
    tok = qwen_tokenizer
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [
        151643,
        151644,
        151645,
    ]
    assert len(tok) == QWEN2_VOCAB_SIZE
    assert tok.encode("user", add_special_tokens=False) == [872]
    assert tok.encode("\n", add_special_tokens=False) == [198]
    assert (tok.eos_token_id, tok.pad_token_id) == (151645, 151643)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_matches_qwen_tiktoken_encoder(qwen_tokenizer) -> None:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    from gta_verl.agent.tokenizer import _tiktoken_file

    ref = tiktoken.Encoding(
        "qwen",
        pat_str=PRETOKENIZE_REGEX,
        mergeable_ranks=load_tiktoken_bpe(_tiktoken_file()),
        special_tokens={},
    )
    text = "GTA-RAG retrieves 3 docs: Zürich, 東京 and naïve café — <search> q </search>\n\n  ok"
    assert qwen_tokenizer.encode(text, add_special_tokens=False) == ref.encode(text)


def test_tiny_qwen2_is_seeded() -> None:
    a, b = tiny_qwen2(seed=3), tiny_qwen2(seed=3)
    assert a.config.vocab_size == QWEN2_VOCAB_SIZE and a.config.tie_word_embeddings
    assert a.config.hidden_size == 64 and a.config.num_hidden_layers == 2
    ids = torch.tensor([[151644, 872, 198]])
    with torch.no_grad():
        assert torch.equal(a(input_ids=ids).logits, b(input_ids=ids).logits)


def test_corrupt_disk_cache_is_rebuilt(tmp_path, monkeypatch) -> None:
    from gta_verl.agent import tokenizer as mod

    target = tmp_path / f"qwen2.5_tokenizer_v{mod.TOKENIZER_CACHE_VERSION}"
    target.mkdir()
    (target / "tokenizer.json").write_text("{not json")
    monkeypatch.setenv("GTA_VERL_CACHE", str(tmp_path))
    mod.load_qwen_tokenizer.cache_clear()
    try:
        tok = mod.load_qwen_tokenizer()
        assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
        assert (target / "tokenizer.json").stat().st_size > 1_000_000  # rebuilt and cached again
        assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp/trash left behind
    finally:
        mod.load_qwen_tokenizer.cache_clear()
