"""Clients that hold the HTTP retriever without reading, and clients that send the longest queries.

Two abuse scenarios against the MuSiQue KB served as ``serve()`` serves it
(:class:`benchmarks.serving.stress_musique.Server`), each while a normal client sends a 1-query
request every 0.5 s and records its latency:

* ``readers``: ``--readers`` raw sockets (receive buffer 4 KB) each ask for 512 queries × topk 100
  and never read; reports how long the server kept them open and its peak RSS growth;
* ``long``: ``--long-clients`` clients loop 1-query requests of a 131,072-character query.

Prints markdown rows. Loopback only.

    GTA_VERL_CACHE=/tmp/x nice -n 10 .venv/bin/python -m benchmarks.serving.abuse_serving [--window 45]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from typing import Any

import numpy as np

from benchmarks.serving.stress_musique import musique_questions, musique_server, stop_musique_server


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _normal_client(url: str, query: str, window: float, out: list[float], stop: threading.Event) -> None:
    import httpx

    t_end = time.monotonic() + window
    while time.monotonic() < t_end and not stop.is_set():
        t = time.monotonic()
        try:
            ok = httpx.post(url + "/retrieve", json={"queries": [query]}, timeout=60).status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append((time.monotonic() - t) * 1000 if ok else float("inf"))
        time.sleep(0.5)


def _row(name: str, lat: list[float], extra: str) -> str:
    ok = [x for x in lat if np.isfinite(x)]
    p50, p95 = (np.percentile(ok, 50), np.percentile(ok, 95)) if ok else (float("nan"),) * 2
    worst = max(ok) if ok else float("nan")
    return f"| {name} | {len(ok)} of {len(lat)} | {p50:.0f} | {p95:.0f} | {worst:.0f} | {extra} |"


def readers(n: int, window: float) -> str:
    """``n`` non-reading clients of a 512 × topk-100 answer while the normal client probes."""
    _retriever, srv = musique_server()
    qs = musique_questions()
    body = json.dumps({"queries": qs[:512], "topk": 100}).encode()
    head = (
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    rss0, peak = _rss_mb(), 0.0
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        s.sendall(head + body)
        socks.append(s)
    lat: list[float] = []
    stop = threading.Event()
    probe = threading.Thread(target=_normal_client, args=(srv.url, qs[0], window, lat, stop))
    t0 = time.monotonic()
    probe.start()
    open_until = None
    while probe.is_alive():
        peak = max(peak, _rss_mb() - rss0)
        # the normal client's own connection is one; the readers are the rest
        if open_until is None and len(srv.server.server_state.connections) <= 1 and time.monotonic() - t0 > 2:
            open_until = time.monotonic() - t0
        time.sleep(0.2)
    for s in socks:
        s.close()
    held = f"{open_until:.0f} s" if open_until is not None else f"> {window:.0f} s"
    return _row(
        f"{n} non-reading clients (512 × topk 100)", lat, f"readers held open {held}, RSS +{peak:.0f} MB"
    )


async def _loop_long(url: str, query: str, stop: threading.Event, sent: list[int]) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=120) as client:
        while not stop.is_set():
            try:
                await client.post(url + "/retrieve", json={"queries": [query]})
                sent[0] += 1
            except httpx.HTTPError:
                await asyncio.sleep(0.1)


def long_queries(n: int, window: float) -> str:
    """``n`` clients looping a 131,072-character query while the normal client probes."""
    _retriever, srv = musique_server()
    qs = musique_questions()
    text = " ".join(qs)
    long_q = (text * (131_072 // len(text) + 1))[:131_072]
    stop, sent = threading.Event(), [0]

    def attackers() -> None:
        async def run() -> None:
            await asyncio.gather(*(_loop_long(srv.url, long_q, stop, sent) for _ in range(n)))

        asyncio.run(run())

    th = threading.Thread(target=attackers, daemon=True)
    th.start()
    time.sleep(2.0)
    lat: list[float] = []
    _normal_client(srv.url, qs[0], window, lat, threading.Event())
    stop.set()
    th.join(130)
    return _row(f"{n} clients looping a 131,072-character query", lat, f"{sent[0]} long requests answered")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--scenarios", default="readers,long")
    p.add_argument("--readers", type=int, default=6)
    p.add_argument("--long-clients", type=int, default=8)
    p.add_argument("--window", type=float, default=45.0, help="seconds the normal client probes")
    args = p.parse_args()
    rows: list[Any] = []
    try:
        for name in args.scenarios.split(","):
            if name == "readers":
                rows.append(readers(args.readers, args.window))
            elif name == "long":
                rows.append(long_queries(args.long_clients, args.window))
            print(rows[-1], flush=True)
    finally:
        stop_musique_server()
    print("\n| scenario | normal 1-query requests answered | p50 ms | p95 ms | max ms | notes |")
    print("|---|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
