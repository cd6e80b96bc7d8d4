"""Idle-socket lock-out of the HTTP retriever under ``ulimit -n 1024``.

Starts the server (toy KB, HashEmbedder) in a child under ``bash -c 'ulimit -n 1024; exec ...'``,
opens ``--idle`` sockets that never send a byte, then times how long a normal client (one
``POST /retrieve``, fresh connection, 2 s timeout per try) is locked out, and how many bytes
the server logs. ``old`` is the reference without connection limits (plain ``uvicorn.run``);
``limited`` serves through ``serve_app``, with ``http_limits`` (what ``serve()`` runs).
Prints a markdown table (recorded in docs/benchmarks/http_lockout.md). Loopback only; about 40 s per mode.

    .venv/bin/python -m benchmarks.serving.http_lockout [--modes old,limited] [--idle 1100] [--nofile 1024]
        [--attack idle|in-request]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
QUERY = {"queries": ["capital of Japan"]}
# Complete headers of a request whose body never comes (1 of the 100 promised bytes): inside a request.
IN_REQUEST = (
    b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server(mode: str, port: int, header_timeout: float) -> None:
    """The child: serve the toy KB without limits (``old``) or through ``serve_app`` (``limited``); blocks."""
    from gta_verl.retrieval.backends import open_kb_retriever
    from gta_verl.retrieval.serving.http import KEEP_ALIVE_S, Limits, create_app, serve_app
    from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb

    embedder = HashEmbedder()
    app = create_app(open_kb_retriever(make_toy_kb(embedder), None, embedder))
    if mode == "old":
        import uvicorn

        uvicorn.run(app, host="127.0.0.1", port=port, log_level="info", timeout_keep_alive=KEEP_ALIVE_S)
    else:
        serve_app(app, "127.0.0.1", port, Limits(header_timeout_s=header_timeout))


def _served(url: str, timeout: float) -> bool:
    try:
        return httpx.post(url + "/retrieve", json=QUERY, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _refill(port: int, socks: list[socket.socket], stop: threading.Event) -> None:
    """Replace every socket the server answered or closed by a new in-request one, every 20 ms."""
    while not stop.wait(0.02):
        for i, s in enumerate(socks):
            s.setblocking(False)
            try:
                if s.recv(4096) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                continue
            except OSError:
                pass
            s.close()
            try:
                socks[i] = socket.create_connection(("127.0.0.1", port), timeout=2)
                socks[i].sendall(IN_REQUEST)
            except OSError:
                pass


def _closed_by_server(socks: list[socket.socket]) -> int:
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            n += 1
    return n


def _wait_served(proc: subprocess.Popen, url: str, mode: str, log_path: Path) -> None:
    """Wait (≤ 120 s) until the child server answers; its log tail in the error if it does not."""
    deadline = time.monotonic() + 120
    while not _served(url, 1.0):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{mode} server did not start: {log_path.read_text()[-2000:]}")
        time.sleep(0.2)


def _open_idle(port: int, args: argparse.Namespace, idle: list[socket.socket]) -> int:
    """Open ``--idle`` sockets into ``idle`` (each sends the partial request under ``in-request``).

    Returns:
        How many failed to connect.
    """
    failed = 0
    for _ in range(args.idle):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            idle.append(s)
            if args.attack == "in-request":
                s.sendall(IN_REQUEST)
        except OSError:
            failed += 1
    return failed


def _probe(url: str, pid: int, window: float, t0: float, peak_fds: int) -> tuple[int, float | None, int, int]:
    """A normal client's probes every 0.2 s until ``window`` s after ``t0``.

    Returns:
        (peak open fds of the server, seconds after ``t0`` of the first answer or None, probes, answered).
    """
    served_at, probes, answered = None, 0, 0
    time.sleep(0.5)  # the attacker has refilled what the burst lost
    while time.monotonic() - t0 < window:
        probes += 1
        if _served(url, 2.0):
            answered += 1
            served_at = time.monotonic() - t0 if served_at is None else served_at
        peak_fds = max(peak_fds, _fds(pid))
        time.sleep(0.2)
    return peak_fds, served_at, probes, answered


def _print_window_log(mode: str, log_path: Path, log0: int) -> None:
    """The server's first log lines after the idle sockets opened, on stderr."""
    with open(log_path, "rb") as f:
        f.seek(log0)
        window_log = f.read(4000).decode(errors="replace").splitlines()
    print(
        f"{mode}: first log lines after the idle sockets opened:",
        *window_log[:4],
        sep="\n  ",
        file=sys.stderr,
    )


def measure(mode: str, args: argparse.Namespace, log_path: Path) -> dict:
    """One mode: start the child, open the idle sockets, probe, return the row."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    child = (
        f"ulimit -n {args.nofile} && exec {sys.executable} -m benchmarks.serving.http_lockout "
        f"--server {mode} --port {port} --header-timeout {args.header_timeout}"
    )
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(["bash", "-c", child], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    idle: list[socket.socket] = []
    stop = threading.Event()
    try:
        _wait_served(proc, url, mode, log_path)
        log0, t_open = log_path.stat().st_size, time.monotonic()
        failed = _open_idle(port, args, idle)
        if args.attack == "in-request":  # an attacker reconnects at once whatever the server closes
            threading.Thread(target=_refill, args=(port, idle, stop), daemon=True).start()
        t0 = time.monotonic()  # every idle socket is open (or failed): the lock-out clock starts
        peak_fds, served_at, probes, answered = _probe(url, proc.pid, args.window, t0, _fds(proc.pid))
        log_bytes = log_path.stat().st_size - log0
        _print_window_log(mode, log_path, log0)
        return {
            "mode": mode,
            "idle": args.idle,
            "connect_failed": failed,
            "open_s": t0 - t_open,
            "locked_out_s": served_at,
            "probes": probes,
            "answered": answered,
            "window_s": args.window,
            "log_bytes": log_bytes,
            "log_bytes_per_s": log_bytes / (time.monotonic() - t_open),
            "emfile_lines": log_path.read_text(errors="replace").count("out of system resource"),
            "closed_by_server": _closed_by_server(idle),
            "peak_fds": peak_fds,
        }
    finally:
        stop.set()
        time.sleep(0.1)
        for s in idle:
            s.close()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def table(rows: list[dict]) -> str:
    """Markdown table of :func:`measure` rows."""
    out = [
        "| server | sockets (connect failed) | normal client locked out | probes answered "
        "| log bytes (per s) | EMFILE log lines | closed by server | server fds peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        locked = (
            f"{r['locked_out_s']:.2f} s"
            if r["locked_out_s"] is not None
            else f"> {r['window_s']:.0f} s (never served)"
        )
        out.append(
            f"| {r['mode']} | {r['idle']:,} ({r['connect_failed']:,}) | {locked} | "
            f"{r['answered']} of {r['probes']} | "
            f"{r['log_bytes']:,} ({r['log_bytes_per_s']:,.0f}) | {r['emfile_lines']:,} | "
            f"{r['closed_by_server']:,} | {r['peak_fds']:,} |"
        )
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--modes", default="old,limited", help="comma list of old,limited")
    p.add_argument("--idle", type=int, default=1100, help="idle sockets opened by one client")
    p.add_argument(
        "--attack",
        choices=("idle", "in-request"),
        default="idle",
        help="idle: send nothing; in-request: complete POST headers, then 1 of 100 body bytes",
    )
    p.add_argument("--nofile", type=int, default=1024, help="the server's ulimit -n")
    p.add_argument("--header-timeout", type=float, default=10.0, help="limited server's header deadline")
    p.add_argument("--window", type=float, default=15.0, help="seconds to keep the idle sockets and probe")
    p.add_argument("--server", choices=("old", "limited"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.server:
        run_server(args.server, args.port, args.header_timeout)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            rows.append(measure(mode, args, Path(tmp) / f"{mode}.log"))
            print(f"{mode}: {rows[-1]}", file=sys.stderr, flush=True)
    print(
        f"\n{args.idle:,} {args.attack} sockets, server under `ulimit -n {args.nofile}`, probe every 0.2 s "
        f"(2 s timeout) for {args.window:g} s after they are open\n"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
