"""The job's retriever is created by the trainer and ready (KB loaded) before the first rollout.

Real Ray (local, 1 CPU) and the real graph retriever actor on the bundled MuSiQue KB.
"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from gta_verl.agent.config import AgentConfig
from gta_verl.agent.retriever_access import (
    clear_retriever_cache,
    get_retriever_client,
    start_job_retriever,
    wait_retriever_ready,
)

ray = pytest.importorskip("ray")
NAME = "gta_verl_test_job_retriever"


def _cfg(kb_dir, transport="auto"):
    agent = {"retriever_transport": transport}
    if transport == "http":
        agent["retriever_url"] = "http://127.0.0.1:8000"
    return OmegaConf.create(
        {"gta": {"retriever": {"kb_dir": kb_dir, "actor_name": NAME, "num_cpus": 0}, "agent": agent}}
    )


@pytest.fixture(scope="module")
def ray_session():
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        namespace="gta_verl_test_job",
    )
    yield
    ray.shutdown()


def test_without_ray_or_with_http_nothing_is_started():
    assert not ray.is_initialized()
    assert start_job_retriever(_cfg("/nonexistent")) is None


def test_missing_kb_dir_fails_the_job_naming_the_key(ray_session):
    with pytest.raises(ValueError, match=r"gta.retriever.kb_dir is not set"):
        start_job_retriever(_cfg(None))
    assert start_job_retriever(_cfg(None, transport="http")) is None


def test_not_a_kb_dir_fails_the_job(ray_session, tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        start_job_retriever(_cfg(str(tmp_path)))


def test_ready_before_first_rollout_and_shared_by_name(ray_session, musique_kb_dir):
    cfg = _cfg(str(musique_kb_dir))
    handle = start_job_retriever(cfg)
    assert wait_retriever_ready(handle, musique_kb_dir, timeout_s=600) is not None
    # The agent loop's lazy path finds this actor by name instead of creating another.
    clear_retriever_cache()
    client = get_retriever_client(cfg, AgentConfig(retriever_transport="ray"))
    (result,) = ray.get(handle.retrieve.remote(["Nolan"]))
    assert result.error is None and result.hits
    assert ray.get_actor(NAME) is not None and client is not None
    clear_retriever_cache()
