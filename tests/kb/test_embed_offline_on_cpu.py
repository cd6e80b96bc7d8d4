"""Loading a KB never downloads.

The check runs in a fresh interpreter whose Hugging Face endpoint is a loopback
socket counting connections, with offline mode NOT set: any download attempt
reaches that socket. A KB whose manifest names an unknown encoder must give a
clear ``EmbedderUnavailable`` and make zero connections.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from gta_verl.cli import build_parser

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import dataclasses, sys
    from gta_verl.kb.store import save_kb
    from gta_verl.testing.toy_kb import HashEmbedder, make_toy_kb
    from gta_verl.retrieval.backends import open_retriever

    kb = dataclasses.replace(make_toy_kb(HashEmbedder()), embedder_name="some-org/unknown-encoder")
    save_kb(kb, sys.argv[1])
    try:
        open_retriever(sys.argv[1])
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
    else:
        print("LOADED")
""")


class CountingServer:
    """A loopback TCP socket that accepts and counts connections (and answers nothing)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def test_manifest_naming_unknown_embedder_never_reaches_the_network(tmp_path: Path) -> None:
    hub = CountingServer()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(
        HF_ENDPOINT=f"http://127.0.0.1:{hub.port}",
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_ETAG_TIMEOUT="2",
        HF_HUB_DOWNLOAD_TIMEOUT="2",
        PYTHONPATH=str(REPO),
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(tmp_path / "kb")],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        hub.close()
    out = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
    assert hub.connections == 0, f"{hub.connections} connection(s) to the model hub: {out}"
    assert out.startswith("EmbedderUnavailable: embedder 'some-org/unknown-encoder'"), out
    assert "--allow-download" in out


def test_unknown_embedder_in_process_is_clear_error() -> None:
    from gta_verl.kb.embed import EmbedderUnavailable, load_embedder

    with pytest.raises(EmbedderUnavailable, match=r"'no-such-org/no-such-model' .* pass --allow-download"):
        load_embedder("no-such-org/no-such-model")


def test_cli_flags_default_to_no_download() -> None:
    parser = build_parser()
    for argv in (
        ["retriever", "serve", "--kb", "k"],
        ["eval-retrieval", "--kb", "k", "--qa", "q"],
        ["kb", "build", "--corpus", "c", "--openie", "spacy", "--out", "o"],
        ["kb", "add", "k", "--corpus", "c"],
    ):
        assert parser.parse_args(argv).allow_download is False
        assert parser.parse_args([*argv, "--allow-download"]).allow_download is True
