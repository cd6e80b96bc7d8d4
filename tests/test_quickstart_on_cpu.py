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
