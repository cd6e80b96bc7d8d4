"""``kb build --ray`` on a simulated 2-node cluster (``ray.cluster_utils.Cluster``) = the single-process KB.

Node 0 (head, where this driver runs) has 1 CPU; node 1 has 2 CPUs. The encoder actors ask for 2 CPUs
(2 torch threads, as the single-process build on this 2-core machine: the vectors' last bits depend on
the thread count), so they fit on node 1 only; the two OpenIE actors are spread by Ray Data. Where each
pool's actors ran is read back from the GCS actor table, so the test proves that the KB was computed
on a node other than the driver's and still has the single-process checksums.
"""

from __future__ import annotations

import json

import pytest

from gta_verl.kb.build import build_kb_from_files
from gta_verl.kb.ray_build import RayOptions, build_kb_ray
from tests.kb.test_ray_build_on_cpu import _by_stage, _files, _twowiki

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402 - needs ray: after the importorskip

pytestmark = pytest.mark.slow  # two raylets, spaCy in two actors and MiniLM in a third: > 30 s on 2 cores


def _start_cluster() -> tuple[Cluster, str]:
    """Head (1 CPU) + one worker node (2 CPUs); returns the cluster and the worker node's id."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        worker = c.add_node(num_cpus=2)
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
    except BaseException:
        ray.shutdown()
        c.shutdown()
        raise
    return c, worker.node_id


@pytest.fixture(scope="module")
def two_nodes():
    # On a loaded 2-core machine a raylet can miss Ray's fixed 30 s start-up deadline ("The current
    # node timed out during startup"): only that failure is retried, once.
    for attempt in range(2):
        try:
            cluster, worker_id = _start_cluster()
            break
        except Exception as exc:  # Ray raises a bare Exception for a start-up timeout
            if "timed out during startup" not in str(exc) or attempt == 1:
                raise
    try:
        yield {"head": ray.get_runtime_context().get_node_id(), "worker": worker_id}
    finally:
        ray.shutdown()
        cluster.shutdown()


def _actor_nodes(job_id: str) -> dict[str, set[str]]:
    """{pool class: node ids its actors ran on} for this job, from the GCS actor table (dead actors too)."""
    # the table `ray list actors` reads; the public state API would need the dashboard on the head
    from ray._private import state

    out: dict[str, set[str]] = {}
    for a in state.actors().values():
        if a["JobID"] != job_id:
            continue
        for pool in ("OpenIEActor", "EncodeActor"):
            if pool in a["ActorClassName"]:
                out.setdefault(pool, set()).add(a["Address"]["NodeID"])
    return out


def test_2wiki_spacy_ray_build_on_two_nodes_equals_single_process(two_nodes, tmp_path, monkeypatch):
    """Cold caches on both sides: the pools on the cluster compute every extraction and vector."""
    corpus = _twowiki(tmp_path, 12)
    monkeypatch.setenv("GTA_VERL_CACHE", str(tmp_path / "cache_single"))
    build_kb_from_files(corpus, "hipporag", "spacy", tmp_path / "single", progress=False)
    opts = RayOptions(
        shard_passages=4,
        work_dir=str(tmp_path / "work"),
        cache_dir=str(tmp_path / "cache_ray"),
        encoder_num_cpus=2,
    )  # only node 1 holds 2 CPUs
    assert ray.is_initialized()  # build_kb_ray joins the cluster's driver instead of starting a local Ray
    _, stats = build_kb_ray(corpus, "hipporag", "spacy", tmp_path / "ray", opts=opts, progress=False)
    assert ray.is_initialized()  # ... and leaves that connection open

    assert _files(tmp_path / "ray") == _files(tmp_path / "single")  # sha256 of all 8 KB files
    single = json.loads((tmp_path / "single" / "manifest.json").read_text())
    assert json.loads((tmp_path / "ray" / "manifest.json").read_text())["openie"] == single["openie"]
    st = _by_stage(stats)
    # 12 passages / 4 per shard = 3 OpenIE shards
    assert (st["OpenIE"].items, st["OpenIE"].shards_run, st["OpenIE"].failures) == (12, 3, 0)
    assert st["embeddings"].shards_run == 3  # passages, entities, triples: one chunk each

    nodes = _actor_nodes(ray.get_runtime_context().get_job_id())
    assert nodes["EncodeActor"] == {two_nodes["worker"]}  # every vector was computed off the driver's node
    assert two_nodes["worker"] in nodes["OpenIEActor"]
    assert nodes["OpenIEActor"] <= {two_nodes["head"], two_nodes["worker"]}
