"""Running the API inside the daemon's event loop, and stopping it cleanly.

The daemon owns signals and shutdown order, so the runner never installs
signal handlers of its own; the caller awaits ``runner.cleanup()`` when it
stops, which also closes the API's read connections.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["bound_port", "start_api"]

# Seconds an in-flight request may take to finish once shutdown starts;
# API reads are short, and a scrape should not hold up a SIGTERM for long.
_SHUTDOWN_TIMEOUT = 5.0


async def start_api(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve ``app`` on host:port (port 0 picks a free one); return the runner to stop it."""
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=_SHUTDOWN_TIMEOUT)
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
