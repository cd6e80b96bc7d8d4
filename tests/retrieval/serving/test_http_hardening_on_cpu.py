"""Hostile input to the HTTP retriever: refused with 4xx, never a 500.

Loopback only, one uvicorn server per module, bounded bodies (tens of KB).
"""

from __future__ import annotations

import inspect
import json
import socket

import httpx
import pytest

from gta_verl.retrieval.retriever import GraphRetriever
from tests.retrieval.serving.loopback import free_port, serving, uvicorn_server

BODY_LIMIT = 10_000


@pytest.fixture(scope="module")
def url(retriever: GraphRetriever):
    from gta_verl.retrieval.serving.http import create_app

    app = create_app(retriever, max_wait_ms=2, max_body_bytes=BODY_LIMIT, max_request_chars=2_000)
    port = free_port()
    with serving(uvicorn_server(app, port), port) as base:
        yield base


def _post(url: str, content: bytes | object, **kw) -> httpx.Response:
    return httpx.post(
        url + "/retrieve", content=content, timeout=30, headers={"content-type": "application/json"}, **kw
    )


def test_chunked_body_over_limit_is_413(url: str) -> None:
    # A valid request (one long query, truncated by the retriever) of ~40 KB sent chunked:
    # no Content-Length, so only counting the bytes as they arrive can refuse it.
    body = json.dumps({"queries": ["capital " * 5_000]}).encode()
    assert len(body) > 4 * BODY_LIMIT

    def chunks():
        for i in range(0, len(body), 1_000):
            yield body[i : i + 1_000]

    resp = _post(url, chunks())
    assert resp.status_code == 413 and str(BODY_LIMIT) in resp.json()["detail"]
    small = json.dumps({"queries": ["capital of Japan"]}).encode()
    ok = _post(url, iter([small[:10], small[10:]]))  # chunked but small: served
    assert ok.status_code == 200 and ok.json()["result"][0]


def test_declared_length_over_limit_is_413(url: str) -> None:
    resp = _post(url, json.dumps({"queries": ["x" * (BODY_LIMIT + 10)]}).encode())
    assert resp.status_code == 413


@pytest.mark.parametrize(
    "raw",
    [
        b'{"queries": ["\\ud800 capital"]}',  # lone high surrogate escape
        b'{"queries": ["ok", "\\udfff"]}',  # lone low surrogate escape
        b'{"queries": ["caf\xff"]}',  # a raw byte that is not UTF-8
        b'{"queries": ["\xed\xa0\x80"]}',  # UTF-8-encoded surrogate (invalid UTF-8)
    ],
)
def test_invalid_unicode_is_422_and_server_keeps_serving(url: str, raw: bytes) -> None:
    resp = _post(url, raw)
    assert resp.status_code == 422, resp.text
    assert "UTF-8" in resp.text
    assert _post(url, b'{"queries": ["capital of France"]}').status_code == 200


def test_valid_surrogate_pair_is_text(url: str) -> None:
    resp = _post(url, b'{"queries": ["capital \\ud83d\\ude00 of Japan"]}')
    assert resp.status_code == 200 and resp.json()["meta"][0]["query"] == "capital \U0001f600 of Japan"


@pytest.mark.parametrize("topk", ['"3"', "true", "3.0", "[3]"])
def test_topk_types_are_strict(url: str, topk: str) -> None:
    resp = _post(url, f'{{"queries": ["capital of Japan"], "topk": {topk}}}'.encode())
    assert resp.status_code == 422, f"topk={topk}: {resp.status_code}"


def test_queries_must_be_strings(url: str) -> None:
    assert _post(url, b'{"queries": [3]}').status_code == 422
    assert _post(url, b'{"queries": "capital of Japan"}').status_code == 422
    assert _post(url, b'{"queries": ["a"], "return_scores": "yes"}').status_code == 422


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "\u0000",
        "\u0000 \u0000\t",
        "\u200b\u200c\u200d\ufeff",  # zero-width space/joiners, BOM
        "\u202e\u2066\u200f\u061c",  # bidi override/isolate/marks
        "\x01\x1f\x7f\x85\x9f",
    ],
)  # C0 / C1 controls
def test_empty_query_same_error_with_and_without_topk(url: str, bad: str, retriever: GraphRetriever) -> None:
    errors = []
    for extra in ({}, {"topk": 3}):
        resp = httpx.post(url + "/retrieve", json={"queries": ["capital of Japan", bad], **extra}, timeout=30)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["result"][1] == [] and body["meta"][0]["error"] is None
        errors.append(body["meta"][1]["error"])
        expected = (
            retriever.rank(["capital of Japan"], 3) if extra else retriever.retrieve(["capital of Japan"])
        )
        assert [d["doc_id"] for d in body["result"][0]] == expected[0].doc_ids
    assert errors[0] == errors[1] and "empty" in errors[0]


def test_head_health_is_200_without_a_body(url: str) -> None:
    resp = httpx.head(url + "/health", timeout=5)
    assert resp.status_code == 200 and resp.content == b""


def test_request_character_cap_is_413(url: str) -> None:
    # 3 queries of 700 characters = 2,100 > the app's 2,000-character cap
    resp = httpx.post(url + "/retrieve", json={"queries": ["capital " * 87 + "abcd"] * 3}, timeout=30)
    assert resp.status_code == 413 and "2000" in resp.json()["detail"]
    assert (
        httpx.post(url + "/retrieve", json={"queries": ["capital " * 87] * 2}, timeout=30).status_code == 200
    )


def test_binds_loopback_by_default_and_says_so() -> None:
    from gta_verl.cli import build_parser
    from gta_verl.retrieval.serving.http import bind_message, serve

    assert inspect.signature(serve).parameters["host"].default == "127.0.0.1"
    args = build_parser().parse_args(["retriever", "serve", "--kb", "x"])
    assert args.host == "127.0.0.1" and args.allow_download is False
    assert bind_message("127.0.0.1", 8000) == (
        "gta-verl retriever on http://127.0.0.1:8000 (loopback only; --host sets the bind address)"
    )
    assert "REACHABLE FROM OTHER MACHINES" in bind_message("0.0.0.0", 8000)


def _raw(url: str, request: bytes) -> bytes:
    """Send raw bytes on one connection; return everything the server sends before it closes (≤ 5 s)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(request)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


def test_content_length_with_chunked_is_refused_and_closed(url: str) -> None:
    """RFC 9112 §6.1 — both framing headers: refuse and close (request smuggling shape)."""
    body = b'{"queries": ["capital of Japan"]}'
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    req = (
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(chunked)).encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    )
    resp = _raw(url, req)
    head = resp.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 400") and b"connection: close" in head, resp[:300]


def test_duplicate_json_keys_are_refused(url: str) -> None:
    resp = _post(url, b'{"queries": ["capital of Japan"], "queries": ["capital of France"]}')
    assert resp.status_code == 422 and "duplicate JSON key 'queries'" in resp.json()["detail"]
    nested = _post(url, b'{"queries": ["a"], "options": {"k": 1, "k": 2}}')
    assert nested.status_code == 422
    assert _post(url, b'{"queries": ["capital of Japan"]}').status_code == 200
