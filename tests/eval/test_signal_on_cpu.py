"""The signal gate (``gta_verl.eval.signal``, ``gta-verl signal``): hand-computed groups, then the real agent
loop's records of a scripted policy measured by the command."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gta_verl.agent.backends import ScriptedServerManager
from gta_verl.agent.tokenizer import load_qwen_tokenizer
from gta_verl.data.schema import make_verl_row
from gta_verl.data.types import RetrievalHit, RetrievalResult
from gta_verl.eval.runner import EvalSettings, evaluate_policy
from gta_verl.eval.signal import (
    advantages,
    binary_differ_probability,
    outcome_from_record,
    pass_rate_window,
    render_markdown,
    signal_report,
)


def _record(qid, turns, answer, targets=("d1", "d2"), golds=("Paris",)):
    return {
        "data_source": "synthetic",
        "qid": qid,
        "turn_doc_ids": [list(t) for t in turns],
        "target_doc_ids": list(targets),
        "gold_answers": list(golds),
        "answer": answer,
    }


# Question q1, four rollouts (targets d1, d2; gold "Paris"); R_traj, R_EM, coverage bonus (CB):
#   r0: [d1, x], [d2] → Paris  R_traj 0.25 + 0.25 + 2 = 2.5    R_EM 1  CB 1/2 + 1/2 + 2 = 3
#   r1: [d1]         → Rome   R_traj 0.25 − 1 = −0.75         R_EM 0  CB 1/2 − 1 = −0.5
#   r2: (no search)  → None   R_traj −1                       R_EM 0  CB −1
#   r3: [x], [d1]    → Rome   R_traj −0.10 + 0.25 − 1 = −0.85 R_EM 0  CB 0 + 1/2 − 1 = −0.5
# Question q2, two rollouts, both wrong with one missed search: R_traj −0.10 − 1 = −1.1, R_EM 0 (no spread).
Q1 = [
    _record("q1", [["d1", "x"], ["d2"]], "Paris"),
    _record("q1", [["d1"]], "Rome"),
    _record("q1", [], None),
    _record("q1", [["x"], ["d1"]], "Rome"),
]
Q2 = [_record("q2", [["x"]], "Rome"), _record("q2", [["y"]], "Lyon")]


def test_outcome_scores_every_reward_by_hand():
    got = [outcome_from_record(r) for r in Q1]
    assert [o.rewards["a"] for o in got] == [1.0, 0.0, 0.0, 0.0]
    assert [o.rewards["b"] for o in got] == pytest.approx([2.5, -0.75, -1.0, -0.85])
    assert [o.rewards["e"] for o in got] == pytest.approx([3.0, -0.5, -1.0, -0.5])
    assert [(o.answered, o.hit_any, o.complete_chain, o.searches) for o in got] == [
        (True, True, True, 2),
        (True, True, False, 1),
        (False, False, False, 0),
        (True, True, False, 2),
    ]
    assert got[0].group == "synthetic/q1"


def test_advantages_by_hand():
    # Dr. GRPO: mean of (1, 0, 0, 0) is 0.25.
    assert advantages([1.0, 0.0, 0.0, 0.0]) == [0.75, -0.25, -0.25, -0.25]
    # verl's std normalisation: unbiased std = sqrt((0.5625 + 3 × 0.0625) / 3) = sqrt(0.25) = 0.5.
    assert advantages([1.0, 0.0, 0.0, 0.0], std_norm=True) == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert advantages([0.3, 0.3], std_norm=True) == [0.0, 0.0]


def test_binary_differ_probability_by_hand():
    assert binary_differ_probability(0.5, 2) == 0.5  # 1 − 0.25 − 0.25
    assert binary_differ_probability(0.004, 4) == pytest.approx(1 - 0.004**4 - 0.996**4)  # ≈ 0.0159
    assert binary_differ_probability(0.0, 8) == 0.0 and binary_differ_probability(1.0, 8) == 0.0
    with pytest.raises(ValueError, match="pass rate"):
        binary_differ_probability(1.5, 8)


def test_signal_report_by_hand():
    rep = signal_report([outcome_from_record(r) for r in Q1 + Q2])
    assert (rep.rollouts, rep.group_size) == (6, 2)
    by = {r.key: r for r in rep.rewards}
    # (a): q1 differs (1, 0, 0, 0), q2 does not (0, 0) → 1 of 2 groups.
    assert by["a"].share_differ == 0.5
    # mean |A| of (a): q1 |0.75| + 3 × |−0.25| = 1.5; q2 0 + 0 → 1.5 / 6 rollouts = 0.25.
    assert by["a"].mean_abs_adv == pytest.approx(0.25)
    # (b): q1 (2.5, −0.75, −1, −0.85) mean −0.025 → |A| 2.525 + 0.725 + 0.975 + 0.825 = 5.05;
    # q2 (−1.1, −1.1) → 0.
    assert by["b"].share_differ == 0.5
    assert by["b"].mean_abs_adv == pytest.approx(5.05 / 6)
    assert by["b"].mean == pytest.approx((2.5 - 0.75 - 1.0 - 0.85 - 2.2) / 6)
    # pass rates: q1 1/4, q2 0 → 1 EM in 6 rollouts; histogram one p = 0, one 0 < p < 1.
    assert rep.pass_rate == pytest.approx(1 / 6)
    assert rep.pass_rate_histogram() == {"p = 0": 1, "0 < p < 1": 1, "p = 1": 0}
    terms = rep.term_rates()
    assert terms["answered"] == pytest.approx(5 / 6)  # all but r2
    assert terms["≥ 1 target shown"] == pytest.approx(3 / 6)  # r0, r1, r3
    assert terms["complete chain"] == pytest.approx(1 / 6)
    assert terms["searches / rollout"] == pytest.approx((2 + 1 + 0 + 2 + 1 + 1) / 6)
    # expected share at g = 8: q1 1 − 0.25⁸ − 0.75⁸ = 0.89990, q2 0 → mean 0.44995.
    assert rep.expected_share_differ(8) == pytest.approx((1 - 0.25**8 - 0.75**8) / 2)
    assert pass_rate_window(rep, 0.05, 0.95) == ["synthetic/q1"]
    assert pass_rate_window(rep, 0.0, 1.0) == ["synthetic/q1", "synthetic/q2"]
    md = render_markdown(rep)
    assert "| (a) answer-only R_EM (eq 19) | 0.167 | 0.500 | 0.250 |" in md
    with pytest.raises(ValueError, match="no rollouts"):
        signal_report([])
    with pytest.raises(ValueError, match="window"):
        pass_rate_window(rep, 0.9, 0.1)


def test_outcome_names_a_missing_column():
    rec = _record("q1", [], None)
    del rec["target_doc_ids"]
    with pytest.raises(KeyError, match="target_doc_ids"):
        outcome_from_record(rec)


class _Lookup:
    """A fixed query → doc ids retriever (unknown queries return nothing)."""

    def __init__(self, corpus, table):
        self.corpus, self.table = corpus, table

    async def aretrieve(self, queries):
        return [
            RetrievalResult(
                query=q,
                hits=tuple(
                    RetrievalHit(d, self.corpus[d].title, self.corpus[d].text, 1.0, "graph")
                    for d in self.table.get(q, [])
                ),
                latency_ms=1.0,
            )
            for q in queries
        ]


def test_signal_command_on_the_agent_loops_records(tmp_path, musique_qa, musique_passages, capsys):
    """Two bundled questions × 2 samples through the real agent loop, then ``gta-verl signal --records``."""
    from gta_verl.cli import main

    corpus = {p.doc_id: p for p in musique_passages}
    q0, q1 = musique_qa[:2]
    data = tmp_path / "train.parquet"
    pd.DataFrame([make_verl_row(q, i) for i, q in enumerate([q0, q1])]).to_parquet(data)
    table = {"hop": [q0.supporting_doc_ids[0]]}
    scripts = [  # row-major: q0 s0, q0 s1, q1 s0, q1 s1
        ["<search>hop</search>", f"<answer>{q0.answers[0]}</answer>"],  # 1 target of q0, correct
        ["<answer>nothing</answer>"],  # no search, wrong
        ["<search>hop</search>", "<answer>nothing</answer>"],  # no target of q1, wrong
        ["<answer>nothing</answer>"],  # wrong
    ]
    tok = load_qwen_tokenizer()
    evaluate_policy(
        "scripted",
        [data],
        kb_dir="unused",
        out_dir=tmp_path / "ev",
        settings=EvalSettings(policy="scripted", n_samples=2, temperature=1.0),
        server_manager=ScriptedServerManager(tok, scripts),
        tokenizer=tok,
        retriever_client=_Lookup(corpus, table),
        progress=False,
    )
    pool = tmp_path / "pool.parquet"
    argv = ["signal", "--records", str(tmp_path / "ev" / "records"), "--data", str(data)]
    argv += ["--window", "0.1,0.9", "--pool-out", str(pool), "--out", str(tmp_path / "sig")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 questions × 2 rollouts (4 in all); p = 0: 1, 0 < p < 1: 1, p = 1: 0" in out
    summary = json.loads((tmp_path / "sig" / "signal.json").read_text())
    by = {r["key"]: r for r in summary["rewards"]}
    # (a): q0 (1, 0) differs, q1 (0, 0) does not.
    assert by["a"]["share_differ"] == 0.5
    # (b) for q1: one missed search −0.1 − 1 = −1.1 against −1 (no search): differs; q0 differs too.
    assert by["b"]["share_differ"] == 1.0
    assert summary["window"]["questions"] == [f"musique/{q0.qid}"]
    assert pd.read_parquet(pool)["extra_info"].map(lambda e: e["qid"]).tolist() == [q0.qid]


def test_sampler_setting_picks_the_backend_and_keeps_old_runs_resumable(tmp_path):
    from gta_verl.agent.backends import BatchedHFServerManager, HFServerManager
    from gta_verl.agent.tokenizer import tiny_qwen2
    from gta_verl.eval.runner import build_policy

    assert "sampler" not in EvalSettings(policy="p").to_dict()  # run.json files pinned before the knob
    assert EvalSettings(policy="p", sampler="batched").to_dict()["sampler"] == "batched"
    with pytest.raises(ValueError, match="sampler='shared'"):
        EvalSettings(policy="p", sampler="shared")
    tiny_qwen2(0).save_pretrained(tmp_path / "m")
    load_qwen_tokenizer().save_pretrained(tmp_path / "m")
    per, _ = build_policy(EvalSettings(policy=str(tmp_path / "m"), n_samples=2))
    batched, _ = build_policy(EvalSettings(policy=str(tmp_path / "m"), n_samples=2, sampler="batched"))
    assert type(per) is HFServerManager and type(batched) is BatchedHFServerManager
    # dtype: as saved by default (the tiny model is float32), bfloat16 as verl's hf_cpu rollout in bf16
    import torch

    assert per.model.dtype == torch.float32
    bf16, _ = build_policy(EvalSettings(policy=str(tmp_path / "m"), n_samples=2, dtype="bfloat16"))
    assert bf16.model.dtype == torch.bfloat16
    assert "dtype" not in EvalSettings(policy="p").to_dict()
    with pytest.raises(ValueError, match="dtype='half'"):
        EvalSettings(policy="p", dtype="half")
