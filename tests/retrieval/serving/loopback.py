"""A uvicorn server on a free loopback port, in a daemon thread, for the HTTP tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx


def free_port() -> int:
    """A loopback port nothing listens on (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(server: Any, port: int) -> Iterator[str]:
    """Run ``server`` (a ``uvicorn.Server`` on ``port``) until ``/health`` answers; yield its base url."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def uvicorn_server(app: Any, port: int) -> Any:
    """A quiet ``uvicorn.Server`` for ``app`` on loopback ``port``."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
