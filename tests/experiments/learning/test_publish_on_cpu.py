"""``experiments.learning.publish``: a published result never silently changes its seeds.

Most cases run on a copy of the published float32 experiment (experiments/learning/results/exp10, its real
files); the expected values are read off its table on the learning page.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.learning.publish import (
    REPO,
    RESTORE_IGNORED,
    RESTORE_KEYS,
    main,
    paired_rows,
    published_runs,
    restore,
    run_table,
)

EXP10 = REPO / "experiments/learning/results/exp10"
# The learning page's float32 command (its settings are the published ones).
COMMAND = (
    "--steps 10 --batch 4 --n 4 --conditions b,r,a --seeds-ab 0,1,2 --seeds-cd 0 --lr 3e-6 "
    "--eval-questions 48 --precision fp32 --sft-steps 40 --start auto --rollout hf_cpu --padding full"
).split()


@pytest.fixture
def pub(tmp_path: Path) -> Path:
    """A copy of the published experiment, away from the repository."""
    return Path(shutil.copytree(EXP10, tmp_path / "published" / "exp10"))


def _settings(**change: object) -> dict:
    from experiments.learning.pretrained import build_parser

    return {**vars(build_parser().parse_args(COMMAND)), **change}


def _results(pub: Path) -> dict:
    return json.loads((pub / "results.json").read_text())


# ---------------------------------------------------------------- a missing seed
def test_a_seed_whose_per_question_file_is_missing_is_refused(pub: Path) -> None:
    # Before: (b) − (r) on synthetic went from -0.038 over seeds 0,1,2 to -0.015 over 0,2, without a word.
    gone = pub / "runs/sft_fp32_b_s1/eval_synthetic.questions.json"
    gone.unlink()
    with pytest.raises(ValueError, match=rf"^{gone}: missing, so \(b\) seed 1 would drop out of the paired"):
        paired_rows(pub, "b", "r", "synthetic")
    with pytest.raises(ValueError, match="seed 1 would drop out"):
        main(["paired", str(pub), "--pairs", "b-r", "--metrics", "target_doc_cov", "--n-boot", "20"])
    assert paired_rows(pub, "b", "r", "musique")[0] == [0, 1, 2]  # the other sets are whole


def test_a_side_without_any_file_of_a_set_is_refused_when_the_other_has_them(pub: Path) -> None:
    for seed in (0, 1, 2):
        (pub / f"runs/sft_fp32_r_s{seed}/eval_hotpotqa.questions.json").unlink()
    with pytest.raises(ValueError, match=r"\(r\) has no hotpotqa per-question file while \(b\) has"):
        paired_rows(pub, "b", "r", "hotpotqa")
    (pub / "fp32_sft_musique.questions.json").unlink()  # the warm start (ii) too
    with pytest.raises(ValueError, match=r"\(ii\) has no musique per-question file while \(b\) has"):
        paired_rows(pub, "b", "ii", "musique")


def test_seeds_run_by_one_side_only_are_named_in_the_table(pub: Path, capsys) -> None:
    # (c) ran seed 0, (r) seeds 0, 1, 2: the pair is seed 0, and the table says (r) 1,2 are not in it.
    main(["paired", str(pub), "--pairs", "c-r", "--metrics", "target_doc_cov", "--wide"])
    rows = capsys.readouterr().out.splitlines()[2:]
    assert (
        rows[0] == "| (c) − (r) | synthetic | 0 (unpaired: (r) 1,2) | "
        "**-0.567** q [-0.649, -0.485] · seeds t – (one seed) (-0.567) |"
    )
    assert len(rows) == 3


def test_a_run_evaluated_on_fewer_questions_is_named_in_the_table(pub: Path, capsys) -> None:
    f = pub / "runs/sft_fp32_r_s2/eval_musique.questions.json"
    f.write_text(json.dumps(json.loads(f.read_text())[:40]))  # 8 of 48 questions lost
    main(["paired", str(pub), "--pairs", "b-r", "--metrics", "target_doc_cov", "--wide", "--n-boot", "20"])
    (musique,) = [x for x in capsys.readouterr().out.splitlines() if "| musique |" in x]
    assert "on 40 shared questions, 8 not in every run left out" in musique


# ---------------------------------------------------------------- the step log comes from the folder
def test_restore_reads_each_step_log_from_the_folder_it_is_given(
    pub: Path, tmp_path: Path, monkeypatch
) -> None:
    # Before: done.json kept results.json's repository path (experiments/learning/results/...), which read
    # from anywhere but the repository root as a missing log: every restored run showed 0 training steps.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    names = restore(pub, out, _settings(), "sft_fp32_")
    assert len(names) == 11
    done = [json.loads((out / "runs" / n / "done.json").read_text()) for n in names]
    assert [d["metrics"] for d in done] == [str(pub / "runs" / n / "metrics.jsonl") for n in names]
    table = run_table(done).splitlines()
    assert table[2] == (
        "| (a) s0 | 2614 | 10 | 1.94 → 2.04 | 0.000 → 0.000 | 1 | 1 | 226 | 0.619 | 0.605 | 0.510 |"
    )
    assert all(row.split(" | ")[2] == "10" for row in table[2:])  # ten steps each, as published


def test_the_published_experiment_still_restores_from_its_own_folder(tmp_path: Path) -> None:
    names = restore(EXP10, tmp_path, _settings(), "sft_fp32_")
    assert sorted(names) == sorted(Path(r["metrics"]).parent.name for r in _results(EXP10)["runs"])


# ---------------------------------------------------------------- every input that changes a result
def test_runs_trained_on_another_kb_are_not_restored(pub: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"published with other settings \(published, now\): \{'kb': \(None, '/x/kb'\)\}"
    ):
        restore(pub, tmp_path / "out", _settings(kb="/x/kb"), "sft_fp32_")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [("policy", "/models/other"), ("n_paths", 300), ("eval_questions", 24), ("sft_rows", 80), ("n", 8)],
)
def test_each_result_setting_is_compared(pub: Path, tmp_path: Path, key: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"'{key}': "):
        restore(pub, tmp_path / "out", _settings(**{key: value}), "sft_fp32_")


def test_every_option_of_the_experiment_is_compared_or_known_not_to_change_a_result() -> None:
    from experiments.learning.pretrained import build_parser

    options = {a.dest for a in build_parser()._actions if a.dest != "help"} | {"cpu_bf16_flags"}
    assert set(RESTORE_KEYS) | set(RESTORE_IGNORED) == options
    assert not set(RESTORE_KEYS) & set(RESTORE_IGNORED)
    assert "kb" in RESTORE_KEYS


# ---------------- a malformed entry, refused before the warm starts
@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda r: r.pop("metrics"), r"run 3 has no 'metrics' \(its step log\); republish it"),
        (lambda r: r.pop("musique"), r"run 3 \(sft_fp32_c_s0\): no musique held-out metrics; republish it"),
        (lambda r: r.pop("seed"), r"run 3 \(sft_fp32_c_s0\): no 'seed'; republish it"),
    ],
    ids=["no-metrics", "no-set", "no-seed"],
)
def test_a_malformed_entry_is_refused_before_the_warm_starts(
    pub: Path, tmp_path: Path, monkeypatch, capsys, spoil, says
) -> None:
    import experiments.learning.pretrained as lp

    results = _results(pub)
    spoil(results["runs"][3])
    (pub / "results.json").write_text(json.dumps(results))
    with pytest.raises(ValueError, match=says):
        published_runs(pub, _settings())

    def no_warm_starts(*a: object, **kw: object) -> None:
        raise AssertionError("the restore check must fail before the inputs and warm starts are built")

    monkeypatch.setattr(lp, "prepare", no_warm_starts)
    with pytest.raises(SystemExit) as exc:
        lp.main([*COMMAND, "--out", str(tmp_path / "out"), "--restore-from", str(pub)])
    assert exc.value.code == 2
    assert says.replace("\\", "") in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_missing_step_log_is_refused(pub: Path) -> None:
    (pub / "runs/sft_fp32_b_s2/metrics.jsonl").unlink()
    with pytest.raises(
        ValueError, match=rf"\(sft_fp32_b_s2\): no step log at {pub}/runs/sft_fp32_b_s2/metrics.jsonl"
    ):
        published_runs(pub, _settings())


def test_a_folder_published_before_an_option_existed_restores_as_its_default(tmp_path):
    """exp10 was published before ``--iii-rows``/``--train-pool``/``--filter-groups``: with those at their
    defaults its runs restore, with (iii) or dynamic sampling asked for they are another experiment."""
    import shutil

    from experiments.learning.pretrained import build_parser
    from experiments.learning.publish import published_runs

    src = Path(__file__).resolve().parents[3] / "experiments/learning/results/exp10"
    pub = tmp_path / "exp10"
    shutil.copytree(src, pub)
    old = json.loads((pub / "results.json").read_text())["settings"]
    assert "iii_rows" not in old and "filter_groups" not in old
    # experiment 10 rolled out with hf_cpu and padded every rollout, the defaults before --rollout and
    # --padding existed (vllm and packed since)
    args = vars(build_parser().parse_args(["--rollout", "hf_cpu", "--padding", "full"]))
    now = {**args, **{k: old[k] for k in old if k in args}}
    assert len(published_runs(pub, now)) == len(json.loads((pub / "results.json").read_text())["runs"])
    with pytest.raises(ValueError, match="filter_groups"):
        published_runs(pub, {**now, "filter_groups": True})
    with pytest.raises(ValueError, match="rollout"):
        published_runs(pub, {**now, "rollout": "vllm"})
    with pytest.raises(ValueError, match="padding"):
        published_runs(pub, {**now, "padding": "packed"})
    with pytest.raises(ValueError, match="iii_rows"):
        published_runs(pub, {**now, "iii_rows": 128})
