"""uvicorn's h11 protocol with read deadlines and a connection cap (the why: :mod:`.http_limits`).

Kept apart from :mod:`gta_verl.retrieval.serving.http_limits` so that the CLI can read the
defaults without importing uvicorn and h11 (~0.1 s on every command).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import socket
import struct
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from gta_verl.retrieval.serving.http_limits import (
    ACCEPT_BACKLOG,
    DRAIN_BYTES,
    DRAIN_S,
    LISTEN_QUEUE,
    Limits,
    fd_capped,
    install_log_filter,
)

# A connection this young without a request may be a client whose request is not read yet: it is
# evicted only after idle ones and slow request bodies.
IDLE_GRACE_S = 1.0

# The rate-limited logger of http_limits (RATE_LIMITED_LOGGERS), so these warnings are rate-limited too.
logger = logging.getLogger("gta_verl.retrieval.serving.http_limits")


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines and a connection cap (see the module docstring).

    Use :func:`limited_protocol` to get a subclass bound to one server's :class:`Limits`.
    """

    limits: Limits = Limits()
    # Connections not inside a request, oldest first (dict order): eviction candidates of one server.
    waiting: dict[LimitedH11Protocol, float] = {}  # -> loop time it began waiting
    # Connections whose request body is still arriving: evicted, slowest first, when no idle one is left.
    receiving: dict[LimitedH11Protocol, None] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: Any = None
        self._body_timer: Any = None
        self._body_since = 0.0
        self._body_bytes = 0
        self._write_timer: Any = None
        self._raw: Any = None
        self._draining = False
        self._drained = 0
        self._drain_timer: Any = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._raw = transport
        self.transport = _DrainOnClose(transport, self)  # type: ignore[assignment]
        self.waiting[self] = self.loop.time()
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_deadline)
        self._enforce_cap()

    def data_received(self, data: bytes) -> None:
        if self._draining:
            self._drained += len(data)
            if self._drained > DRAIN_BYTES:
                self._raw.close()
            return
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            # The first bytes of a new request on a kept-alive connection: its headers get a deadline too.
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_deadline)
        if self in self.receiving:
            self._body_bytes += len(data)
        super().data_received(data)
        self._track_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track_state()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.waiting.pop(self, None)
            self.waiting[self] = self.loop.time()  # idle again: now the newest eviction candidate
            if self._header_timer is None and self.conn.trailing_data[0]:
                # Bytes of a pipelined next request already arrived with the last one: its deadline runs
                # from now, else only uvicorn's keep-alive timer (75 s) would bound them.
                self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_deadline)

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting.pop(self, None)
        self.receiving.pop(self, None)
        _cancel(self._header_timer)
        _cancel(self._body_timer)
        _cancel(self._write_timer)
        _cancel(self._drain_timer)
        self._header_timer = self._body_timer = self._write_timer = self._drain_timer = None
        super().connection_lost(exc)

    def eof_received(self) -> None:
        if self._draining:  # the client sent all it had: nothing left to drain
            self._raw.close()

    def close_gracefully(self) -> None:
        """Close; if the request body is still arriving, send FIN after the answer and drain first."""
        raw = self._raw
        if self._draining or raw.is_closing() or self not in self.receiving:
            raw.close()
            return
        self._draining = True
        self.receiving.pop(self, None)
        _cancel(self._body_timer)
        self._body_timer = None
        raw.resume_reading()
        if raw.can_write_eof():
            raw.write_eof()  # after what is buffered (the answer): the client reads it, then EOF
        self._drain_timer = self.loop.call_later(DRAIN_S, raw.close)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.limits.write_timeout_s, self._write_deadline)

    def resume_writing(self) -> None:
        super().resume_writing()
        _cancel(self._write_timer)
        self._write_timer = None

    def _write_deadline(self) -> None:
        """The client read nothing for ``write_timeout_s``: drop what is buffered for it, here and in the
        kernel, and reset the connection."""
        self._write_timer = None
        if self.transport.is_closing() and not self.flow.write_paused:
            return
        logger.warning(
            "%s: client read nothing of its response for %g s (%d bytes buffered): connection aborted",
            _peer(self.client),
            self.limits.write_timeout_s,
            self.transport.get_write_buffer_size(),
        )
        self.waiting.pop(self, None)
        self.receiving.pop(self, None)
        reset_on_close(self._raw)
        self._raw.abort()  # close() would keep the buffer until it is sent, i.e. forever

    def _track_state(self) -> None:
        """Move the deadlines along h11's view of the request: headers parsed, body complete."""
        if self._draining:
            return
        their = self.conn.their_state
        if their is not h11.IDLE:
            _cancel(self._header_timer)
            self._header_timer = None
            self.waiting.pop(self, None)
        if their is h11.SEND_BODY:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_deadline)
                self._body_since, self._body_bytes = self.loop.time(), 0
                self.receiving[self] = None
        else:
            _cancel(self._body_timer)
            self._body_timer = None
            self.receiving.pop(self, None)

    def _body_rate(self, now: float) -> float:
        """Body bytes per second since the headers, not counting those that came with them; ties (a
        body that has sent nothing more) go to the oldest, as ``min`` keeps dict order."""
        return self._body_bytes / max(now - self._body_since, 1e-3)

    def _enforce_cap(self) -> None:
        """Past the cap, close one connection: see :meth:`_victim` for which."""
        if len(self.connections) <= self.limits.max_connections:
            return
        victim, why = self._victim()
        logger.warning("max_connections=%d reached: %s", self.limits.max_connections, why)
        if victim in self.receiving:
            victim._abandon_body("request body too slow while the server is at its connection cap")
        else:
            victim._close()

    def _victim(self) -> tuple[LimitedH11Protocol, str]:
        """The connection to close past the cap, and why.

        First a connection idle for :data:`IDLE_GRACE_S` (idle sockets hold a slot and cost their
        sender nothing); then the request whose body arrives slowest (trickled bodies, likewise);
        then the oldest connection that has not yet sent a request (on a busy loop a client's request
        may still be unread); then this new one. A kept-alive client whose idle connection is closed
        may see a reset on its next request; only under overload.
        """
        now = self.loop.time()
        fresh = [c for c in self.waiting if c is not self]  # oldest first
        if fresh and now - self.waiting[fresh[0]] >= IDLE_GRACE_S:
            return fresh[0], "closed the oldest connection without a request"
        if self.receiving:
            slowest = min(self.receiving, key=lambda c: c._body_rate(now))
            rate = slowest._body_rate(now)
            return slowest, f"408 to the slowest request body ({_peer(slowest.client)}, {rate:.0f} B/s)"
        if fresh:
            return fresh[0], "closed the oldest connection without a request"
        return self, "all inside a request: closed a new connection"

    def _header_deadline(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        logger.warning(
            "%s: no complete request headers within %g s, connection closed",
            _peer(self.client),
            self.limits.header_timeout_s,
        )
        self._close()

    def _body_deadline(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        logger.warning(
            "%s: request body incomplete %g s after its headers: 408, connection closed",
            _peer(self.client),
            self.limits.body_timeout_s,
        )
        self._abandon_body(f"request body incomplete after {self.limits.body_timeout_s:g} s")

    def _abandon_body(self, detail: str) -> None:
        """Answer 408 to the request whose body is still arriving, then close."""
        self.receiving.pop(self, None)
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            # The app's receive() now returns http.disconnect and its sends are dropped, so the 408
            # below is the only response and uvicorn logs no "returned without a response" error.
            cycle.disconnected = True
            cycle.message_event.set()
            self._send_408(detail)
        self._close()

    def _send_408(self, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        headers = [
            *self.server_state.default_headers,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            for event in (
                h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # h11 no longer allows a response here: closing is all that is left
            pass

    def _close(self) -> None:
        """Close now (deadlines, the cap): the slot is what is wanted back, not a drained request."""
        self.waiting.pop(self, None)
        self.receiving.pop(self, None)
        try:
            self.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:
            pass
        self._raw.close()


class _DrainOnClose:
    """The transport uvicorn's request cycle sees: ``close()`` is :meth:`LimitedH11Protocol.close_gracefully`,
    and a draining connection already counts as closing (no keep-alive, no next request)."""

    def __init__(self, raw: Any, protocol: LimitedH11Protocol) -> None:
        self._raw, self._protocol = raw, protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def close(self) -> None:
        self._protocol.close_gracefully()

    def is_closing(self) -> bool:
        return bool(self._protocol._draining or self._raw.is_closing())


def _cancel(timer: Any) -> None:
    if timer is not None:
        timer.cancel()


def reset_on_close(transport: Any) -> None:
    """Make the transport's socket close with a reset (``SO_LINGER`` on, 0 s).

    A plain close leaves what the kernel already holds to send (up to ``tcp_wmem``'s 4 MB per socket)
    queued on an orphaned socket for as long as the peer keeps its end open and reads nothing: 40
    stalled clients pinned 112 MB, outside the connection cap. A reset drops it at once.
    """
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:  # already closed by the peer: nothing left to drop
        pass


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "client"


def limited_protocol(limits: Limits) -> type[LimitedH11Protocol]:
    """A :class:`LimitedH11Protocol` subclass for one server: its limits and its own idle registry."""
    return type(
        "LimitedH11Protocol", (LimitedH11Protocol,), {"limits": limits, "waiting": {}, "receiving": {}}
    )


class LimitedServer(uvicorn.Server):
    """``uvicorn.Server`` whose kernel listen queue is :data:`LISTEN_QUEUE` long.

    uvicorn gives its ``backlog`` (here the small accept batch) to ``listen()`` as well;
    listening again on the same socket lengthens only the kernel's queue of pending
    connections, so a burst of clients waits there rather than in 1-s SYN retries.
    """

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets=sockets)
        for server in getattr(self, "servers", ()):
            for sock in server.sockets or ():
                with sock.dup() as same_socket:  # a second descriptor of the same listening socket
                    same_socket.listen(LISTEN_QUEUE)


def make_server(app: Any, host: str, port: int, limits: Limits = Limits(), **uvicorn_kwargs: Any) -> Any:
    """A ``uvicorn.Server`` serving ``app`` with the deadlines, the cap and rate-limited logs.

    Args:
        app: the ASGI app.
        host: bind address.
        port: TCP port.
        limits: deadlines and cap; the cap is lowered by :func:`fd_capped`.
        **uvicorn_kwargs: passed to ``uvicorn.Config`` (``log_level``, ``timeout_keep_alive``...).

    Returns:
        The server; ``.run()`` blocks.
    """
    cap = fd_capped(limits.max_connections)
    if cap < limits.max_connections:
        logger.warning(
            "max_connections %d lowered to %d: the open-file limit (ulimit -n) is %d",
            limits.max_connections,
            cap,
            resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        )
    protocol = limited_protocol(dataclasses.replace(limits, max_connections=cap))
    config = uvicorn.Config(
        app, host=host, port=port, http=protocol, backlog=ACCEPT_BACKLOG, **uvicorn_kwargs
    )
    install_log_filter()  # after uvicorn.Config(), which configures logging
    return LimitedServer(config)
