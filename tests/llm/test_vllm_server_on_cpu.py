"""The vLLM server launcher: its command line and environment, the transcript template, and its lifecycle
(start, wait for the model, stop the whole process group, fail with the log) against a stand-in server.

The stand-in is a module ``vllm.entrypoints.openai.api_server`` put first on ``PYTHONPATH``: the launcher
runs its real command, and the stand-in answers ``/v1/models`` like vLLM, after starting a child process
as vLLM's engine core does (the group stop must end it too).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gta_verl.llm.vllm_server import (
    TRANSCRIPT_CHAT_TEMPLATE,
    TRANSCRIPT_STOP,
    ServerStartError,
    VLLMServer,
    VLLMServerConfig,
    server_command,
    server_env,
)


def test_command_and_environment():
    cfg = VLLMServerConfig("/m/gemma", "gemma", port=8123, python="/venv/bin/python", chat_template="{{x}}")
    cmd = server_command(cfg)
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    valued = [(i, flag) for i, flag in enumerate(cmd) if flag.startswith("--") and flag != "--enforce-eager"]
    flags = {flag: cmd[i + 1] for i, flag in valued}
    assert flags["--port"] == "8123" and flags["--host"] == "127.0.0.1" and flags["--dtype"] == "float32"
    assert flags["--served-model-name"] == "gemma" and flags["--chat-template"] == "{{x}}"
    assert "--enforce-eager" in cmd and cfg.base_url == "http://127.0.0.1:8123/v1"
    assert "--chat-template" not in server_command(VLLMServerConfig("/m", "m"))
    env = server_env(cfg, {"PATH": "/bin", "VLLM_CPU_OMP_THREADS_BIND": "0-1"})
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and env["PATH"] == "/bin"  # the caller's value wins


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"port": 0}, "port"),
        ({"max_model_len": 0}, "max_model_len"),
        ({"served_model_name": ""}, "non-empty"),
    ],
)
def test_config_refuses_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        VLLMServerConfig(**{"model": "/m", "served_model_name": "m", **kwargs})


def test_transcript_template_renders_a_few_shot_transcript_ending_on_output():
    jinja2 = pytest.importorskip("jinja2")
    messages = [
        {"role": "system", "content": "Extract."},
        {"role": "user", "content": "Passage: A"},
        {"role": "assistant", "content": '{"x": 1}'},
        {"role": "user", "content": "Passage: B"},
    ]
    text = jinja2.Template(TRANSCRIPT_CHAT_TEMPLATE).render(
        messages=messages, bos_token="<bos>", add_generation_prompt=True
    )
    assert text == '<bos>Extract.\n\nInput:\nPassage: A\nOutput: {"x": 1}\n\nInput:\nPassage: B\nOutput: '
    # the stop string is where the model would start the next example
    assert text.index(TRANSCRIPT_STOP[0]) == text.index("\nInput:")


STAND_IN = """
import json, os, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
name = args["--served-model-name"]
if name == "crash":
    print("boom: no such model", flush=True)
    sys.exit(3)
engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["STAND_IN_PIDS"], "w") as f:
    json.dump({"engine": engine.pid, "env": os.environ.get("VLLM_TARGET_DEVICE")}, f)
time.sleep(0.5)  # not listening at once, as vLLM is not


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": name}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


HTTPServer((args["--host"], int(args["--port"])), H).serve_forever()
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (pkg, pkg.parent, pkg.parent.parent):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(textwrap.dedent(STAND_IN))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("STAND_IN_PIDS", str(tmp_path / "pids.json"))
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    return tmp_path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_serves_then_stops_the_whole_group(stand_in):
    cfg = VLLMServerConfig("/m", "tiny", port=_free_port(), python=sys.executable)
    with VLLMServer(cfg, stand_in / "server.log") as server:
        assert server.startup_s is not None and server.startup_s >= 0.5
        pids = json.loads((stand_in / "pids.json").read_text())
        assert pids["env"] == "cpu" and _alive(pids["engine"])
    deadline = time.monotonic() + 10
    while _alive(pids["engine"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pids["engine"])  # the engine child went with the group
    server.stop()  # idempotent


def test_a_server_that_exits_fails_with_its_log(stand_in):
    cfg = VLLMServerConfig("/m", "crash", port=_free_port(), python=sys.executable)
    with pytest.raises(ServerStartError, match=r"exited with code 3[\s\S]*boom: no such model"):
        with VLLMServer(cfg, stand_in / "server.log"):
            pass


def test_benchmark_agreement_and_yield_by_hand():
    from benchmarks.kb.llm_server import agreement, ner_agreement, yield_summary

    ref = {
        "d1": [("Lake Baikal", "located in", "Siberia"), ("Siberia", "part of", "Russia")],
        "d2": [("A", "r", "B")],
    }
    pred = {
        "d1": [("lake baikal", "Located  in", "Siberia!"), ("Baikal", "is", "deep")],
        "x": [("A", "r", "B")],
    }
    a = agreement(pred, ref)
    # triples: 1 shared (normalized) of 2 predicted on reference passages, 3 in the reference; "x" is no
    # reference passage and d2 predicts nothing
    assert (a["n_triples_shared"], a["n_triples_predicted"], a["n_triples_reference"]) == (1, 2, 3)
    assert a["triple_precision"] == 0.5 and a["triple_recall"] == 1 / 3
    # entities: d1 {lake baikal, siberia, baikal, deep} vs {lake baikal, siberia, russia}; d2 {} vs {a, b}
    assert a["entity_precision"] == 2 / 4 and a["entity_recall"] == 2 / 5
    assert agreement({}, {})["triple_precision"] == 0.0
    # NER: d1 {baikal, siberia} vs {lake baikal, siberia}; d2 nothing vs {a}; "" is no entity
    ner = ner_agreement({"d1": ["Baikal", "SIBERIA", "!!"]}, {"d1": ["Lake Baikal", "Siberia"], "d2": ["A"]})
    assert ner == {"ner_precision": 1 / 2, "ner_recall": 1 / 3}
    funnel = {
        "stages": [
            {"name": "sampled", "count": 8, "rejected": 0, "reasons": {}},
            {"name": "generated", "count": 8, "rejected": 0, "reasons": {}},
            {
                "name": "parsed",
                "count": 2,
                "rejected": 6,
                "reasons": {"parse:no_json": 5, "parse:truncated": 1},
            },
            {
                "name": "rules_passed",
                "count": 1,
                "rejected": 1,
                "reasons": {"rule:answer_not_in_last_doc": 1},
            },
            {"name": "validated", "count": 0, "rejected": 1, "reasons": {"retrieval:miss_turn_1": 1}},
        ]
    }
    s = yield_summary(funnel)
    assert s["counts"]["parsed"] == 2 and s["yield"] == 0.0 and sum(s["rejected"].values()) == 8
