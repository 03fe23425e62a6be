"""Running the API (in the daemon's event loop or on a thread of its own), and stopping it.

The daemon owns signals and shutdown order, so the runner never installs
signal handlers of its own; the caller awaits ``runner.cleanup()`` when it
stops, which also closes the API's read connections.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from keeper.domain.text import clipped
from keeper.obs.logging import get_logger

__all__ = ["ApiThread", "bound_port", "start_api"]

_log = get_logger(__name__)

# Seconds an in-flight request may take to finish once shutdown starts;
# API reads are short, and a scrape should not hold up a SIGTERM for long.
_SHUTDOWN_TIMEOUT = 5.0


class _ClientProtocolErrors(logging.Filter):
    """aiohttp logs a request its parser refused (a request line past 8,190 bytes, bytes
    that are not HTTP) as an ERROR with a traceback, before any route or middleware sees
    it: the client's fault, not the daemon's, and any scanner could fill the error log
    with them. Such a record becomes one ``api_bad_http_request`` warning naming what was
    wrong; every other record of the server's logger passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        _log.warning(
            "api_bad_http_request",
            error=type(exc).__name__,
            status=exc.code,
            detail=clipped(exc.message, 200),
        )
        return False


_CLIENT_PROTOCOL_ERRORS = _ClientProtocolErrors()


async def start_api(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve ``app`` on host:port (port 0 picks a free one); return the runner to stop it."""
    logging.getLogger("aiohttp.server").addFilter(_CLIENT_PROTOCOL_ERRORS)  # once: a set
    # no access log: a line per scrape or API call would drown the daemon's own lines
    runner = web.AppRunner(
        app, handle_signals=False, shutdown_timeout=_SHUTDOWN_TIMEOUT, access_log=None
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port actually listened on (useful after asking for port 0)."""
    address = runner.addresses[0]
    return int(address[1])


class ApiThread:
    """The API on its own thread and event loop.

    The indexer commits batches synchronously on the daemon's loop (one
    SQLite transaction may take a noticeable fraction of a second during a
    backfill); API requests served on that same loop would wait for it. On
    its own loop the API answers while the indexer writes: it only reads,
    through its own read-only connections, and the metrics registry and the
    status/readiness callables are safe to call from another thread.
    """

    def __init__(self, make_app: Callable[[], web.Application], host: str, port: int) -> None:
        self._make_app = make_app
        self._host = host
        self._port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.port = port

    def start(self, timeout: float = 30.0) -> None:
        """Start serving; raises what binding or building the app raised (e.g. port in use)."""
        self._thread = threading.Thread(target=self._serve, name="keeper-api", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError(f"the API did not start within {timeout}s")
        if self._error is not None:
            raise self._error

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._runner = loop.run_until_complete(
                start_api(self._make_app(), self._host, self._port)
            )
            self.port = bound_port(self._runner)
        except BaseException as exc:  # handed to start(), which raises it in the caller
            self._error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

    def stop(self, timeout: float = _SHUTDOWN_TIMEOUT + 5.0) -> None:
        """Finish in-flight requests (bounded), close the API's connections, end the thread."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
