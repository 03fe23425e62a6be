"""A SQLite database another process holds locked past the busy timeout (``keeper db
rebuild`` run beside the daemon, say) fails the daemon's writes for that long; the
daemon logs it, goes on, and indexes what it missed once the lock is gone.

Until this test, the ``sqlite3.OperationalError`` ended the loop that met it, and with it
the daemon: every loop let only the package's own errors pass.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from support.devnet_daemon import devnet_daemon

from keeper.devnet.anvil import AnvilProcess, ChainControl

# the connection's busy timeout (keeper/store/db.py) and a margin past it
HELD_SECONDS = 10 + 3


async def until(
    what: str, check: Callable[[], bool], running: asyncio.Task[int], limit: float
) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert not running.done(), f"the daemon ended while waiting for {what}: {running}"
        assert time.monotonic() < deadline, f"no {what} within {limit} s"
        await asyncio.sleep(0.05)


async def test_a_database_locked_past_the_busy_timeout_is_waited_out(
    anvil: AnvilProcess, chain: ChainControl, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = await devnet_daemon(anvil.url, tmp_path, monkeypatch)
    indexer = daemon.c.indexer

    def at_head() -> bool:
        head = chain.block_number()
        return indexer.state.indexed >= head and daemon.lead.leading()

    running = asyncio.create_task(daemon.run())
    other = sqlite3.connect(daemon.cfg.database.target, isolation_level=None)
    try:
        with capture_logs() as logs:
            await until("the head indexed", at_head, running, 60)
            other.execute("BEGIN IMMEDIATE")  # the write lock, as a long rebuild holds it
            try:
                before = chain.block_number()
                await asyncio.to_thread(chain.mine, 2)
                await asyncio.sleep(HELD_SECONDS)
                assert indexer.state.indexed <= before, "a commit went through the lock"
            finally:
                other.execute("ROLLBACK")
            await asyncio.to_thread(chain.mine, 1)
            await until("the blocks mined meanwhile indexed", at_head, running, 90)
        # which loop meets the lock first is the scheduler's choice: the indexer's sync, its
        # lease renewal (it then steps down and takes the lease again) or the keeper's tick
        locked = [e for e in logs if e.get("kind") == "OperationalError" and "locked" in e["error"]]
        assert locked, [e for e in logs if e["log_level"] in ("warning", "error", "critical")]
        assert not running.done()
    finally:
        other.close()
        daemon.stop.set()
        await asyncio.wait({running}, timeout=30)
    assert running.result() == 0
