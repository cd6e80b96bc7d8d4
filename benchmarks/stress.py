"""Reliability suite (issue 14): hostile HTTP input, load, fuzzed generations, corrupted KBs and corpora.

Prints markdown tables (recorded in docs/reliability.md):

1. HTTP on 127.0.0.1 with the bundled MuSiQue KB: N requests from C concurrent clients,
   results compared with in-process retrieval, p50/p95 latency; every hostile case of
   issue 14 items 1-3 with the status it got; fairness of the micro-batcher (single-query
   callers while a maximal request is in flight).
2. Fuzzed generations through the real agent loop (scripted policy, real Qwen2.5
   tokenizer, toy retriever) and the three registered reward managers: exceptions, and
   masks checked against the loop's own turn spans.
3. Corrupted-KB matrix on a copy of the MuSiQue KB: every case must be a KBLoadError
   naming the damaged file.
4. Malformed-corpus matrix (MuSiQue records, JSON and JSONL): in = loaded + rejected.

5. The retriever replica killed three ways (``ray.kill`` with and without restart,
   SIGKILL of its process) during concurrent calls through :class:`RayRetrieverClient`.

Run: ``nice -n 10 .venv/bin/python benchmarks/stress.py`` (``--sections corpus,kb,hostile,http,actor,fuzz``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import select
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.* helpers (the KB cache, the corruption cases)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def musique_kb_dir() -> Path:
    """The cached MuSiQue KB of the test suite (built once if absent)."""
    from tests.conftest import _build, musique_kb_key

    from gta_verl.kb.embed import cache_root
    from gta_verl.kb.store import KBLoadError, verify_kb

    out = cache_root() / "kb" / f"musique-{musique_kb_key()[:16]}"
    try:
        verify_kb(out)
    except KBLoadError:
        out.parent.mkdir(parents=True, exist_ok=True)
        _build(out)
    return out


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


# ------------------------------------------------------------------------------------------ HTTP
class Server:
    """uvicorn in a thread on 127.0.0.1 (stopped by :meth:`stop`)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = _free_port()
        from gta_verl.retrieval.http import KEEP_ALIVE_S

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    timeout_keep_alive=KEEP_ALIVE_S))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        import httpx

        for _ in range(400):
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def chunked_flood(port: int, total: int, chunk: int = 1 << 16) -> tuple[str, int]:
    """POST ``total`` bytes with chunked transfer; stop when the server answers. Returns (status, bytes sent)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    sent, body = 0, b'{"queries": ["' + b"a" * chunk
    try:
        while sent < total:
            s.sendall(f"{len(body):x}\r\n".encode() + body + b"\r\n")
            sent += len(body)
            body = b"a" * chunk
            if select.select([s], [], [], 0)[0]:  # the server has answered: stop sending
                break
        else:
            s.sendall(b'2\r\n"]\r\n1\r\n}\r\n0\r\n\r\n')
        status = s.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError as exc:
        status = f"connection {type(exc).__name__}"
    finally:
        s.close()
    return status, sent


def declared_flood(port: int, declared: int) -> str:
    """Declare ``declared`` body bytes, send 2, read the status line (the server must not wait for the rest)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {declared}\r\n\r\n{{}}".encode())
        return s.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")


async def _load(url: str, queries: list[str], clients: int) -> tuple[list[Any], list[float]]:
    import httpx

    sem = asyncio.Semaphore(clients)
    lat: list[float] = [0.0] * len(queries)
    out: list[Any] = [None] * len(queries)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def one(i: int) -> None:
            async with sem:
                t = time.perf_counter()
                try:
                    r = await client.post(url + "/retrieve", json={"queries": [queries[i]]})
                    out[i] = r.json() if r.status_code == 200 else r.status_code
                except httpx.HTTPError as exc:  # counted: "answered 200" is below the request count
                    out[i] = f"{type(exc).__name__}: {exc}"
                lat[i] = (time.perf_counter() - t) * 1000
        await asyncio.gather(*(one(i) for i in range(len(queries))))
    return out, lat


async def _fairness(url: str, n_small: int) -> dict[str, float]:
    """One maximal request (512 × 256 characters) in flight, then ``n_small`` single-query callers."""
    import httpx

    from gta_verl.retrieval.batching import MAX_REQUEST_CHARS

    big_q = [(f"capital city country river {i} " * 12)[:256] for i in range(512)]
    assert sum(map(len, big_q)) <= MAX_REQUEST_CHARS
    async with httpx.AsyncClient(timeout=600) as client:
        async def timed(qs: list[str]) -> float:
            t = time.perf_counter()
            r = await client.post(url + "/retrieve", json={"queries": qs})
            assert r.status_code == 200, r.text
            return (time.perf_counter() - t) * 1000

        big = asyncio.ensure_future(timed(big_q))
        await asyncio.sleep(0.05)
        small = await asyncio.gather(*(timed([f"who founded company {i}"]) for i in range(n_small)))
        big_ms = await big
    return {"big_ms": big_ms, "small_p50": _pct(small, 50), "small_p95": _pct(small, 95), "small_max": max(small)}


def _post(url: str, content: bytes, **headers: str) -> Any:
    import httpx

    return httpx.post(url + "/retrieve", content=content, timeout=60,
                      headers={"content-type": "application/json", **headers})


def hostile_cases(srv: Server) -> list[tuple[str, str, str]]:
    """(case, expected, got) for issue 14 items 1-3."""
    rows = []
    status, sent = chunked_flood(srv.port, 12_000_000)
    rows.append(("12 MB body, chunked transfer", "413", f"{status} after {sent:,} bytes sent"))
    rows.append(("Content-Length 12,000,000 (2 bytes sent)", "413", declared_flood(srv.port, 12_000_000)))
    for name, raw in (("lone surrogate escape \\ud800", b'{"queries": ["\\ud800 x"]}'),
                      ("raw byte 0xff (not UTF-8)", b'{"queries": ["caf\xff"]}'),
                      ('topk "3"', b'{"queries": ["x"], "topk": "3"}'),
                      ("topk true", b'{"queries": ["x"], "topk": true}'),
                      ("queries not a list", b'{"queries": "x"}')):
        rows.append((name, "422", str(_post(srv.url, raw).status_code)))
    for bad in ("", "\u0000"):
        errs = []
        for extra in ({}, {"topk": 3}):
            r = _post(srv.url, json.dumps({"queries": ["capital of France", bad], **extra}).encode())
            errs.append(f"{r.status_code}:{r.json()['meta'][1]['error']}" if r.status_code == 200 else str(r.status_code))
        rows.append((f"query {bad!r} without / with topk", "200, same per-query error",
                     "same: " + errs[0] if errs[0] == errs[1] else f"differ: {errs}"))
    long_q = json.dumps({"queries": ["capital " * 287 + "abcd"] * 400}).encode()  # 400 × 2,300 characters
    t = time.perf_counter()
    r = _post(srv.url, long_q)
    rows.append(("400 queries × 2,300 characters", "413", f"{r.status_code} in {(time.perf_counter() - t) * 1000:.0f} ms"))
    import httpx

    rows.append(("/health afterwards", "200", str(httpx.get(srv.url + "/health", timeout=10).status_code)))
    return rows


def section_http(n: int, clients: int, n_small: int) -> None:
    from gta_verl.retrieval.http import create_app
    from gta_verl.retrieval.retriever import GraphRetriever
    from tests.conftest import MUSIQUE_CORPUS, MUSIQUE_QA

    retriever = GraphRetriever.from_kb_dir(musique_kb_dir())
    qs = [q["question"] for q in json.loads(MUSIQUE_QA.read_text())]
    qs += list(dict.fromkeys(p["title"] for p in json.loads(MUSIQUE_CORPUS.read_text())))
    qs = qs[:n]
    t = time.perf_counter()
    expected = [r.doc_ids for r in retriever.retrieve(qs)]
    inproc_s = time.perf_counter() - t
    srv = Server(create_app(retriever))
    try:
        t = time.perf_counter()
        out, lat = asyncio.run(_load(srv.url, qs, clients))
        wall = time.perf_counter() - t
        ok = [o for o in out if isinstance(o, dict)]
        same = sum(isinstance(o, dict) and [d["doc_id"] for d in o["result"][0]] == e for o, e in zip(out, expected))
        print(f"\n### HTTP load: {len(qs):,} requests (1 query each), {clients} concurrent clients, 127.0.0.1\n")
        print("| answered 200 | equal to in-process | p50 ms | p95 ms | max ms | wall s | req/s | in-process s |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {len(ok):,} | {same:,} | {_pct(lat, 50):.0f} | {_pct(lat, 95):.0f} | {max(lat):.0f} | "
              f"{wall:.1f} | {len(qs) / wall:.0f} | {inproc_s:.1f} |")
        f = asyncio.run(_fairness(srv.url, n_small))
        print(f"\n### Fairness: {n_small} single-query callers while one 512-query request is in flight\n")
        print("| 512-query request ms | single callers p50 ms | p95 ms | max ms |")
        print("|---:|---:|---:|---:|")
        print(f"| {f['big_ms']:.0f} | {f['small_p50']:.0f} | {f['small_p95']:.0f} | {f['small_max']:.0f} |")
    finally:
        srv.stop()


def section_hostile() -> None:
    from gta_verl.retrieval.http import create_app
    from gta_verl.retrieval.retriever import GraphRetriever

    srv = Server(create_app(GraphRetriever.from_kb_dir(musique_kb_dir())))
    try:
        print("\n### Hostile input (MuSiQue KB, default limits)\n\n| case | expected | got |\n|---|---|---|")
        for row in hostile_cases(srv):
            print("| " + " | ".join(row) + " |")
    finally:
        srv.stop()


# ------------------------------------------------------------------------------------------ fuzz
_FRAGMENTS = ["<search>", "</search>", "<answer>", "</answer>", "<info>", "</info>", "<think>", "</think>",
              "<search><search>", "</answer></answer>", "< search>", "<SEARCH>", "<answer/>", "\n", " ", "\t",
              "Paris", "capital of France", "Emmanuel Macron", "", "\u0000", "\u202e", "🙂", "ß", "日本",
              "\\", '"', "{", "}", "<|im_end|>", "<|endoftext|>", "\r\n", "x" * 300]


def fuzz_turn(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.25:
        return f"{rng.choice(['', 'think. '])}<search> {rng.choice(_FRAGMENTS[16:])} </search>"
    if kind < 0.4:
        return f"so <answer> {rng.choice(_FRAGMENTS[16:])} </answer>{rng.choice(['', ' trailing <search> q </search>'])}"
    return "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 12)))


def section_fuzz(n: int, seed: int) -> None:
    import gta_verl.rewards.managers  # noqa: F401 - registers trajectory_guided, exact_match
    import gta_verl.rewards.path_router_manager  # noqa: F401 - registers path_router
    from omegaconf import OmegaConf

    from gta_verl.agent.backends import ScriptedServerManager
    from gta_verl.agent.retriever_access import in_process_client
    from gta_verl.agent.runner import make_trainer_config, rollout_data_proto, run_agent_rollouts
    from gta_verl.agent.spans import response_mask_from_spans
    from gta_verl.agent.tokenizer import load_qwen_tokenizer
    from gta_verl.data import schema
    from gta_verl.data.schema import make_verl_row
    from gta_verl.data.types import QAExample
    from gta_verl.retrieval.retriever import GraphRetriever
    from gta_verl.retrieval.testing import HashEmbedder, make_toy_kb
    from gta_verl.verl_compat import get_reward_manager_cls

    rng = random.Random(seed)
    tok = load_qwen_tokenizer()
    emb = HashEmbedder()
    client = in_process_client(GraphRetriever(make_toy_kb(emb), emb))
    scripts = [[fuzz_turn(rng) for _ in range(rng.randint(1, 6))] for _ in range(n)]
    ex = QAExample("f", "Where was the president of France born?", ("Amiens",), (), 2, "toy")
    rows = [make_verl_row(ex, i) for i in range(n)]
    cfg = make_trainer_config(prompt_length=1024, response_length=768)
    mcfg = OmegaConf.create({"gta": {}, "reward": {}})
    managers = {name: get_reward_manager_cls(name)(config=mcfg, tokenizer=tok, compute_score=None,
                                                   reward_router_address=None, reward_model_tokenizer=None)
                for name in ("trajectory_guided", "exact_match", "path_router")}
    errors: dict[str, int] = {"loop": 0, **{k: 0 for k in managers}}
    bad_masks, t0 = 0, time.perf_counter()
    rollouts: list[Any] = []
    for s in range(0, n, 500):  # chunks: a loop exception costs one chunk, and is counted
        try:
            rollouts += run_agent_rollouts(rows[s : s + 500], ScriptedServerManager(tok, scripts[s : s + 500]),
                                           tok, client, cfg, concurrency=32)
        except Exception as exc:  # noqa: BLE001 - counted, reported
            errors["loop"] += 1
            print(f"loop exception: {type(exc).__name__}: {exc}", file=sys.stderr)
    t_loop = time.perf_counter() - t0
    for r in rollouts:
        spans = r.extra_fields[schema.EF_TURN_SPANS]
        n_tok = len(r.response_ids)
        tiles = bool(spans) and spans[0][1] == 0 and spans[-1][2] == n_tok and all(
            a[2] == b[1] for a, b in zip(spans, spans[1:]))
        if not tiles or r.response_mask != response_mask_from_spans(n_tok, spans) or len(r.response_mask) != n_tok:
            bad_masks += 1

    async def score_all() -> None:
        for r in rollouts:
            for name, m in managers.items():
                try:
                    res = await m.run_single(rollout_data_proto(r))
                    if not np.isfinite(float(res["reward_score"])):
                        raise ValueError("non-finite reward")
                except Exception as exc:  # noqa: BLE001 - counted, reported
                    errors[name] += 1
                    if errors[name] <= 3:
                        print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)

    t1 = time.perf_counter()
    asyncio.run(score_all())
    t_score = time.perf_counter() - t1
    kinds = {}
    for r in rollouts:
        for k, _, _ in r.extra_fields[schema.EF_TURN_SPANS]:
            kinds[k] = kinds.get(k, 0) + 1
    print(f"\n### Fuzzed generations through the agent loop and reward managers (seed {seed})\n")
    print("| generations | rollouts | loop exceptions | masks ≠ spans | trajectory_guided exc. | exact_match exc. "
          "| path_router exc. | loop s | scoring s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {n:,} | {len(rollouts):,} | {errors['loop']} | {bad_masks} | {errors['trajectory_guided']} | "
          f"{errors['exact_match']} | {errors['path_router']} | {t_loop:.0f} | {t_score:.0f} |")
    print(f"\nturn spans seen: {dict(sorted(kinds.items()))}")


# ------------------------------------------------------------------------------------------ actor kills
_ACTOR_QS = ["Where was the president of France born?", "capital of Japan", "chancellor of Germany",
             "Mount Fuji height"]


def section_actor(n_calls: int) -> None:
    """Kill the retriever replica three ways during ``n_calls`` concurrent calls (Ray client of issue 14.4)."""
    import os
    import signal

    import ray

    from gta_verl.kb.store import save_kb
    from gta_verl.retrieval.actor import get_or_create_retriever_actor
    from gta_verl.retrieval.client import RayRetrieverClient
    from gta_verl.retrieval.config import ServingConfig
    from gta_verl.retrieval.retriever import GraphRetriever
    from gta_verl.retrieval.testing import HashEmbedder, make_toy_kb

    emb, ns, name = HashEmbedder(), "gta_verl_stress", "stress_retriever"
    kb = make_toy_kb(emb)
    expected = [r.doc_ids for r in GraphRetriever(kb, emb).retrieve(_ACTOR_QS)]
    tmp = Path(tempfile.mkdtemp())
    save_kb(kb, tmp / "kb")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=ns)
    rows = []
    try:
        handle = get_or_create_retriever_actor(
            tmp / "kb", name=name, num_cpus=0.25, embedder="gta_verl.retrieval.testing:HashEmbedder",
            namespace=ns, serving=ServingConfig(num_replicas=1, monitor_interval_s=0.2))
        ray.get(handle.health.remote())
        client = RayRetrieverClient(name, timeout_s=120, namespace=ns)

        async def timed(i: int) -> tuple[Any, float]:
            t = time.perf_counter()
            (r,) = await client.aretrieve([_ACTOR_QS[i % 4]])
            return r, (time.perf_counter() - t) * 1000

        async def during(kill: Any) -> list[tuple[Any, float]]:
            tasks = [asyncio.ensure_future(timed(i)) for i in range(n_calls)]
            await asyncio.sleep(0)
            kill()
            return await asyncio.gather(*tasks)

        for mode in ("ray.kill(no_restart=False)", "ray.kill (permanent)", "SIGKILL of the replica"):
            ((_, replica),) = ray.get(handle.replicas.remote())["replicas"]
            if mode.startswith("SIGKILL"):
                pid = ray.get(replica.health.remote())["pid"]
                kill = lambda: os.kill(pid, signal.SIGKILL)  # noqa: E731
            else:
                kill = lambda: ray.kill(replica, no_restart="permanent" in mode)  # noqa: E731
            t = time.perf_counter()
            out = asyncio.run(during(kill))
            wall = time.perf_counter() - t
            ok = sum(r.ok for r, _ in out)
            same = sum(r.ok and r.doc_ids == expected[i % 4] for i, (r, _) in enumerate(out))
            later = [r.doc_ids for r in client.retrieve(_ACTOR_QS)] == expected
            rows.append((mode, n_calls, ok, n_calls - ok, same, max(ms for _, ms in out), wall, later))
        ray.get(handle.shutdown.remote())
        ray.kill(handle)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n### Retriever replica killed during {n_calls} concurrent calls (client timeout 120 s)\n")
    print("| kill | calls | answered | errors | equal to in-process | slowest call ms | wall s | later results equal |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for m, n, ok, err, same, mx, wall, later in rows:
        print(f"| {m} | {n} | {ok} | {err} | {same} | {mx:.0f} | {wall:.1f} | {'yes' if later else 'NO'} |")


# ------------------------------------------------------------------------------------------ KB matrix
def section_kb() -> None:
    from tests.kb.test_store_hardening_on_cpu import CASES, _load_bounded

    from gta_verl.kb.store import KBLoadError

    src = musique_kb_dir()
    print("\n### Corrupted-KB matrix (copies of the MuSiQue KB)\n")
    print("| corruption | result | names the file | ms |\n|---|---|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for case, (corrupt, _) in CASES.items():
            kb = Path(tmp) / case.replace(" ", "_").replace("/", "_")
            shutil.copytree(src, kb)
            corrupt(kb)
            t = time.perf_counter()
            try:
                _load_bounded(kb, timeout_s=60)
                result, named = "LOADED (not detected)", "-"
            except KBLoadError as exc:
                msg = str(exc)
                result = "KBLoadError"
                named = msg.split(": ", 1)[0].replace(str(kb), "KB")
            except Exception as exc:  # noqa: BLE001 - reported as a failure of the promise
                result, named = f"{type(exc).__name__} (not a KBLoadError)", "-"
            print(f"| {case} | {result} | `{named}` | {(time.perf_counter() - t) * 1000:.0f} |")
            shutil.rmtree(kb, ignore_errors=True)


# ------------------------------------------------------------------------------------------ corpus matrix
def _corpus_variants(base: list[dict[str, str]]) -> dict[str, tuple[list[Any], list[bytes]]]:
    """case → (JSON records, or raw JSON bytes patches) built from real MuSiQue records."""
    def with_rec(i: int, rec: Any) -> list[Any]:
        out = list(base)
        out[i] = rec
        return out
    return {
        "clean": (list(base), []),
        "byte 0xff in a title": (list(base), [b"\xff"]),
        "lone surrogate escape": (with_rec(7, {"title": "T\ud800", "text": "x y z"}), []),
        "record is a list": (with_rec(7, ["a", "b"]), []),
        "record is a string": (with_rec(7, "text"), []),
        "missing text": (with_rec(7, {"title": "t"}), []),
        "empty text": (with_rec(7, {"title": "t", "text": "  \n"}), []),
        "title not a string": (with_rec(7, {"title": 3, "text": "x"}), []),
        "whitespace-only duplicate": (with_rec(7, {"title": f" {base[3]['title']}", "text": base[3]["text"] + "\n"}), []),
        "exact duplicate": (with_rec(7, dict(base[3])), []),
    }


def _write(fmt: str, path: Path, recs: list[Any], patch: list[bytes]) -> None:
    if fmt == "hipporag":
        raw = json.dumps(recs, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if patch:  # first byte of record 7's title → 0xff
            at = raw.index(json.dumps(recs[7]["title"], ensure_ascii=False).encode()) + 1
            raw = raw[:at] + patch[0] + raw[at + 1 :]
        path.write_bytes(raw)
    else:
        lines = [json.dumps(r, ensure_ascii=False).encode("utf-8", "surrogatepass") for r in recs]
        if patch:
            at = lines[7].index(b'"title": "') + 10
            lines[7] = lines[7][:at] + patch[0] + lines[7][at + 1 :]
        lines.insert(12, b"{not json")  # one more malformed line in every JSONL variant
        path.write_bytes(b"\n".join(lines) + b"\n")


def section_corpus(n: int) -> None:
    from gta_verl.data.loaders import read_corpus, reason_counts
    from tests.conftest import MUSIQUE_CORPUS

    base = json.loads(MUSIQUE_CORPUS.read_text())[:n]
    print(f"\n### Malformed-corpus matrix ({n} MuSiQue records; JSONL variants add one invalid JSON line)\n")
    print("| case | format | in | loaded | rejected | in = loaded + rejected | reasons |")
    print("|---|---|---:|---:|---:|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for case, (recs, patch) in _corpus_variants(base).items():
            for fmt, suffix in (("hipporag", ".json"), ("flashrag", ".jsonl")):
                path = Path(tmp) / f"c{suffix}"
                _write(fmt, path, recs, patch)
                try:
                    rep = read_corpus(path, fmt)
                    why = ", ".join(f"{k}: {v}" for k, v in reason_counts(rep.rejected).items())
                    print(f"| {case} | {fmt} | {rep.n_in} | {rep.n_ok} | {len(rep.rejected)} | "
                          f"{'yes' if rep.reconciles() else 'NO'} | {why} |")
                except Exception as exc:  # noqa: BLE001 - reported as a failure of the promise
                    print(f"| {case} | {fmt} | - | - | - | {type(exc).__name__}: {exc} | |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sections", default="corpus,kb,hostile,http,actor,fuzz")
    p.add_argument("--kill-calls", type=int, default=256)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--clients", type=int, default=128)
    p.add_argument("--small-callers", type=int, default=64)
    p.add_argument("--fuzz", type=int, default=10_000)
    p.add_argument("--corpus-records", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sections = set(args.sections.split(","))
    if "corpus" in sections:
        section_corpus(args.corpus_records)
    if "kb" in sections:
        section_kb()
    if "hostile" in sections:
        section_hostile()
    if "http" in sections:
        section_http(args.requests, args.clients, args.small_callers)
    if "actor" in sections:
        section_actor(args.kill_calls)
    if "fuzz" in sections:
        section_fuzz(args.fuzz, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
