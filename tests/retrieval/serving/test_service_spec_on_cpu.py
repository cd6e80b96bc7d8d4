"""get_or_create_retriever_actor keeps what the caller's ServingConfig says (no Ray needed)."""

from __future__ import annotations

import pytest

from gta_verl.retrieval.serving import service
from gta_verl.retrieval.serving.config import ServingConfig


@pytest.fixture()
def spec_of(monkeypatch: pytest.MonkeyPatch, toy_kb_dir):
    monkeypatch.setattr(service.RetrieverSpec, "create", lambda self: self)
    return lambda **kw: service.get_or_create_retriever_actor(toy_kb_dir, **kw)


def test_caller_serving_config_is_kept(spec_of) -> None:
    serving = ServingConfig(num_cpus=3.0, max_batch=32, max_wait_ms=20.0, num_replicas=2)
    assert spec_of(serving=serving).serving == serving


def test_explicit_arguments_replace_only_what_they_name(spec_of) -> None:
    spec = spec_of(serving=ServingConfig(max_batch=32, max_wait_ms=20.0), num_cpus=0.5)
    kept = {k: getattr(spec.serving, k) for k in ("num_cpus", "max_batch", "max_wait_ms")}
    assert kept == {"num_cpus": 0.5, "max_batch": 32, "max_wait_ms": 20.0}


def test_defaults_without_a_serving_config_are_unchanged(spec_of) -> None:
    spec = spec_of()
    kept = {k: getattr(spec.serving, k) for k in ("num_cpus", "max_batch", "max_wait_ms")}
    assert kept == {"num_cpus": 1.0, "max_batch": 256, "max_wait_ms": 5.0}
