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
