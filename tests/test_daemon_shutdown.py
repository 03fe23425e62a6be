"""Stopping the daemon: a loop that fails while stopping is logged, not swallowed, and a
daemon cancelled by its owner ends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from support.devnet_daemon import devnet_daemon

from keeper.daemon import stop_loops
from keeper.devnet.anvil import AnvilProcess


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


async def test_a_daemon_cancelled_in_the_turn_its_wake_is_set_stops(
    anvil: AnvilProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner of ``Daemon.run`` cancels it (``keeper devnet --duration``, a test) just as
    a commit sets the wake event the keeper loop waits on: the daemon still ends.

    ``asyncio.wait_for`` on Python 3.11 returned normally there, the keeper loop went on
    (it checks only the stop flag) and the shutdown waited for it forever; a status-page
    run under load hung exactly so, silent, until its test timed out."""
    # the devnet's own config: ``keeper devnet --duration`` is the command that cancels
    daemon = await devnet_daemon(anvil.url, tmp_path, monkeypatch)
    running = asyncio.create_task(daemon.run())
    try:
        deadline = time.monotonic() + 60
        # idle at the head: nothing is mined, so the keeper loop waits on its wake event
        while not (daemon.keeper is not None and daemon.keeper.last is not None):
            assert not running.done(), running
            assert time.monotonic() < deadline, "the keeper never ticked"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        daemon.wake.set()  # what a commit does
        running.cancel()
        done, _ = await asyncio.wait({running}, timeout=20)
        assert done, "the daemon did not end within 20 s of its cancellation"
        assert running.cancelled() or running.result() == 0
    finally:
        daemon.stop.set()  # a daemon that lost its cancellation still ends on its stop flag
        await asyncio.wait({running}, timeout=20)
