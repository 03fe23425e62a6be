"""A minimal Chrome DevTools Protocol client over aiohttp websockets, for page tests.

Just enough to drive headless Chromium like a user: navigate, wait for load,
evaluate an expression, click, and take a screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One browser tab driven through its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self._ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self._pending:
                self._pending.pop(data["id"]).set_result(data)
            elif "method" in data:
                await self._events.put(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        await self._ws.send_json({"id": call_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 20)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    async def wait_for(self, method: str, within: float = 20) -> dict[str, Any]:
        async with asyncio.timeout(within):
            while True:
                event = await self._events.get()
                if event["method"] == method:
                    return event

    def drain(self) -> None:
        while not self._events.empty():
            self._events.get_nowait()

    async def goto(self, url: str) -> None:
        self.drain()
        await self.send("Page.navigate", url=url)
        await self.wait_for("Page.loadEventFired")

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(str(result["exceptionDetails"]))
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._ws.close()


@contextlib.asynccontextmanager
async def browser_page(binary: str, profile: Path) -> AsyncIterator[Page]:
    """Start headless Chromium with a private profile and yield its first tab."""
    process = await asyncio.create_subprocess_exec(
        binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-dev-shm-usage", "--remote-debugging-port=0", "--window-size=1280,900",
        f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    drain: asyncio.Task[None] | None = None
    try:
        assert process.stderr is not None
        async with asyncio.timeout(30):
            browser_ws = await _listening_url(process.stderr)
        # keep reading so a chatty browser never blocks on a full pipe
        drain = asyncio.create_task(_drain(process.stderr))
        http_base = browser_ws.split("/devtools/")[0].replace("ws://", "http://")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{http_base}/json/list") as response:
                targets = await response.json()
            target = next(t for t in targets if t["type"] == "page")
            ws = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
            page = Page(ws)
            try:
                await page.send("Page.enable")
                await page.send("Runtime.enable")
                yield page
            finally:
                await page.close()
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        if drain is not None:
            drain.cancel()


async def _listening_url(stream: asyncio.StreamReader) -> str:
    while line := await stream.readline():
        match = _LISTENING.search(line.decode(errors="replace"))
        if match:
            return match.group(1)
    raise RuntimeError("chromium exited before opening its DevTools port")


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass
