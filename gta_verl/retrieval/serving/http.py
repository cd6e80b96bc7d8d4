"""HTTP shell around the retriever, compatible with Search-R1 / verl's SearchTool.

``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}``
answers ``{"result": [[{"document": {"id", "contents", "title", "text"}, "score",
"doc_id", "source"}, ...], ...], "meta": [{"query", "flags", "error", "latency_ms"}]}``.
``topk`` omitted/null → R(q) per the retriever config (Dedup(R_g ∪ R_d)); an
integer → the first ``topk`` documents of the fused ranking. Concurrent requests
are micro-batched, fairly, in slices of at most ``max_batch`` queries. ``GET
/health`` → ``{"status": "ok", ...}``.

What the server refuses (never a 500, never a dropped connection):
    * 413: a body over ``max_body_bytes`` (counted as the bytes arrive, so chunked
      transfer cannot bypass it), more than ``max_queries`` queries, or more than
      ``max_request_chars`` query characters;
    * 400: a ``Content-Length`` that is not a number;
    * 422: a body that is not UTF-8 JSON, a query that is not a valid Unicode
      string (lone surrogates from ``\\ud800`` escapes), a ``topk`` or
      ``return_scores`` of the wrong JSON type (``"3"``, ``true`` for ``topk``).
An empty, whitespace-only or NUL-only query is answered with a per-query error in
``meta`` (same with and without ``topk``); the other queries of the request are served.
It binds 127.0.0.1 unless told otherwise; it has no authentication. ``serve`` closes a
connection without complete headers after ``header_timeout_s`` (10 s), answers 408 to a body
still incomplete ``body_timeout_s`` (30 s) after its headers, aborts a connection whose client
reads nothing of its response for ``write_timeout_s`` (30 s), and keeps at most
``max_connections`` open (:mod:`gta_verl.retrieval.serving.http_limits`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

from gta_verl.data.types import RetrievalResult
from gta_verl.retrieval.serving.batching import MAX_REQUEST_CHARS, MicroBatcher, RequestTooLarge
from gta_verl.retrieval.serving.http_limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    WRITE_TIMEOUT_S,
    Limits,
)
from gta_verl.retrieval.serving.http_protocol import make_server

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000
MAX_QUERIES = 512
MAX_TOPK = 100
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# Longer than any client's keep-alive expiry (httpx: 5 s = uvicorn's default): with equal
# timeouts the server may close an idle connection just as a client reuses it (ReadError).
KEEP_ALIVE_S = 75
# An answer is rendered and sent in slices of this size, each after the client has read enough of
# the last: a client that reads nothing keeps about one slice above the send buffer's high-water
# mark (64 KiB) in the server, and the write deadline frees that.
RESPONSE_SLICE = 65_536


class RetrieveRequest(BaseModel):
    """Body of ``POST /retrieve`` (Search-R1 protocol); types are strict (no coercion)."""

    model_config = ConfigDict(strict=True)

    queries: list[StrictStr] = Field(min_length=1)
    topk: StrictInt | None = Field(default=None, ge=1, le=MAX_TOPK)
    return_scores: StrictBool = True

    @field_validator("queries")
    @classmethod
    def _valid_unicode(cls, queries: list[str]) -> list[str]:
        # JSON "\ud800" escapes decode to lone surrogates: not text, and not encodable back.
        for i, q in enumerate(queries):
            try:
                q.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"query {i} is not valid UTF-8 (lone surrogate at character {exc.start})"
                ) from None
        return queries


class BodyLimit:
    """ASGI middleware: count request-body bytes as they arrive, refuse past ``max_bytes``.

    The body is buffered here (it is at most ``max_bytes``), checked to be UTF-8
    and replayed to the app, so neither a lying ``Content-Length`` nor chunked
    transfer gets a larger body through.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        try:
            _check_headers(dict(scope.get("headers") or ()), self.max_bytes)
            body = await self._receive_body(receive)
            if body is None:
                return
            _check_body(body)
        except _Refused as exc:
            await _reply(send, exc.status, exc.detail)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _receive_body(self, receive: Any) -> bytes | None:
        """The whole body, counted as it arrives (:class:`_Refused` past ``max_bytes``); None if the
        client disconnected first."""
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _Refused(413, f"request body over {self.max_bytes} bytes")
            chunks.append(chunk)
            if not msg.get("more_body", False):
                return b"".join(chunks)


class _Refused(Exception):
    """A request :class:`BodyLimit` answers itself, with ``status`` and ``detail``, and closes."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _check_headers(headers: dict[bytes, bytes], max_bytes: int) -> None:
    """:class:`_Refused` for a request whose headers alone rule it out."""
    declared = headers.get(b"content-length")
    if declared is None:
        return
    if b"transfer-encoding" in headers:
        # RFC 9112 §6.1: the request-smuggling shape behind a proxy that trusts Content-Length; close.
        raise _Refused(400, "request has both Content-Length and Transfer-Encoding")
    try:
        too_large = int(declared) > max_bytes
    except ValueError:
        raise _Refused(400, "Content-Length is not a number") from None
    if too_large:
        raise _Refused(413, f"request body over {max_bytes} bytes")


def _check_body(body: bytes) -> None:
    """:class:`_Refused` for a complete body that is not UTF-8 or repeats a JSON key."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused(422, f"request body is not valid UTF-8 (byte {exc.start})") from None
    duplicate = _duplicate_key(body)
    if duplicate is not None:
        raise _Refused(422, f"duplicate JSON key {duplicate!r}: every key may appear once")


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise _DuplicateKey(k)
        seen[k] = v
    return seen


def _duplicate_key(body: bytes) -> str | None:
    """The first key that appears twice in one JSON object of ``body`` (json keeps the last one silently);
    None if there is none or the body is not JSON (the app reports that)."""
    try:
        json.loads(body, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        return str(exc.args[0])
    except (ValueError, RecursionError):
        return None
    return None


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _json(obj: Any) -> bytes:
    """``obj`` as starlette's ``JSONResponse`` renders it."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _payload_parts(results: list[RetrievalResult], return_scores: bool) -> Iterator[bytes]:
    """The JSON of :func:`_payload`, one query's documents (then one query's meta) at a time."""
    yield b'{"result":['
    for i, r in enumerate(results):
        yield (b"," if i else b"") + _json([_doc(h, return_scores) for h in r.hits])
    yield b'],"meta":['
    for i, r in enumerate(results):
        meta = {"query": r.query, "flags": list(r.flags), "error": r.error, "latency_ms": r.latency_ms}
        yield (b"," if i else b"") + _json(meta)
    yield b"]}"


def streamed_json(results: list[RetrievalResult], return_scores: bool) -> Any:
    """The answer as a chunked response rendered :data:`RESPONSE_SLICE` bytes at a time, each slice
    after the client has read enough of the last (uvicorn waits while the send buffer is full), so
    a client that reads nothing holds about two slices of rendered JSON, never the whole answer."""
    from fastapi.responses import StreamingResponse

    async def slices() -> AsyncIterator[bytes]:
        buf = bytearray()
        for part in _payload_parts(results, return_scores):
            buf += part
            if len(buf) >= RESPONSE_SLICE:
                yield bytes(buf)
                buf.clear()
        yield bytes(buf)

    return StreamingResponse(slices(), media_type="application/json")


def _printable(text: str) -> str:
    """``text`` with anything not encodable as UTF-8 written as a backslash escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _doc(hit: Any, return_scores: bool) -> dict[str, Any]:
    d: dict[str, Any] = {
        "document": {
            "id": hit.doc_id,
            "contents": f"{hit.title}\n{hit.text}",
            "title": hit.title,
            "text": hit.text,
        },
        "doc_id": hit.doc_id,
        "source": hit.source,
    }
    if return_scores:
        d["score"] = hit.score
    return d


def _payload(results: list[RetrievalResult], return_scores: bool) -> dict[str, Any]:
    return {
        "result": [[_doc(h, return_scores) for h in r.hits] for r in results],
        "meta": [
            {"query": r.query, "flags": list(r.flags), "error": r.error, "latency_ms": r.latency_ms}
            for r in results
        ],
    }


def create_app(
    retriever: Any,
    max_batch: int = 256,
    max_wait_ms: float = 5.0,
    max_queries: int = MAX_QUERIES,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_request_chars: int = MAX_REQUEST_CHARS,
) -> Any:
    """Build the FastAPI app serving ``retriever`` (any backend of :mod:`gta_verl.retrieval.backends`)."""
    from fastapi import FastAPI, HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app = FastAPI(title="gta-verl retriever")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Any, exc: RequestValidationError) -> Any:
        # FastAPI's default echoes the input, and a lone surrogate in it cannot be encoded (a 500).
        detail = [
            {"loc": list(e.get("loc", ())), "msg": _printable(str(e.get("msg", ""))), "type": e.get("type")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": detail}, status_code=422)

    batcher = MicroBatcher(
        retriever.retrieve,
        validate=lambda q: retriever.prepare_queries([q]),
        cost=getattr(retriever, "query_cost", len),  # a stand-in without it is costed as sent
        max_batch=max_batch,
        max_wait_ms=max_wait_ms,
        rank_fn=retriever.rank,
        max_request_chars=max_request_chars,
    )

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD-based health checks (RFC 9110 §9.3.2)
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "n_docs": retriever.kb.n_docs,
            "backend": retriever.config.backend,
            "mode": retriever.config.mode,
            **batcher.stats(),
        }

    @app.post("/retrieve")
    async def retrieve(req: RetrieveRequest) -> Any:
        if len(req.queries) > max_queries:
            raise HTTPException(status_code=413, detail=f"{len(req.queries)} queries > limit {max_queries}")
        try:
            batcher.check_size(req.queries)
        except RequestTooLarge as exc:
            raise HTTPException(status_code=413, detail=str(exc)) from exc
        results = await batcher.submit(req.queries, req.topk)
        return streamed_json(results, req.return_scores)

    return app


def bind_message(host: str, port: int) -> str:
    """The line ``serve`` prints: where it listens and who can reach it."""
    where = "loopback only" if host in LOOPBACK else "REACHABLE FROM OTHER MACHINES, no authentication"
    return f"gta-verl retriever on http://{host}:{port} ({where}; --host sets the bind address)"


def serve(
    kb_dir: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: Any = None,
    allow_download: bool = False,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    body_timeout_s: float = BODY_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
    write_timeout_s: float = WRITE_TIMEOUT_S,
    **app_kwargs: Any,
) -> None:
    """Load the KB and serve it with uvicorn (blocking); binds loopback by default.

    ``header_timeout_s``, ``body_timeout_s``, ``write_timeout_s`` and ``max_connections`` bound
    what idle, slow or non-reading connections can hold (:mod:`gta_verl.retrieval.serving.http_limits`).
    """
    import sys

    from gta_verl.retrieval.backends import open_retriever

    retriever = open_retriever(kb_dir, config, allow_download=allow_download)
    print(bind_message(host, port), file=sys.stderr, flush=True)
    serve_app(
        create_app(retriever, **app_kwargs),
        host,
        port,
        Limits(header_timeout_s, body_timeout_s, max_connections, write_timeout_s),
    )


def serve_app(app: Any, host: str, port: int, limits: Limits = Limits()) -> None:
    """Run ``app`` under uvicorn as :func:`serve` does (blocking): deadlines, cap, rate-limited logs."""
    make_server(app, host, port, limits, log_level="info", timeout_keep_alive=KEEP_ALIVE_S).run()
