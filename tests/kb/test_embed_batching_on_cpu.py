"""The length-sorted, de-duplicated, token-budget encoder path (KB build speed).

The reference vectors are computed here by the plain Hugging Face forward — texts in input
order, fixed batches of 16, the tokenizer's own padding, masked mean pooling — never by
``HFEmbedder.encode``. The texts are a real subset of the bundled MuSiQue KB inputs:
passages (long, some truncated at 256 tokens), entities (a few tokens) and triples.
"""

from __future__ import annotations

import numpy as np
import pytest

from gta_verl.kb.embed import encoder_threads_count, token_budget_batches, unique_texts


def _plain_forward(model, texts: list[str], batch: int = 16) -> np.ndarray:
    """Reference: unsorted fixed batches, tokenizer padding, masked mean, L2 norm."""
    import torch

    out = []
    with torch.inference_mode():
        for s in range(0, len(texts), batch):
            enc = model.tokenizer(
                texts[s : s + batch],
                padding=True,
                truncation=True,
                max_length=model.max_length,
                return_tensors="pt",
            )
            h = model.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = ((h * m).sum(1) / m.sum(1)).numpy()
            out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return np.concatenate(out).astype(np.float32)


@pytest.fixture(scope="module")
def real_texts(musique_passages) -> list[str]:
    """100 real texts mixed in length: 20 passages, 40 entities, 40 triples of the bundled set."""
    from gta_verl.bundled import MUSIQUE_OPENIE
    from gta_verl.kb.build import as_extractions
    from gta_verl.kb.graph import collect_nodes
    from gta_verl.kb.openie.base import run_openie
    from gta_verl.kb.openie.precomputed import PrecomputedOpenIE

    exs, _ = run_openie(PrecomputedOpenIE(MUSIQUE_OPENIE), musique_passages, progress=False)
    nodes = collect_nodes(musique_passages, as_extractions(exs))
    longest = sorted(musique_passages, key=lambda p: -len(p.contents))[:5]  # past the 256-token limit
    texts = (
        [p.contents for p in longest]
        + [p.contents for p in musique_passages[::120][:15]]
        + list(nodes.entities[::400][:40])
        + [t.text for t in nodes.triples[::420][:40]]
    )
    return texts


def test_sorted_deduplicated_batches_match_plain_forward(embedder, real_texts):
    model = embedder.inner  # HFEmbedder, no disk cache: this forward really runs
    shuffled = [real_texts[i] for i in np.random.default_rng(0).permutation(len(real_texts))]
    ref = _plain_forward(model, shuffled)
    got = model.encode(shuffled, batch_size=2)  # budget 2 × 256 tokens: many batches of mixed widths
    assert got.shape == ref.shape == (len(shuffled), model.dim)
    cos = np.einsum("ij,ij->i", got, ref)  # both L2-normalized: dot = cosine
    assert cos.min() >= 0.9999, f"row {cos.argmin()}: cosine {cos.min():.6f} to the plain forward"
    wide = model.encode(shuffled, batch_size=64)  # one or two wide batches: same vectors
    assert np.einsum("ij,ij->i", wide, ref).min() >= 0.9999


def test_order_restored_and_duplicates_share_one_vector(embedder, real_texts):
    model = embedder.inner
    a, b, c = real_texts[0], real_texts[30], real_texts[-1]  # a passage, an entity, a triple
    texts = [c, a, b, a, c, c]
    got = model.encode(texts, batch_size=1)
    ref = _plain_forward(model, [a, b, c])  # a, b, c → rows 0, 1, 2
    expect = ref[[2, 0, 1, 0, 2, 2]]  # texts = c, a, b, a, c, c
    assert np.einsum("ij,ij->i", got, expect).min() >= 0.9999
    # duplicates are encoded once, so their rows are bit-identical
    np.testing.assert_array_equal(got[1], got[3])
    np.testing.assert_array_equal(got[0], got[4])
    np.testing.assert_array_equal(got[0], got[5])
    # distinct texts stay distinct (a wrong scatter would repeat a row)
    assert np.einsum("ij,ij->i", got[[0, 1, 2]], got[[1, 2, 0]]).max() < 0.99


def test_unique_texts_maps_every_input_to_its_first_occurrence():
    uniq, inv = unique_texts(["x", "y", "x", "z", "y", "x"])
    assert uniq == ["x", "y", "z"]  # first-appearance order
    assert inv.tolist() == [0, 1, 0, 2, 1, 0]
    assert [uniq[i] for i in inv] == ["x", "y", "x", "z", "y", "x"]
    u0, i0 = unique_texts([])
    assert u0 == [] and i0.shape == (0,)


def test_token_budget_batches_hand_computed():
    lengths = [10, 6, 5, 4, 3, 3, 2, 2, 1, 1, 1]  # sorted longest first
    # budget 12 tokens, ≤ 4 rows, padding ≤ 100 % (a row may be padded up to twice its length):
    #   start 0: 12 // 10 = 1 row                          → (0, 1)
    #   start 1: 12 // 6  = 2 rows; 5 ≥ 6 / 2 = 3          → (1, 3)      (6, 5)
    #   start 3: 12 // 4  = 3 rows; 3, 3 ≥ 4 / 2 = 2       → (3, 6)      (4, 3, 3)
    #   start 6: 12 // 2  = 6 → capped at 4 rows; 2, 1, 1 ≥ 1 → (6, 10)
    #   start 10: one text left                            → (10, 11)
    assert token_budget_batches(lengths, 12, 4, max_pad=1.0) == [(0, 1), (1, 3), (3, 6), (6, 10), (10, 11)]
    # default padding ≤ 10 %: a batch keeps only texts ≥ width / 1.1
    #   start 1: width 6, 5 < 6 / 1.1 = 5.45 → (1, 2);   start 2: width 5, 4 < 4.55 → (2, 3)
    #   start 3: width 4, 3 < 3.64 → (3, 4);             start 4: width 3, 3 ≥ 2.73, 2 < → (4, 6)
    #   start 6: width 2, 2 ≥ 1.82, 1 < → (6, 8);        start 8: width 1, 4 rows, 3 left → (8, 11)
    assert token_budget_batches(lengths, 12, 4) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 8), (8, 11)]
    # a text longer than the budget still gets its own batch (never zero rows)
    assert token_budget_batches([30, 5], 12, 4) == [(0, 1), (1, 2)]
    assert token_budget_batches([], 12, 4) == []
    with pytest.raises(ValueError, match="max_tokens"):
        token_budget_batches([3], 0, 4)


def test_encoder_threads_are_capped_never_raised(monkeypatch):
    import os

    cpus = len(os.sched_getaffinity(0))
    monkeypatch.delenv("GTA_VERL_EMBED_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert encoder_threads_count(cpus + 5) == cpus  # torch's default above the CPUs we may use
    assert encoder_threads_count(1) == 1  # a caller's torch.set_num_threads(1) stays in force
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # e.g. a Ray task with num_cpus=1
    assert encoder_threads_count(cpus) == 1
    monkeypatch.setenv("GTA_VERL_EMBED_THREADS", "3")  # explicit override wins
    assert encoder_threads_count(1) == 3


def test_a_few_queries_run_as_one_padded_forward(embedder, monkeypatch):
    """A retriever's micro-batch of questions (mixed lengths) is one forward, same vectors."""
    from gta_verl.kb.embed import SMALL_CALL_TOKENS

    model = embedder.inner
    questions = [
        "Who directed Titanic?",
        "capital of Japan",
        "In which county is the town where the author of The Hobbit was born located?",
        "When was the university that the spouse of the first president attended founded?",
    ]
    ref = _plain_forward(model, questions)
    calls = []
    real = model._forward
    monkeypatch.setattr(model, "_forward", lambda ids: calls.append(len(ids)) or real(ids))
    got = model.encode(questions)
    assert calls == [4]  # lengths 6–20 tokens: the padding cap alone would cut several forwards
    assert np.einsum("ij,ij->i", got, ref).min() >= 0.9999
    # past the limit the padding-capped batches come back
    calls.clear()
    long_q = " ".join(["word"] * 200)
    model.encode([long_q] * 3 + [f"{long_q} {i}" for i in range(3)] + questions)
    assert len(calls) > 1 and 7 * 200 > SMALL_CALL_TOKENS
