"""What the serving stress sections share: the cached MuSiQue KB and questions, and the HTTP server.

:func:`musique_server` starts the MuSiQue retriever behind :class:`Server` (uvicorn in a thread on
127.0.0.1, as ``serve()`` builds it) once per run; ``benchmarks/serving/stress_serving.py``,
``benchmarks/serving/stress_actor.py``, ``benchmarks/serving/stress.py`` and
``benchmarks/serving/abuse_serving.py`` use it.
"""

from __future__ import annotations

import fcntl
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

TIMEOUT_S = 30.0  # the agent loop's default gta.retriever.timeout_s: what a caller waits


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def musique_kb_dir() -> Path:
    """The cached MuSiQue KB of the test suite (built once if absent, behind the suite's lock)."""
    from gta_verl.kb.embed import cache_root
    from gta_verl.kb.store import KBLoadError, verify_kb
    from gta_verl.testing.musique_kb import build_musique_kb, musique_kb_key

    root = cache_root() / "kb"
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"musique-{musique_kb_key()[:16]}"
    with open(root / "musique.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel pytest session may be building it
        try:
            verify_kb(out)
        except KBLoadError:
            build_musique_kb(out)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out


def musique_questions() -> list[str]:
    """Bundled MuSiQue questions, then distinct passage titles (short, realistic queries)."""
    from gta_verl.bundled import MUSIQUE_CORPUS, MUSIQUE_QA

    qs = [q["question"] for q in json.loads(MUSIQUE_QA.read_text())]
    return qs + list(dict.fromkeys(p["title"] for p in json.loads(MUSIQUE_CORPUS.read_text())))


def long_queries(n: int, chars: int) -> list[str]:
    """``n`` distinct slices of ``chars`` characters of MuSiQue passage text (entity-dense)."""
    from gta_verl.bundled import MUSIQUE_CORPUS

    text = " ".join(p["text"] for p in json.loads(MUSIQUE_CORPUS.read_text()))
    return [text[i * chars : (i + 1) * chars] for i in range(n)]


# ------------------------------------------------------------------------------------------ HTTP server
class Server:
    """uvicorn in a thread on 127.0.0.1, built as ``serve()`` builds it (deadlines, cap); stop() ends it."""

    def __init__(self, app: Any) -> None:
        import httpx

        from gta_verl.retrieval.serving.http import KEEP_ALIVE_S
        from gta_verl.retrieval.serving.http_protocol import make_server

        self.port = _free_port()
        self.server = make_server(
            app, "127.0.0.1", self.port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(400):
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("the HTTP retriever did not come up within 20 s")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


_MUSIQUE: dict[str, Any] = {}


def musique_server() -> tuple[Any, Server]:
    """(retriever, server) on the MuSiQue KB with the default limits, started once per run."""
    if not _MUSIQUE:
        from gta_verl.retrieval.backends import open_retriever
        from gta_verl.retrieval.serving.http import create_app

        retriever = open_retriever(musique_kb_dir())
        _MUSIQUE.update(retriever=retriever, server=Server(create_app(retriever)))
    return _MUSIQUE["retriever"], _MUSIQUE["server"]


def stop_musique_server() -> None:
    if _MUSIQUE:
        _MUSIQUE.pop("server").stop()
        _MUSIQUE.clear()


def started_musique_retriever() -> Any | None:
    """The retriever :func:`musique_server` started in this run, if it did."""
    return _MUSIQUE.get("retriever")
