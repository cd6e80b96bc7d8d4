"""Ray actor handles stood in for in-process: what verl's agent-loop clients call, without a cluster."""

from __future__ import annotations

from typing import Any


class Remote:
    """``handle.method.remote(...)`` of a Ray actor, run in-process."""

    def __init__(self, fn: Any) -> None:
        self.remote = fn


class OneServerLoadBalancer:
    """verl's load-balancer handle that sends every request to one ``server`` (``"server-0"``)."""

    def __init__(self, server: Any) -> None:
        async def no_fields():
            return []

        async def acquire_server(request_id, **kw):
            return "server-0", server

        self.require_acquire_fields = Remote(no_fields)
        self.require_release_fields = Remote(no_fields)
        self.acquire_server = Remote(acquire_server)
        self.release_server = Remote(lambda **kw: None)  # fire-and-forget in verl
