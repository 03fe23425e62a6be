"""Tests for keeper.api.serve: the API starts on a real socket and stops cleanly."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from api_support import build_app
from api_world import World

from keeper.api.serve import bound_port, start_api


class TestServe:
    async def test_start_serve_and_stop(self, world: World) -> None:
        """A started API answers on its port; after cleanup the port is closed."""
        runner = await start_api(build_app(world), "127.0.0.1", 0)
        port = bound_port(runner)
        url = f"http://127.0.0.1:{port}/healthz"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200
            assert await response.json() == {"status": "ok"}
        await runner.cleanup()
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass

    async def test_port_in_use_raises(self, world: World) -> None:
        """Starting on a port already taken fails loudly instead of serving nothing."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            with pytest.raises(OSError):
                await start_api(build_app(world), "127.0.0.1", port)
