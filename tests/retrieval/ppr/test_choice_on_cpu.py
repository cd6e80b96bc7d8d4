"""The one place that picks the PPR solver: what runs for each config, and the logged reason."""

from __future__ import annotations

import logging

import pytest

from gta_verl.retrieval.config import RetrieverConfig
from gta_verl.retrieval.ppr.choice import PPR_METHODS, choose_solver, pick_solver


@pytest.mark.parametrize(
    ("method", "seed_top", "device", "runs"),
    [
        ("linear", 0, "cpu", "linear"),
        ("linear", 20, "cpu", "fused"),
        ("linear", 0, "cuda", "cg"),
        ("fused", 0, "cpu", "fused"),
        ("fused", 0, "cuda", "cg"),
        ("push", 20, "cpu", "push"),
        ("push", 0, "cuda", "push"),
        ("cg", 0, "cpu", "cg"),
        ("power", 0, "cuda", "power"),
    ],
)
def test_solver_that_runs(method: str, seed_top: int, device: str, runs: str) -> None:
    solver = pick_solver(method, seed_top, device)
    assert solver.method == runs
    # a reason exactly when the configured solver or device is not what runs
    assert (solver.reason is not None) == (runs != method or (method == "push" and device != "cpu"))


def test_config_and_retriever_agree_on_the_passage_basis() -> None:
    assert RetrieverConfig().uses_passage_basis
    assert not RetrieverConfig(passage_seed_top=20).uses_passage_basis
    assert not RetrieverConfig(device="cuda").uses_passage_basis
    assert set(PPR_METHODS) == {"push", "cg", "power", "fused", "linear"}


def test_substitution_is_logged_once_with_its_reason(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Hydra run earlier in the session (verl's @hydra.main in the recipe-guard tests) applies a logging
    # config that disables every logger created before it; the warning must be seen regardless.
    monkeypatch.setattr(logging.getLogger("gta_verl.retrieval.ppr.choice"), "disabled", False)
    choose_solver.cache_clear()
    with caplog.at_level(logging.WARNING, logger="gta_verl.retrieval.ppr.choice"):
        for _ in range(3):
            assert choose_solver("linear", 7, "cpu").method == "fused"
        assert choose_solver("linear", 0, "cpu").method == "linear"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "passage_seed_top=7" in lines[0] and "'fused' instead of 'linear'" in lines[0]


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="ppr_method"):
        pick_solver("gauss", 0, "cpu")
