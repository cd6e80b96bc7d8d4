"""Pure rules of the replicated retriever: routing, autoscaling, placement, config."""

from __future__ import annotations

import random

import pytest

from gta_verl.retrieval.serving.config import ServingConfig
from gta_verl.retrieval.serving.routing import autoscale_delta, cpu_only_nodes, pick_replica, replica_options


def test_power_of_two_choices() -> None:
    rng = random.Random(0)
    # two replicas: both are always drawn, the one with fewer calls out wins (0 < 5)
    assert {pick_replica([5, 0], rng) for _ in range(50)} == {1}
    assert pick_replica([7], rng) == 0
    # the strictly most loaded of three is never chosen: it always loses its pair
    picks = [pick_replica([1, 2, 3], rng) for _ in range(300)]
    assert 2 not in picks
    # index 0 wins whenever drawn: P = P(0 in the pair) = 2/3 of 3000 ≈ 2000
    # (±5 σ, σ = √(3000·2/3·1/3) ≈ 25.8)
    wins = sum(pick_replica([0, 9, 9], rng) == 0 for _ in range(3000))
    assert 2000 - 130 < wins < 2000 + 130
    with pytest.raises(ValueError):
        pick_replica([], rng)


def test_autoscale_delta() -> None:
    cfg = ServingConfig(
        num_replicas=2,
        min_replicas=1,
        max_replicas=3,
        target_queued_queries=100,
        upscale_ticks=2,
        downscale_ticks=3,
    )
    # mean (150 + 130) / 2 = 140 > 100: first tick starts the streak, second adds one replica
    assert autoscale_delta([150, 130], 2, cfg, 0) == (0, 1)
    assert autoscale_delta([150, 130], 2, cfg, 1) == (1, 0)
    assert autoscale_delta([150, 130, 200], 3, cfg, 1) == (0, 2)  # at max_replicas = 3
    # mean (10 + 20) / 2 = 15 < 100 / 4 = 25: three ticks remove one
    assert autoscale_delta([10, 20], 2, cfg, 0) == (0, -1)
    assert autoscale_delta([10, 20], 2, cfg, -1) == (0, -2)
    assert autoscale_delta([10, 20], 2, cfg, -2) == (-1, 0)
    assert autoscale_delta([10], 1, cfg, -2) == (0, -3)  # at min_replicas = 1
    assert autoscale_delta([50, 50], 2, cfg, 5) == (0, 0)  # 25 <= 50 <= 100: streak reset
    assert autoscale_delta([900], 1, ServingConfig(), 5) == (0, 0)  # no bounds: no autoscaling


A, B, C, D = ("a" * 56, "b" * 56, "c" * 56, "d" * 56)  # Ray node ids are 28-byte hex strings
NODES = [
    {"NodeID": B, "Alive": True, "Resources": {"CPU": 4.0}},
    {"NodeID": A, "Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}},
    {"NodeID": C, "Alive": False, "Resources": {"CPU": 2.0}},
    {"NodeID": D, "Alive": True, "Resources": {"CPU": 2.0}},
]


def test_placement_options() -> None:
    pytest.importorskip("ray")
    assert cpu_only_nodes(NODES) == [B, D]  # alive and GPU-free, sorted
    cfg = ServingConfig(num_cpus=2)
    targets = [replica_options(cfg, slot, NODES)["scheduling_strategy"] for slot in range(3)]
    assert [t.node_id for t in targets] == [B, D, B]  # spread round-robin over CPU-only nodes
    assert all(t.soft for t in targets)
    assert replica_options(cfg, 0, NODES)["num_cpus"] == 2 and replica_options(cfg, 0, NODES)["num_gpus"] == 0
    gpu_only = [NODES[1]]
    assert replica_options(cfg, 0, gpu_only)["scheduling_strategy"] == "SPREAD"
    res = replica_options(
        ServingConfig(placement="resource", resource="retriever", resource_per_replica=0.5), 0, NODES
    )
    assert res["resources"] == {"retriever": 0.5} and "scheduling_strategy" not in res
    assert "scheduling_strategy" not in replica_options(ServingConfig(placement="any"), 0, NODES)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"num_replicas": 0}, "num_replicas"),
        ({"min_replicas": 1}, "min_replicas"),
        ({"min_replicas": 2, "max_replicas": 4, "num_replicas": 1}, "num_replicas"),
        ({"placement": "gpu"}, "placement"),
        ({"placement": "resource"}, "resource"),
        ({"max_batch": 0}, "max_batch"),
    ],
)
def test_serving_config_rejects(bad: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ServingConfig(**bad)
    with pytest.raises(ValueError, match="unknown ServingConfig keys"):
        ServingConfig.from_dict({"replicas": 2})


def test_gta_retriever_section_keys() -> None:
    from gta_verl.retrieval.section import RetrieverSection

    sec = RetrieverSection.from_dict(
        {
            "kb_dir": "/kb",
            "num_replicas": 4,
            "min_replicas": 2,
            "max_replicas": 8,
            "placement": "resource",
            "resource": "retriever",
            "num_cpus": 2,
        }
    )
    serving = sec.serving_config()
    assert (serving.num_replicas, serving.min_replicas, serving.max_replicas) == (4, 2, 8)
    assert (serving.placement, serving.resource, serving.num_cpus) == ("resource", "retriever", 2.0)
    assert RetrieverSection.from_dict(sec.to_dict()) == sec
    assert RetrieverSection().serving_config().num_replicas == 1
    with pytest.raises(ValueError, match="min_replicas"):
        RetrieverSection.from_dict({"kb_dir": "/kb", "min_replicas": 2})


# --- why a replica failed -----------------------------------------------------------------------

# Ray's text for a constructor that raised EmbedderUnavailable (captured from ray 2.x: ANSI colour,
# caret lines, the frame, then the exception header and its continuation line).
_RAY_CREATION_ERROR = (
    "The actor died because of an error raised in its creation task, \x1b[36mray::RetrieverReplica.__init__()"
    "\x1b[39m (pid=17624, ip=192.0.2.2, actor_id=966e5c)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "gta_verl/kb/embed.py", line 281, in _cached_snapshot\n'
    "gta_verl.kb.embed.EmbedderUnavailable: embedder 'x' is not in the local Hugging Face cache;\n"
    "pass --allow-download to fetch it once."
)


def test_replica_failure_keeps_the_cause_and_its_hint():
    """The last exception header is the cause; its continuation line (the hint) is kept."""
    from gta_verl.retrieval.serving.routing import first_line

    line = first_line(RuntimeError(_RAY_CREATION_ERROR))
    assert line == (
        "EmbedderUnavailable: embedder 'x' is not in the local Hugging Face cache; "
        "pass --allow-download to fetch it once."
    )


def test_replica_failure_without_a_traceback_names_the_exception():
    from gta_verl.retrieval.serving.routing import first_line

    assert first_line(TimeoutError("replica 0 did not answer in 20 s\nmore")) == (
        "TimeoutError: replica 0 did not answer in 20 s"
    )
    assert first_line(ValueError("")) == "ValueError: "


def test_a_message_line_that_looks_like_a_header_is_not_a_cause():
    from gta_verl.retrieval.serving.routing import first_line

    assert first_line(ValueError("bad config\nNote: see docs")) == "ValueError: bad config"


# --- one KB version per service ---------------------------------------------------------------


def test_plan_versions_pins_the_disk_version_and_replaces_the_rest():
    from gta_verl.retrieval.serving.routing import plan_versions

    # first replicas up, both on the directory's version A: pin A, nothing to replace
    assert plan_versions(["A", "A"], None, "A") == ("A", [])
    # kb add rewrote the directory (disk B); replica 1 restarted and loaded B: move to B, replace replica 0
    assert plan_versions(["A", "B"], "A", "B") == ("B", [0])
    # disk moved to B but no replica serves B yet: keep A, replace nobody (a replacement would load B
    # while A still answers; the move happens once a B replica is up)
    assert plan_versions(["A", None], "A", "B") == ("A", [])
    # the service cannot read the directory: keep the pin, never replace (no loop of reloads)
    assert plan_versions(["A", "B"], "A", None) == ("A", [])
    # every A replica is gone: the most common version served (2 × C against 1 × B)
    assert plan_versions(["B", "C", "C"], "A", None) == ("C", [])
    # nothing loaded yet: nothing to decide
    assert plan_versions([None, None], None, "A") == (None, [])


def test_manifest_digest_is_the_files_checksums():
    from gta_verl.kb.store import manifest_digest

    a = {"files": {"x.parquet": "1" * 64, "y.npy": "2" * 64}, "created_at": "2026-01-01"}
    same_tables = {"files": {"y.npy": "2" * 64, "x.parquet": "1" * 64}, "created_at": "2026-12-02"}
    rewritten = {"files": {"x.parquet": "1" * 64, "y.npy": "3" * 64}}
    assert manifest_digest(a) == manifest_digest(same_tables)  # order and creation time do not count
    assert manifest_digest(a) != manifest_digest(rewritten)
    assert len(manifest_digest(a)) == 16
