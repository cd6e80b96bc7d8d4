"""Read deadlines, a connection cap and rate-limited logging for the HTTP retriever.

uvicorn's ``timeout_keep_alive`` only runs after a response, so a client that
connects and sends nothing, half of its headers or half of a body holds a socket
(and a file descriptor) forever; its ``limit_concurrency`` counts idle
connections too and answers 503 to the *normal* client's request, so it would
turn a lock-out into a refusal, not fix it.
:class:`~gta_verl.retrieval.serving.http_protocol.LimitedH11Protocol` adds:

* a header deadline: complete request headers within ``header_timeout_s`` of the
  connection (or of the first byte of the next request on a kept-alive one),
  else the connection is closed;
* a body deadline: the whole body within ``body_timeout_s`` of its headers, else
  408 and close;
* a write deadline: a response whose client reads nothing for ``write_timeout_s``
  while the send buffer is full is dropped and the connection reset (``SO_LINGER`` 0, so the kernel
  drops what it had queued for that client too; the app sends bodies in slices, so at most one slice
  waits above the buffer's high-water mark);
* a graceful close: a response that ends the connection while the request body is
  still arriving is followed by a FIN, and the rest of the body is read and dropped
  for up to :data:`DRAIN_S` (or :data:`DRAIN_BYTES`), so the client can read the answer;
* a connection cap: past ``max_connections`` one connection is closed: one idle for
  a second or more, else the one whose request body arrives slowest (408), else the
  oldest without a request, else the new one; so neither idle sockets nor trickled
  bodies lock out a client that sends its request at once.

:class:`~gta_verl.retrieval.serving.http_protocol.LimitedServer` keeps the kernel's listen
queue long while asyncio accepts few sockets per loop tick, and :func:`fd_capped`
lowers the cap to what ``ulimit -n`` leaves. :class:`RateLimitFilter` keeps a flood
of identical warnings to one line per interval: out of descriptors, asyncio's accept
loop logs ``socket.accept() out of system resource`` with a traceback up to
``backlog`` times per loop tick (about 3 MB/s measured, docs/benchmarks/http_lockout.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
WRITE_TIMEOUT_S = 30.0
# After answering a request whose body is still arriving (413, 400), the server reads and drops the rest
# for up to this long / this many bytes before closing: closing with unread bytes makes the kernel send a
# reset, and a client still writing its body then fails (BrokenPipeError) without reading why.
DRAIN_S = 2.0
DRAIN_BYTES = 4 << 20
MAX_CONNECTIONS = 4096
# uvicorn passes one number both to listen() and to asyncio as the sockets accepted per loop tick;
# accepted sockets hold descriptors before the cap can close them, so the batch is kept small
# (uvicorn's 2048 alone exceeds a 1024-descriptor limit) and the kernel queue is set apart.
ACCEPT_BACKLOG = 128
LISTEN_QUEUE = 2048  # uvicorn's default: a burst of connections waits here instead of in SYN retries
ACCEPT_BATCHES_IN_FLIGHT = 4  # accepted at tick k, connection_made at k+2, descriptor freed at k+3
FD_RESERVE = 64  # descriptors kept free for the KB, logs and the interpreter
LOG_INTERVAL_S = 10.0
RATE_LIMITED_LOGGERS = ("asyncio", "uvicorn.error", __name__)


@dataclasses.dataclass(frozen=True)
class Limits:
    """Deadlines (seconds) for a request's headers and body and for a stalled response, and the cap
    on open connections."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    write_timeout_s: float = WRITE_TIMEOUT_S


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux: assume a fresh interpreter's few dozen
        return 32


def fd_capped(max_connections: int, backlog: int = ACCEPT_BACKLOG) -> int:
    """``max_connections`` lowered so that connections never exhaust this process's descriptors.

    Up to :data:`ACCEPT_BATCHES_IN_FLIGHT` accept batches of ``backlog`` sockets can be
    open before the cap closes them, so those are kept free too, with :data:`FD_RESERVE`
    and the descriptors open now.

    Args:
        max_connections: the cap asked for.
        backlog: the backlog given to uvicorn (asyncio's accept batch).

    Returns:
        The cap to use, at least 1.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    room = soft - _open_fds() - ACCEPT_BATCHES_IN_FLIGHT * backlog - FD_RESERVE
    return max(1, min(max_connections, room))


class RateLimitFilter(logging.Filter):
    """Let one of a run of identical WARNING+ records through per ``interval_s``; count the rest.

    Records are identical when logger, level, the first line of the unformatted
    message and the exception type agree (arguments such as client addresses
    differ between repeats). The first record after an interval carries
    ``[N identical messages suppressed in the last S s]``. INFO and below pass.

    Args:
        interval_s: the window in seconds.
        clock: monotonic time source (tests pass a fake one).
        max_keys: bound on the remembered message kinds.
    """

    def __init__(
        self,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1024,
    ) -> None:
        super().__init__()
        self.interval_s, self.clock, self.max_keys = interval_s, clock, max_keys
        self._seen: dict[tuple, list] = {}  # key -> [window start, suppressed count]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        key = (record.name, record.levelno, str(record.msg).split("\n", 1)[0], exc)
        now, state = self.clock(), self._seen.get(key)
        if state is not None and now - state[0] < self.interval_s:
            state[1] += 1
            return False
        if state is not None and state[1]:
            record.msg = (
                f"{record.msg} [{state[1]} identical messages suppressed in the last {now - state[0]:.0f} s]"
            )
        self._seen.pop(key, None)
        self._seen[key] = [now, 0]
        if len(self._seen) > self.max_keys:  # drop the oldest kind; its suppressed count is lost
            self._seen.pop(next(iter(self._seen)))
        return True


def install_log_filter(interval_s: float = LOG_INTERVAL_S) -> RateLimitFilter:
    """Attach one :class:`RateLimitFilter` to the server's warning loggers (once; returns it).

    Logger filters only see records logged on that logger, hence one per logger name
    rather than one on a parent. Call after ``uvicorn.Config()``, which configures logging.
    """
    found = [
        f
        for name in RATE_LIMITED_LOGGERS
        for f in logging.getLogger(name).filters
        if isinstance(f, RateLimitFilter)
    ]
    flt = found[0] if found else RateLimitFilter(interval_s)
    for name in RATE_LIMITED_LOGGERS:
        if flt not in logging.getLogger(name).filters:
            logging.getLogger(name).addFilter(flt)
    return flt
