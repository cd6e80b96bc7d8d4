"""HTTP sections of the reliability suite: hostile input, stall, load.

Imported by ``benchmarks/serving/stress.py`` (run that); each ``section_*`` prints markdown tables. The
MuSiQue server they share is in ``benchmarks/serving/stress_musique.py``, the actor kills in
``benchmarks/serving/stress_actor.py``. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.serving.stress_musique import (
    TIMEOUT_S,
    Server,
    long_queries,
    musique_questions,
    musique_server,
    pct,
)


# ------------------------------------------------------------------------------------------ hostile input
def chunked_flood(port: int, total: int, chunk: int = 1 << 16) -> tuple[str, int]:
    """POST ``total`` bytes chunked; stop when the server answers. Returns (status line, bytes sent)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(
        b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
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
    except OSError as exc:  # a reset after the 413 is fine; the status line is what counts
        status = f"connection {type(exc).__name__}"
    finally:
        s.close()
    return status, sent


def declared_flood(port: int, declared: int) -> str:
    """Declare ``declared`` body bytes, send 2, read the status line (the server must not wait for more)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {declared}\r\n\r\n{{}}".encode()
        )
        return s.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")


def _post(url: str, content: bytes) -> Any:
    import httpx

    return httpx.post(
        url + "/retrieve", content=content, timeout=60, headers={"content-type": "application/json"}
    )


def _flood_rows(srv: Server) -> list[tuple[str, str, str]]:
    """The oversize bodies: 12 MB chunked, and a 12 MB Content-Length with 2 bytes sent."""
    status, sent = chunked_flood(srv.port, 12_000_000)
    return [
        (
            "12 MB body, chunked transfer",
            "413",
            f"{status.split(' ', 1)[-1]} (client had pushed {sent:,} bytes into the socket)",
        ),
        (
            "Content-Length 12,000,000 (2 bytes sent)",
            "413",
            declared_flood(srv.port, 12_000_000).split(" ", 1)[-1],
        ),
    ]


def _schema_rows(srv: Server) -> list[tuple[str, str, str]]:
    """Bodies the strict request schema refuses with 422 (bad text, bad ``topk``, bad shapes)."""
    rows = []
    for name, raw in (
        ("lone surrogate escape `\\ud800`", b'{"queries": ["\\ud800 x"]}'),
        ("lone low surrogate `\\udfff` after a valid query", b'{"queries": ["ok", "\\udfff"]}'),
        ("raw byte 0xff (not UTF-8)", b'{"queries": ["caf\xff"]}'),
        ('topk `"3"`', b'{"queries": ["x"], "topk": "3"}'),
        ("topk `true`", b'{"queries": ["x"], "topk": true}'),
        ("topk `3.0`", b'{"queries": ["x"], "topk": 3.0}'),
        ("queries not a list", b'{"queries": "x"}'),
        ("query not a string", b'{"queries": [3]}'),
    ):
        r = _post(srv.url, raw)
        echo = ", body echoes no input" if "\\ud800" not in r.text else ""
        rows.append((name, "422", f"{r.status_code}{echo}"))
    return rows


def _empty_query_rows(srv: Server) -> list[tuple[str, str, str]]:
    """An empty, NUL or blank query next to a good one: 200, the same per-query error with or without topk."""
    rows = []
    for bad, shown in (("", '`""`'), ("\u0000", '`"\\u0000"`'), ("  \t", "blank")):
        errs = []
        for extra in ({}, {"topk": 3}):
            r = _post(srv.url, json.dumps({"queries": ["capital of France", bad], **extra}).encode())
            body = r.json() if r.status_code == 200 else {}
            ok0 = bool(body) and body["meta"][0]["error"] is None and len(body["result"][0]) > 0
            got = body["meta"][1]["error"] if ok0 else r.text[:80]
            errs.append(f"{r.status_code}:{got}")
        same = errs[0] == errs[1]
        rows.append(
            (
                f"query {shown} next to a good one, without / with topk",
                "200, same per-query error",
                ("same: " + errs[0].split(":", 1)[1][:60]) if same else f"DIFFER: {errs}",
            )
        )
    return rows


def hostile_rows(srv: Server) -> list[tuple[str, str, str]]:
    """(case, expected, got) for the hostile HTTP requests and the strict request schema."""
    import httpx

    rows = _flood_rows(srv) + _schema_rows(srv) + _empty_query_rows(srv)
    long_q = json.dumps({"queries": long_queries(400, 2300)}).encode()  # 920,000 query characters
    t = time.perf_counter()
    r = _post(srv.url, long_q)
    rows.append(
        (
            "one request: 400 queries × 2,300 characters",
            "413 (character cap)",
            f"{r.status_code} in {(time.perf_counter() - t) * 1000:.0f} ms",
        )
    )
    rows.append(("`/health` afterwards", "200", str(httpx.get(srv.url + "/health", timeout=10).status_code)))
    return rows


def section_hostile() -> None:
    _, srv = musique_server()
    print(
        "\n### Hostile input (MuSiQue KB, default limits: 1,000,000-byte body, 512 queries, "
        "131,072 query characters)\n\n| case | expected | got |\n|---|---|---|"
    )
    for row in hostile_rows(srv):
        print("| " + " | ".join(row) + " |")


# ------------------------------------------------------------------------------------------ stall
@dataclass
class _Calls:
    """Latencies (ms) of callers' requests and how each ended."""

    ms: list[float] = field(default_factory=list)
    ok: int = 0
    late: int = 0  # answered 200 but after TIMEOUT_S (the caller had given up)
    timeouts: int = 0
    other: int = 0

    def row(self) -> str:
        n = len(self.ms)
        return (
            f"{n} | {self.ok} | {self.late + self.timeouts} | {self.other} | {pct(self.ms, 50):.0f} | "
            f"{pct(self.ms, 95):.0f} | {max(self.ms, default=float('nan')):.0f}"
        )


async def _caller(
    client: Any, url: str, qs: list[str], i: int, stop: asyncio.Event, calls: _Calls, n_max: int | None = None
) -> None:
    """One agent: single-query requests one after another until ``stop`` (or ``n_max`` calls)."""
    import httpx

    j = 0
    while not stop.is_set() and (n_max is None or j < n_max):
        t = time.perf_counter()
        try:
            r = await client.post(url + "/retrieve", json={"queries": [qs[(i * 7 + j) % len(qs)]]})
            ms = (time.perf_counter() - t) * 1000
            if r.status_code != 200:
                calls.other += 1
            elif ms > TIMEOUT_S * 1000:
                calls.late += 1
            else:
                calls.ok += 1
        except httpx.TimeoutException:
            ms = (time.perf_counter() - t) * 1000
            calls.timeouts += 1
        except httpx.HTTPError:
            ms = (time.perf_counter() - t) * 1000
            calls.other += 1
        calls.ms.append(ms)
        j += 1


async def _stall(url: str, n_long: int, chars: int, n_callers: int) -> dict[str, Any]:
    """Baseline agents, then the same agents while one caller pushes ``n_long`` long queries."""
    import httpx

    from gta_verl.retrieval.serving.batching import MAX_REQUEST_CHARS

    qs, longs = musique_questions(), long_queries(n_long, chars)
    per = MAX_REQUEST_CHARS // chars  # the largest request the character cap lets through
    requests = [longs[i : i + per] for i in range(0, n_long, per)]
    limits = httpx.Limits(max_connections=n_callers + len(requests) + 4)
    async with (
        httpx.AsyncClient(timeout=TIMEOUT_S, limits=limits) as agents,
        httpx.AsyncClient(timeout=1800, limits=limits) as attacker,
    ):
        base, stop = _Calls(), asyncio.Event()
        await asyncio.gather(*(_caller(agents, url, qs, i, stop, base, n_max=3) for i in range(n_callers)))

        async def attack() -> tuple[list[int], float]:
            t = time.perf_counter()
            posts = (attacker.post(url + "/retrieve", json={"queries": r}) for r in requests)
            rs = await asyncio.gather(*posts)
            stop.set()
            return [r.status_code for r in rs], time.perf_counter() - t

        under = _Calls()
        job = asyncio.ensure_future(attack())
        await asyncio.sleep(0.2)  # the attacker's first batch is running when the agents arrive
        await asyncio.gather(*(_caller(agents, url, qs, i, stop, under) for i in range(n_callers)))
        codes, wall = await job
    return {"per": per, "requests": len(requests), "codes": codes, "wall": wall, "base": base, "under": under}


def _budgetless_server(retriever: Any) -> Server:
    """The reference: the same app whose batcher has no character budget (count-only round robin)."""
    import functools

    from gta_verl.retrieval.serving import http
    from gta_verl.retrieval.serving.batching import MicroBatcher

    http.MicroBatcher = functools.partial(MicroBatcher, max_batch_chars=None)  # type: ignore[misc]
    try:
        return Server(http.create_app(retriever))
    finally:
        http.MicroBatcher = MicroBatcher  # type: ignore[misc]


def section_stall(n_long: int, chars: int, n_callers: int, reference: bool = False) -> None:
    retriever, srv = musique_server()
    if reference:
        ref = _budgetless_server(retriever)
        try:
            r = asyncio.run(_stall(ref.url, n_long, chars, n_callers))
        finally:
            ref.stop()
        ok = sum(c == 200 for c in r["codes"])
        print("\n### Stall reference: the same run against a batcher without the character budget\n")
        print(f"Attacker: {ok}/{len(r['codes'])} requests answered 200 in {r['wall']:.1f} s.\n")
        print("| agents' calls | n | answered ≤ 30 s | timed out / late | other | p50 ms | p95 ms | max ms |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| alone (3 calls each) | {r['base'].row()} |")
        print(f"| while the attacker is served | {r['under'].row()} |")
    s = asyncio.run(_stall(srv.url, n_long, chars, n_callers))
    print(
        f"\n### Stall: one caller sends {n_long} queries × {chars:,} characters as {s['requests']} "
        f"concurrent requests of ≤ {s['per']} (the most the character cap admits), while {n_callers} "
        f"agents keep sending single-query requests with a {TIMEOUT_S:g} s timeout\n"
    )
    ok = sum(c == 200 for c in s["codes"])
    print(
        f"Attacker: {ok}/{len(s['codes'])} requests answered 200, all {n_long} queries served in "
        f"{s['wall']:.1f} s.\n"
    )
    print("| agents' calls | n | answered ≤ 30 s | timed out / late | other | p50 ms | p95 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| alone (3 calls each, reference) | {s['base'].row()} |")
    print(f"| while the attacker is served | {s['under'].row()} |")


# ------------------------------------------------------------------------------------------ load
async def _load(url: str, queries: list[str], clients: int) -> tuple[list[Any], list[float]]:
    import httpx

    sem = asyncio.Semaphore(clients)
    lat: list[float] = [0.0] * len(queries)
    out: list[Any] = [None] * len(queries)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

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


def section_http(n: int, clients: int) -> None:
    retriever, srv = musique_server()
    qs = musique_questions()[:n]
    t = time.perf_counter()
    expected = [r.doc_ids for r in retriever.retrieve(qs)]  # the reference: one in-process batch
    inproc_s = time.perf_counter() - t
    t = time.perf_counter()
    out, lat = asyncio.run(_load(srv.url, qs, clients))
    wall = time.perf_counter() - t
    ok = [o for o in out if isinstance(o, dict)]
    same = sum(
        isinstance(o, dict) and [d["doc_id"] for d in o["result"][0]] == e
        for o, e in zip(out, expected, strict=True)
    )
    print(f"\n### HTTP load: {len(qs):,} requests (1 query each), {clients} concurrent clients, 127.0.0.1\n")
    print(
        "| answered 200 | equal to in-process | p50 ms | p95 ms | max ms | wall s | req/s | in-process s "
        "| wall / in-process |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {len(ok):,} | {same:,} | {pct(lat, 50):.0f} | {pct(lat, 95):.0f} | {max(lat):.0f} | "
        f"{wall:.1f} | {len(qs) / wall:.1f} | {inproc_s:.1f} | {wall / inproc_s:.2f} |"
    )
