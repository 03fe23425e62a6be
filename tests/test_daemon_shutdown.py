"""Stopping the daemon's loops: a loop that fails while stopping is logged, not swallowed."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from keeper.daemon import stop_loops


async def test_a_loop_failing_while_stopping_is_logged() -> None:
    """One loop ends cleanly, one raises on its way out, one ignores the grace and is cancelled."""
    stop = asyncio.Event()

    async def clean() -> None:
        await stop.wait()

    async def fails() -> None:
        await stop.wait()
        raise RuntimeError("flush failed")

    async def stubborn() -> None:
        await asyncio.sleep(3600)

    tasks = [
        asyncio.create_task(clean(), name="index"),
        asyncio.create_task(fails(), name="keep"),
        asyncio.create_task(stubborn(), name="verify"),
    ]
    stop.set()
    with capture_logs() as logs:
        await stop_loops(tasks, grace=0.2)
    failures = [e for e in logs if e["event"] == "loop_failed_during_shutdown"]
    assert [(e["loop"], e["error"]) for e in failures] == [("keep", "RuntimeError('flush failed')")]
    assert failures[0]["log_level"] == "error"
    assert tasks[2].cancelled() and all(t.done() for t in tasks)
