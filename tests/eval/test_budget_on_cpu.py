"""The evaluation's token budget defaults to the training config's."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from gta_verl.eval.runner import EvalSettings, training_budget

CONFIG = Path(__file__).resolve().parents[2] / "gta_verl" / "config" / "gta_grpo.yaml"


def test_default_budget_is_the_training_configs() -> None:
    # gta_grpo.yaml: data.max_prompt_length 1024, data.max_response_length 3072 — four 512-token observations
    # (2,048) plus the policy's turns fit; a 2,048 budget would cut such rollouts and score them EM 0.
    s = EvalSettings(policy="tiny-random-qwen2")
    assert (s.prompt_length, s.response_length) == (1024, 3072)
    cfg = OmegaConf.load(CONFIG)
    assert training_budget() == (cfg.data.max_prompt_length, cfg.data.max_response_length)


def test_cli_default_reads_the_config_and_an_explicit_value_wins(monkeypatch) -> None:
    import gta_verl.eval.cli as cli

    seen = {}

    def fake_evaluate(policy, data, kb, out_dir, max_questions, settings, **kw):
        seen["settings"] = settings
        raise SystemExit(0)

    monkeypatch.setattr("gta_verl.eval.runner.evaluate_policy", fake_evaluate)
    from gta_verl.cli import main

    for extra, want in (([], 3072), (["--response-length", "500"], 500)):
        try:
            main(["eval", "--policy", "tiny-random-qwen2", "--data", "x.parquet", "--kb", "kb", *extra])
        except SystemExit:
            pass
        assert seen["settings"].response_length == want
    del cli
