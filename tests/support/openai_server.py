"""A real local HTTP server speaking the OpenAI chat-completions protocol, with canned replies.

Tests use it to exercise LLM backends end to end (real socket, real client)
without a model::

    with openai_stub_server(["first reply", "second reply"]) as (base_url, requests):
        client = ChatClient(base_url, "stub-model")
        ...

``replies`` is a list consumed in order (the last one repeats), or a callable
``reply(request_json) -> str | int``; an ``int`` reply is sent as that HTTP error status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = str | int


def _make_handler(next_reply: Callable[[dict[str, Any]], Reply], log: list[dict[str, Any]]):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep pytest output clean
            return

        def do_POST(self) -> None:  # http.server API
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            log.append(body)
            if not self.path.endswith("/chat/completions"):
                self._send(404, {"error": f"unknown path {self.path}"})
                return
            reply = next_reply(body)
            if isinstance(reply, int):
                self._send(reply, {"error": {"message": f"stub error {reply}"}})
                return
            self._send(
                200,
                {
                    "id": f"stub-{len(log)}",
                    "object": "chat.completion",
                    "model": body.get("model", "stub"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                },
            )

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def openai_stub_server(
    replies: list[Reply] | Callable[[dict[str, Any]], Reply],
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve canned chat completions on 127.0.0.1:<free port>.

    Yields:
        ``(base_url, requests)``: the ``.../v1`` base URL and the list of received request bodies.
    """
    lock = threading.Lock()
    queue = list(replies) if not callable(replies) else []

    def next_reply(body: dict[str, Any]) -> Reply:
        if callable(replies):
            return replies(body)
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    log: list[dict[str, Any]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(next_reply, log))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1", log
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
