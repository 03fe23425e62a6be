"""A real aiohttp server on 127.0.0.1 and an ephemeral port, for the fake outside services."""

from __future__ import annotations

from aiohttp import web


class LoopbackServer:
    """Serves every GET through ``_handle``; subclasses say what the service answers."""

    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
