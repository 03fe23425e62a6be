"""A real local HTTP evaluator service on 127.0.0.1 for the verify tests.

A module of its own, not conftest: tests import these classes by name, and
``from conftest import`` resolves to whichever directory's conftest was
imported first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web
from support.http_server import LoopbackServer


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    stream_bytes: int = 0  # when set, stream this many bytes chunked instead of ``body``
    first: list[bytes] = field(default_factory=list)  # served one a request before ``body``


class EvaluatorServer(LoopbackServer):
    """Serves whatever a test puts in ``routes`` and records every path it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, path: str, body: bytes, status: int = 200, **kw: object) -> None:
        self.routes[path] = Route(status=status, body=body, **kw)  # type: ignore[arg-type]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(request.path_qs)
        route = self.routes.get(request.path_qs) or self.routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="no such thing")
        if route.delay:
            await asyncio.sleep(route.delay)
        if route.stream_bytes:
            resp = web.StreamResponse(status=route.status)
            await resp.prepare(request)
            chunk = b"x" * 65536
            sent = 0
            try:
                while sent < route.stream_bytes:
                    await resp.write(chunk)
                    sent += len(chunk)
            except (ConnectionError, RuntimeError):
                pass  # the client hung up, as it should once over its limit
            return resp
        served = route.first.pop(0) if route.first else route.body
        return web.Response(status=route.status, body=served, headers=route.headers)
